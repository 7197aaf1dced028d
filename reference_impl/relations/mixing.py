"""Counter-based randomness for lazy generation: a 64-bit mixer and a windowed permutation.

A synthetic relation must give the same page for the same ``(seed, block)`` whether it is asked
for first or millionth, and without generating anything before it. Two tools make that possible:

* ``mix64`` is the splitmix64 finaliser applied to a key: a fixed bijection of 64-bit words with
  good avalanche, vectorised over numpy ``uint64`` arrays (whose arithmetic wraps like C's). Keyed
  by ``(seed, stream, index)`` it gives an independent uniform number per index, so per-run or
  per-tuple choices need no generator state.
* ``window_permutation`` maps key ranks to heap positions for an index whose leaf order only
  partly follows heap order. Ranks are cut into windows of ``window`` consecutive ranks and each
  window is shuffled by a small Feistel network over the next power of four, with cycle walking to
  stay inside the window (the classic format-preserving construction). Each rank is mapped on its
  own, so one leaf page's TIDs cost a few vector operations whatever the index size, and the
  result is a bijection: every heap tuple has exactly one index entry.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["mix64", "uniform01", "window_permutation", "seed_words"]

_M64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_FEISTEL_ROUNDS = 4


def seed_words(*parts: int) -> np.uint64:
    """Fold several non-negative integers into one 64-bit key (deterministic, order-sensitive)."""
    acc = 0x6A09E667F3BCC909
    for p in parts:
        acc = (acc ^ (int(p) & _M64)) * 0x100000001B3 & _M64
        acc = (acc ^ (acc >> 29)) & _M64
    return np.uint64(acc)


def mix64(x: npt.NDArray[np.uint64] | np.uint64, key: np.uint64) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser of ``x + key·golden``: a keyed bijection of 64-bit words."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + key * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _C1
        z = (z ^ (z >> np.uint64(27))) * _C2
        return z ^ (z >> np.uint64(31))


def uniform01(index: npt.ArrayLike, key: np.uint64) -> npt.NDArray[np.float64]:
    """One uniform number in [0, 1) per index, for the stream named by ``key``."""
    z = mix64(np.asarray(index, dtype=np.uint64), key)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _feistel(x: npt.NDArray[np.uint64], half_bits: int, key: np.uint64) -> npt.NDArray[np.uint64]:
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(half_bits)
    left = x >> shift
    right = x & mask
    for r in range(_FEISTEL_ROUNDS):
        f = mix64(right, key + np.uint64(r + 1)) & mask
        left, right = right, left ^ f
    return (left << shift) | right


def window_permutation(
    ranks: npt.ArrayLike, total: int, window: int, key: np.uint64
) -> npt.NDArray[np.int64]:
    """Heap positions of key ranks: ranks shuffled within windows of ``window`` (1 = identity)."""
    r = np.asarray(ranks, dtype=np.int64)
    if window <= 1 or total <= 1:
        return r.copy()
    out = np.empty_like(r)
    win = r // window
    for w in np.unique(win):
        sel = win == w
        base = int(w) * window
        size = min(window, total - base)
        local = (r[sel] - base).astype(np.uint64)
        if size > 1:
            bits = max(2, (size - 1).bit_length())
            bits += bits & 1
            wkey = np.uint64(mix64(np.uint64(w), key))
            y = _feistel(local, bits // 2, wkey)
            bad = y >= np.uint64(size)
            while bad.any():
                y[bad] = _feistel(y[bad], bits // 2, wkey)
                bad = y >= np.uint64(size)
            local = y
        out[sel] = local.astype(np.int64) + base
    return out
