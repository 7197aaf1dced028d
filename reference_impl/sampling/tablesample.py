"""SYSTEM and BERNOULLI (``system.c``, ``bernoulli.c``) and the scan switches.

Both methods turn the ``real`` percentage into an integer cutoff and keep a
block (SYSTEM) or a line pointer (BERNOULLI) iff the hash of its key is below
it.  The tests depend only on the key and the seed, never on scan history, so a
whole relation can be decided in bulk: ``system_sample_block_chunks`` hashes
16,384 block numbers per numpy step (the arrays stay in the CPU cache, which is
twice as fast as steps of a million) and yields the chosen ones lazily, so an
8,388,608-block relation costs about 0.2 s and a few megabytes of memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .common import (
    _M32,
    MAX_OFFSET_NUMBER,
    SamplingError,
    _check_int,
    _check_nblocks,
    _check_real,
    _check_u32,
)
from .hashing import _np_hash_columns, hash_bytes_uint32

__all__ = [
    "SampleScanSwitches",
    "bernoulli_cutoff",
    "bernoulli_sample_tids",
    "bernoulli_tuple_selected",
    "percent_as_float4",
    "sample_method_switches",
    "system_block_selected",
    "system_cutoff",
    "system_sample_block_chunks",
    "system_sample_blocks",
]

_TWO32 = 4294967296.0
_CHUNK_BLOCKS = 1 << 14
_METHODS = ("system", "bernoulli", "system_rows", "system_time")


def percent_as_float4(percent: float) -> float:
    """The sample percentage as the server holds it: a ``real`` in [0, 100].

    The value is rounded to float32 (overflow and underflow are errors, as in a
    float8-to-real cast) and widened back; NaN or outside [0, 100] is an error.
    """
    value = _check_real("sample percentage", percent)
    with np.errstate(over="ignore", under="ignore"):
        as_real = float(np.float32(value))
    if math.isinf(as_real) and not math.isinf(value):
        raise SamplingError(f"sample percentage {value!r} overflows type real")
    if as_real == 0.0 and value != 0.0:
        raise SamplingError(f"sample percentage {value!r} underflows type real")
    if math.isnan(as_real) or not 0.0 <= as_real <= 100.0:
        raise SamplingError(f"sample percentage must be between 0 and 100, got {value!r}")
    return as_real


def system_cutoff(percent: float) -> int:
    """``system_beginsamplescan``'s cutoff: rint(2**32 * p / 100), half to even.

    A block is sampled iff its hash is below the cutoff; 0 selects nothing and
    2**32 (p = 100) everything.
    """
    # Left to right in double precision, as C evaluates it; round() on a float
    # rounds half to even like rint() in the default rounding mode.
    return round(_TWO32 * percent_as_float4(percent) / 100)


def bernoulli_cutoff(percent: float) -> int:
    """``bernoulli_beginsamplescan``'s cutoff (the same rule as SYSTEM)."""
    return system_cutoff(percent)


def _check_cutoff(cutoff: object) -> int:
    return _check_int("cutoff", cutoff, 0, 1 << 32)


def _select_below(hashes: npt.NDArray[np.uint32], cutoff: int) -> npt.NDArray[np.bool_]:
    if cutoff > _M32:
        return np.ones(hashes.shape, dtype=bool)
    return hashes < np.uint32(cutoff)


def system_block_selected(block: int, seed: int, cutoff: int) -> bool:
    """Scalar SYSTEM test: is ``block`` in the sample?"""
    return hash_bytes_uint32([block, seed]) < _check_cutoff(cutoff)


def system_sample_block_chunks(
    nblocks: int, percent: float, seed: int, *, chunk_blocks: int = _CHUNK_BLOCKS
) -> Iterator[npt.NDArray[np.uint32]]:
    """SYSTEM's selected blocks, ascending, as a lazy series of uint32 arrays.

    ``system_nextsampleblock`` tests block numbers 0 .. nblocks-1 in order; here
    ``chunk_blocks`` of them are hashed per step and only non-empty selections are
    yielded, so memory stays at a few arrays of ``chunk_blocks`` words.
    """
    total = _check_nblocks(nblocks)
    cutoff = system_cutoff(percent)
    seed_word = np.uint32(_check_u32("seed", seed))
    step = _check_int("chunk_blocks", chunk_blocks, 1, 1 << 28)
    # Validation above runs at call time; only the hashing below is lazy.
    return _system_chunks(total, cutoff, seed_word, step)


def _system_chunks(
    total: int, cutoff: int, seed_word: np.uint32, step: int
) -> Iterator[npt.NDArray[np.uint32]]:
    if cutoff == 0:
        return
    for start in range(0, total, step):
        blocks = np.arange(start, min(start + step, total), dtype=np.uint32)
        if cutoff > _M32:
            yield blocks
            continue
        chosen = blocks[_select_below(_np_hash_columns([blocks, seed_word]), cutoff)]
        if chosen.size:
            yield chosen


def system_sample_blocks(
    nblocks: int, percent: float, seed: int, *, chunk_blocks: int = _CHUNK_BLOCKS
) -> npt.NDArray[np.uint32]:
    """All blocks ``TABLESAMPLE SYSTEM(percent)`` reads, ascending (one array)."""
    chunks = list(system_sample_block_chunks(nblocks, percent, seed, chunk_blocks=chunk_blocks))
    if not chunks:
        return np.empty(0, dtype=np.uint32)
    return np.concatenate(chunks)


def _check_max_offset(max_offset: object) -> int:
    return _check_int("max_offset", max_offset, 0, MAX_OFFSET_NUMBER)


def bernoulli_tuple_selected(block: int, max_offset: int, seed: int, cutoff: int) -> npt.NDArray[np.uint16]:
    """Offsets of ``block`` that BERNOULLI returns if they hold visible tuples.

    ``bernoulli_nextsampletuple`` tests every line pointer 1 .. max_offset, used or
    not; the scan then skips unused, dead and invisible candidates.
    """
    blk = _check_u32("block", block)
    top = _check_max_offset(max_offset)
    cut = _check_cutoff(cutoff)
    offsets = np.arange(1, top + 1, dtype=np.uint32)
    hashes = _np_hash_columns([np.uint32(blk), offsets, np.uint32(_check_u32("seed", seed))])
    return offsets[_select_below(hashes, cut)].astype(np.uint16)


def bernoulli_sample_tids(max_offsets: npt.ArrayLike, percent: float, seed: int) -> npt.NDArray[np.uint32]:
    """Candidate TIDs of a whole relation as an (n, 2) array of (block, offset).

    ``max_offsets[b]`` is ``PageGetMaxOffsetNumber`` of block ``b``.  The result
    is in block order; a scan that starts elsewhere (synchronized scan) returns
    the same set rotated, since each test depends only on (block, offset, seed).
    """
    counts = np.asarray(max_offsets)
    if counts.ndim != 1 or counts.dtype.kind not in "iu":
        raise SamplingError("max_offsets must be a 1-D array of integers")
    if counts.size and (counts.min() < 0 or counts.max() > MAX_OFFSET_NUMBER):
        raise SamplingError(
            f"max_offsets must lie in [0, {MAX_OFFSET_NUMBER}], got values from "
            f"{int(counts.min())} to {int(counts.max())}"
        )
    _check_nblocks(counts.size)
    cutoff = bernoulli_cutoff(percent)
    counts64 = counts.astype(np.int64)
    blocks = np.repeat(np.arange(counts.size, dtype=np.uint32), counts64)
    starts = np.cumsum(counts64) - counts64
    offsets = (np.arange(blocks.size, dtype=np.int64) - np.repeat(starts, counts64) + 1).astype(np.uint32)
    hashes = _np_hash_columns([blocks, offsets, np.uint32(_check_u32("seed", seed))])
    keep = _select_below(hashes, cutoff)
    return np.stack([blocks[keep], offsets[keep]], axis=1)


@dataclass(frozen=True)
class SampleScanSwitches:
    """Scan switches chosen by a method's BeginSampleScan (``tablesample_init``).

    ``allow_sync`` is true only for methods without NextSampleBlock (BERNOULLI).
    """

    use_bulkread: bool
    use_pagemode: bool
    allow_sync: bool


def sample_method_switches(method: str, percent: float | None = None) -> SampleScanSwitches:
    """``use_bulkread`` / ``use_pagemode`` / sync-scan permission per method.

    SYSTEM: bulkread iff percent >= 1, pagemode on.  BERNOULLI: bulkread on,
    pagemode iff percent >= 25, sync scan allowed.  SYSTEM_ROWS: pagemode forced
    on.  SYSTEM_TIME: both defaults (on).  The percentage is compared after
    rounding to float4, so 0.99999999 counts as 1.
    """
    name = method.lower() if isinstance(method, str) else method
    if name not in _METHODS:
        raise SamplingError(f"unknown sampling method {method!r}; expected one of {_METHODS}")
    if name in ("system", "bernoulli"):
        if percent is None:
            raise SamplingError(f"method {name!r} needs its percentage argument")
        pct = percent_as_float4(percent)
        if name == "system":
            return SampleScanSwitches(pct >= 1.0, True, False)
        return SampleScanSwitches(True, pct >= 25.0, True)
    if percent is not None:
        raise SamplingError(f"method {name!r} takes no percentage, got {percent!r}")
    return SampleScanSwitches(True, True, False)
