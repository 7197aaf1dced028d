"""``pg_prng.c``: xoroshiro128** 1.0 seeded through splitmix64.

Every seeded random choice of the sampling code (SYSTEM_ROWS / SYSTEM_TIME's
start block and stride, ANALYZE's block sampler and reservoir) draws from a
private ``pg_prng_state`` seeded with a uint32 by ``sampler_random_init_state``.
The generator is plain 64-bit integer arithmetic, done here on Python ints masked
to 64 bits; ``fseed`` is the ``setseed()`` path, which lets a live server's
``random()`` check the core.
"""

from __future__ import annotations

import math

from .common import _M64, SamplingError, _check_int, _check_real, _check_u32

__all__ = ["PgPrng", "sampler_prng"]


def _rotl64(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & _M64


class PgPrng:
    """``pg_prng_state`` and its functions (``src/common/pg_prng.c``).

    ``PgPrng(seed)`` is ``pg_prng_seed(state, seed)`` for a 64-bit seed.
    """

    __slots__ = ("s0", "s1")

    def __init__(self, seed: int = 0) -> None:
        self.s0 = 0
        self.s1 = 0
        self.seed(seed)

    @classmethod
    def from_state(cls, s0: int, s1: int) -> PgPrng:
        """A generator positioned at an explicit state (both words uint64)."""
        prng = cls(0)
        prng.s0 = _check_int("s0", s0, 0, _M64)
        prng.s1 = _check_int("s1", s1, 0, _M64)
        prng._avoid_zero_state()
        return prng

    @property
    def state(self) -> tuple[int, int]:
        return (self.s0, self.s1)

    def seed(self, seed: int) -> None:
        """``pg_prng_seed``: two splitmix64 outputs become s0 and s1."""
        z = _check_int("PRNG seed", seed, 0, _M64)
        words = []
        for _ in range(2):
            z = (z + 0x9E3779B97F4A7C15) & _M64
            v = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
            v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & _M64
            words.append(v ^ (v >> 31))
        self.s0, self.s1 = words
        self._avoid_zero_state()

    def fseed(self, fseed: float) -> None:
        """``pg_prng_fseed``, the path of SQL ``setseed(f)`` (f in [-1, 1])."""
        value = _check_real("setseed value", fseed)
        if math.isnan(value) or not -1.0 <= value <= 1.0:
            raise SamplingError(f"setseed value {value!r} is outside [-1, 1]")
        # (double)(2**52 - 1) * f, truncated toward zero to int64, then as uint64.
        self.seed(int(float((1 << 52) - 1) * value) & _M64)

    def _avoid_zero_state(self) -> None:
        if self.s0 == 0 and self.s1 == 0:
            self.s0 = 0x5851F42D4C957F2D
            self.s1 = 0x14057B7EF767814F

    def next_u64(self) -> int:
        """One xoroshiro128** step (``pg_prng_uint64``)."""
        s0 = self.s0
        sx = self.s1 ^ s0
        result = (_rotl64((s0 * 5) & _M64, 7) * 9) & _M64
        self.s0 = _rotl64(s0, 24) ^ sx ^ ((sx << 16) & _M64)
        self.s1 = _rotl64(sx, 37)
        return result

    def uint32(self) -> int:
        """``pg_prng_uint32``: the upper half of one step."""
        return self.next_u64() >> 32

    def double(self) -> float:
        """``pg_prng_double``: 52 upper bits scaled to [0, 1)."""
        return (self.next_u64() >> 12) * 2.0**-52

    def sampler_random_fract(self) -> float:
        """``sampler_random_fract``: ``double()`` redrawn while it is 0.0."""
        while True:
            value = self.double()
            if value != 0.0:
                return value


def sampler_prng(seed: int) -> PgPrng:
    """``sampler_random_init_state``: a private generator for a uint32 seed."""
    return PgPrng(_check_u32("sampler seed", seed))
