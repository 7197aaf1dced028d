"""ANALYZE's block sampler and row reservoir (``sampling.c``, ``analyze.c``).

``acquire_sample_rows`` draws two seeds from the backend's global PRNG: the
first seeds ``BlockSampler`` (Knuth's algorithm S: min(targrows, nblocks)
distinct blocks, ascending, one random fraction per chosen block while choice is
still open), the second ``ReservoirState`` (Vitter's algorithms X and Z: how many
live rows to skip before replacing a random reservoir slot).  Only the block
sampler decides I/O; the reservoir is modelled for completeness of the row loop.

Algorithm S's "skip" loop multiplies a probability by one factor per skipped
block.  ``_count_skips`` does the first few dozen steps in Python and the rest
with ``numpy.cumprod`` -- an accumulate is a strictly left-to-right product, so
every intermediate double equals the one C computes, while a sample of 30,000
blocks from millions no longer costs one Python iteration per block.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from .common import SamplingError, _check_int, _check_nblocks
from .prng import sampler_prng

__all__ = [
    "BlockSampler",
    "ReservoirState",
    "RowReservoir",
    "analyze_sample_blocks",
    "analyze_targrows",
]


_SCALAR_SKIPS = 48
_MAX_SKIP_CHUNK = 1 << 16


def _count_skips(v: float, p: float, k: int, big_k: int) -> int:
    """How many blocks algorithm S skips: the ``while (V < p)`` loop.

    Each skip lowers K by one and multiplies p by (1 - k/K).  Long runs are done
    with numpy: ``cumprod`` is a left-to-right product, so every intermediate p is
    the double C computes.  The loop always ends once K reaches k (p becomes 0).
    """
    skips = 0
    while v < p:
        if skips >= _SCALAR_SKIPS:
            break
        skips += 1
        big_k -= 1
        p *= 1.0 - k / big_k
    else:
        return skips
    while True:
        width = min(big_k - k, max(256, 4 * (big_k // k)), _MAX_SKIP_CHUNK)
        remaining = big_k - np.arange(1, width + 1, dtype=np.float64)
        factors = np.empty(width + 1, dtype=np.float64)
        factors[0] = p
        np.subtract(1.0, k / remaining, out=factors[1:])
        probs = np.cumprod(factors)[1:]
        stops = np.flatnonzero(~(v < probs))
        if stops.size:
            return skips + int(stops[0]) + 1
        skips += width
        big_k -= width
        p = float(probs[-1])


class BlockSampler:
    """``BlockSamplerData`` with ``BlockSampler_Init`` / ``_HasMore`` / ``_Next``
    (``src/backend/utils/misc/sampling.c``): Knuth's algorithm S choosing
    ``min(samplesize, nblocks)`` distinct blocks in ascending order.
    """

    def __init__(self, nblocks: int, samplesize: int, seed: int) -> None:
        self.N = _check_nblocks(nblocks)
        self.n = _check_int("samplesize", samplesize, 0, (1 << 31) - 1)
        self.t = 0
        self.m = 0
        self.prng = sampler_prng(seed)

    @property
    def sample_count(self) -> int:
        """What ``BlockSampler_Init`` returns: how many blocks will be chosen."""
        return min(self.n, self.N)

    def has_more(self) -> bool:
        return self.t < self.N and self.m < self.n

    def next(self) -> int:
        """The next sampled block number (only while ``has_more()``)."""
        if not self.has_more():
            raise SamplingError(
                f"BlockSampler exhausted: {self.m} of {self.n} chosen, {self.t} of {self.N} blocks considered"
            )
        big_k = self.N - self.t
        k = self.n - self.m
        if k < big_k:
            v = self.prng.sampler_random_fract()
            self.t += _count_skips(v, 1.0 - k / big_k, k, big_k)
        self.m += 1
        self.t += 1
        return self.t - 1


def analyze_sample_blocks(nblocks: int, targrows: int, seed: int) -> npt.NDArray[np.uint32]:
    """The ascending block list ANALYZE reads for the block-sampler ``seed``."""
    sampler = BlockSampler(nblocks, targrows, seed)
    out = np.empty(sampler.sample_count, dtype=np.uint32)
    for i in range(out.size):
        out[i] = sampler.next()
    return out


def analyze_targrows(statistics_target: int) -> int:
    """Rows (and at most blocks) ANALYZE samples: 300 x the largest target."""
    return 300 * _check_int("statistics target", statistics_target, 1, 10000)


class ReservoirState:
    """``ReservoirStateData`` with ``reservoir_init_selection_state`` and
    ``reservoir_get_next_S`` (``sampling.c``; Vitter 1985, algorithms X and Z).

    ``seed`` is the second ``pg_prng_uint32`` ANALYZE draws from the backend's
    global generator; construction already consumes one fraction for W.
    """

    def __init__(self, seed: int, n: int) -> None:
        self.prng = sampler_prng(seed)
        size = _check_int("reservoir size", n, 1, (1 << 31) - 1)
        self.W = math.exp(-math.log(self.prng.sampler_random_fract()) / size)

    def get_next_s(self, t: float, n: int) -> float:
        """Rows to skip before the next replacement, having processed ``t``."""
        size = _check_int("reservoir size", n, 1, (1 << 31) - 1)
        if t <= 22.0 * size:
            v = self.prng.sampler_random_fract()
            s = 0.0
            t += 1
            quot = (t - size) / t
            while quot > v:
                s += 1
                t += 1
                quot *= (t - size) / t
            return s
        w = self.W
        term = t - size + 1
        while True:
            u = self.prng.sampler_random_fract()
            x = t * (w - 1.0)
            s = float(math.floor(x))
            tmp = (t + 1) / term
            lhs = math.exp(math.log(((u * tmp * tmp) * (term + s)) / (t + x)) / size)
            rhs = (((t + x) / (term + s)) * term) / t
            if lhs <= rhs:
                w = rhs / lhs
                break
            y = (((u * (t + 1)) / term) * (t + s + 1)) / (t + x)
            if size < s:
                denom = t
                numer_lim = term + s
            else:
                denom = t - size + s
                numer_lim = t + 1
            numer = t + s
            while numer >= numer_lim:
                y *= numer / denom
                denom -= 1
                numer -= 1
            w = math.exp(-math.log(self.prng.sampler_random_fract()) / size)
            if math.exp(math.log(y) / size) <= (t + x) / t:
                break
        self.W = w
        return s


class RowReservoir:
    """The row loop of ``acquire_sample_rows`` (``analyze.c``): which reservoir
    slot each live row goes to.
    """

    def __init__(self, targrows: int, seed: int) -> None:
        self.targrows = _check_int("targrows", targrows, 1, (1 << 31) - 1)
        self.state = ReservoirState(seed, self.targrows)
        self.numrows = 0
        self.samplerows = 0.0
        self.rowstoskip = -1.0

    def offer(self) -> int | None:
        """Process the next live row: its slot index, or None if it is skipped."""
        slot: int | None
        if self.numrows < self.targrows:
            slot = self.numrows
            self.numrows += 1
        else:
            if self.rowstoskip < 0:
                self.rowstoskip = self.state.get_next_s(self.samplerows, self.targrows)
            slot = None
            if self.rowstoskip <= 0:
                slot = int(self.targrows * self.state.prng.sampler_random_fract())
            self.rowstoskip -= 1
        self.samplerows += 1
        return slot
