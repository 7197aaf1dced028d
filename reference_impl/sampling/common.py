"""Shared constants, the error type and argument checks of the sampling package.

Every check raises ``SamplingError`` (a ``ValueError``) naming the parameter, the
bad value and the allowed range, so that a test or a user sees at once which
argument PostgreSQL would have rejected.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import numpy.typing as npt

__all__ = ["INVALID_BLOCK_NUMBER", "MAX_OFFSET_NUMBER", "SamplingError"]

INVALID_BLOCK_NUMBER = 0xFFFFFFFF
"""``InvalidBlockNumber``: returned by a block source to end the scan."""

MAX_OFFSET_NUMBER = 2048
"""``MaxOffsetNumber`` for 8 kB pages (BLCKSZ / sizeof(ItemIdData))."""

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


class SamplingError(ValueError):
    """A sampling parameter PostgreSQL would reject (or a state it cannot reach)."""


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise SamplingError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    ivalue = int(value)
    if not lo <= ivalue <= hi:
        raise SamplingError(f"{name} must be in [{lo}, {hi}], got {ivalue}")
    return ivalue


def _check_u32(name: str, value: object) -> int:
    return _check_int(name, value, 0, _M32)


def _check_nblocks(value: object) -> int:
    # A relation has at most MaxBlockNumber + 1 = 0xFFFFFFFF blocks.
    return _check_int("nblocks", value, 0, _M32)


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise SamplingError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise SamplingError(f"{name} {value!r} does not fit in a float8") from None


def _as_u32_array(name: str, values: npt.ArrayLike) -> npt.NDArray[np.uint32]:
    arr = np.asarray(values)
    if arr.dtype == np.uint32:
        return arr
    if arr.dtype.kind not in "iu":
        raise SamplingError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > _M32):
        raise SamplingError(
            f"{name} must lie in [0, {_M32}], got values from {int(arr.min())} to {int(arr.max())}"
        )
    return arr.astype(np.uint32)
