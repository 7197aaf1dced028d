"""PostgreSQL's hash functions for index keys, and the bucket a hash value goes to.

``hash_bytes_uint32`` is Bob Jenkins' ``final`` mix over one 32-bit word as ``common/hashfn.c``
has it; ``hashint4`` and ``hashint8`` are the hash opclass support functions of ``int4`` and
``int8`` (``access/hash/hashfunc.c``); ``hashkey_to_bucket`` is ``_hash_hashkey2bucket``
(``hashutil.c``) with the masks ``_hash_init_metabuffer`` sets for a bucket count. All work on
numpy arrays (and plain ints), with the values a PostgreSQL 18 server returns (checked against
the embedded server in the project's tests).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["HASH_FUNCTIONS", "hash_bytes_uint32", "hashint4", "hashint8", "hash_masks", "hashkey_to_bucket"]

_U32 = np.uint32


def _rot(x: npt.NDArray[np.uint32], k: int) -> npt.NDArray[np.uint32]:
    return (x << _U32(k)) | (x >> _U32(32 - k))


def hash_bytes_uint32(k: npt.ArrayLike) -> npt.NDArray[np.uint32]:
    """``hash_bytes_uint32``: the 32-bit hash of each 32-bit word in ``k``."""
    key = np.asarray(k, dtype=np.int64).astype(np.uint32)
    with np.errstate(over="ignore"):
        init = _U32(0x9E3779B9 + 4 + 3923095)
        a = np.full(key.shape, init, dtype=np.uint32) + key
        b = np.full(key.shape, init, dtype=np.uint32)
        c = np.full(key.shape, init, dtype=np.uint32)
        # final(a, b, c)
        c ^= b
        c -= _rot(b, 14)
        a ^= c
        a -= _rot(c, 11)
        b ^= a
        b -= _rot(a, 25)
        c ^= b
        c -= _rot(b, 16)
        a ^= c
        a -= _rot(c, 4)
        b ^= a
        b -= _rot(a, 14)
        c ^= b
        c -= _rot(b, 24)
    return c


def hashint4(v: npt.ArrayLike) -> npt.NDArray[np.uint32]:
    """``hashint4``: ``hash_uint32`` of the value (SQL shows it as a signed int4)."""
    return hash_bytes_uint32(np.asarray(v, dtype=np.int64) & 0xFFFFFFFF)


def hashint8(v: npt.ArrayLike) -> npt.NDArray[np.uint32]:
    """``hashint8``: the low half xor the high half (complemented for negative values), so that
    an int8 equal to an int4 hashes alike."""
    val = np.asarray(v, dtype=np.int64)
    lo = val & 0xFFFFFFFF
    hi = (val >> 32) & 0xFFFFFFFF
    lo = lo ^ np.where(val >= 0, hi, ~hi & 0xFFFFFFFF)
    return hash_bytes_uint32(lo)


HASH_FUNCTIONS = {"hashint4": hashint4, "hashint8": hashint8}


def hash_masks(nbuckets: int) -> tuple[int, int, int]:
    """``(maxbucket, highmask, lowmask)`` of a hash index built with ``nbuckets`` buckets."""
    maxbucket = nbuckets - 1
    highmask = (1 << nbuckets.bit_length()) - 1  # pg_nextpower2_32(nbuckets + 1) - 1
    return maxbucket, highmask, highmask >> 1


def hashkey_to_bucket(hashkey: npt.ArrayLike, nbuckets: int) -> npt.NDArray[np.int64]:
    """``_hash_hashkey2bucket``: ``hash & highmask``, folded by ``lowmask`` above ``maxbucket``."""
    maxbucket, highmask, lowmask = hash_masks(nbuckets)
    h = np.asarray(hashkey, dtype=np.uint32).astype(np.int64)
    bucket = h & highmask
    return np.where(bucket > maxbucket, bucket & lowmask, bucket)
