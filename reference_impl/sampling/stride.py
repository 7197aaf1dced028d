"""SYSTEM_ROWS and SYSTEM_TIME (``tsm_system_rows.c``, ``tsm_system_time.c``).

Both contrib methods visit blocks by linear probing: on the first scan of a query
they seed a private PRNG with the plan's seed, pick a start block ``firstblock``
and a stride ``step`` coprime with the relation size, and then return
``firstblock + k*step (mod nblocks)`` for k = 1, 2, ...  -- a permutation of all
blocks.  The plan values survive rescans; the per-scan counters do not.  They
differ only in when they stop: SYSTEM_ROWS once the scan node has returned
enough tuples, SYSTEM_TIME once enough time has passed.  Both stop conditions
belong to the caller (the scan owns the tuple count and the virtual clock), so
``StrideSampler.next_block`` takes the condition as a flag or a callable that it
evaluates at exactly the point where PostgreSQL does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .common import (
    _M32,
    INVALID_BLOCK_NUMBER,
    SamplingError,
    _check_int,
    _check_nblocks,
    _check_real,
    _check_u32,
)
from .prng import PgPrng, sampler_prng

__all__ = [
    "StrideSampler",
    "SystemRowsSampler",
    "SystemTimeSampler",
    "random_relative_prime",
    "stride_plan",
    "stride_visit_order",
    "system_rows_ntuples",
    "system_time_millis",
]


def system_rows_ntuples(ntuples: int) -> int:
    """SYSTEM_ROWS's ``int8`` row count, validated as BeginSampleScan does."""
    return _check_int("SYSTEM_ROWS sample size", ntuples, 0, (1 << 63) - 1)


def system_time_millis(millis: float) -> float:
    """SYSTEM_TIME's ``float8`` milliseconds, validated (>= 0, not NaN)."""
    value = _check_real("SYSTEM_TIME milliseconds", millis)
    if math.isnan(value) or value < 0:
        raise SamplingError(f"SYSTEM_TIME milliseconds must be >= 0 and not NaN, got {value!r}")
    return value


def _gcd_u32(a: int, b: int) -> int:
    while a != 0:
        a, b = b % a, a
    return b


def random_relative_prime(n: int, prng: PgPrng) -> int:
    """A random step in [1, n) coprime with ``n`` (1 when n <= 1)."""
    total = _check_u32("n", n)
    if total <= 1:
        return 1
    while True:
        r = int(prng.sampler_random_fract() * total)
        if r != 0 and _gcd_u32(r, total) == 1:
            return r


def stride_plan(seed: int, nblocks: int) -> tuple[int, int]:
    """(firstblock, step) the stride methods draw for ``seed`` and ``nblocks`` > 0."""
    total = _check_nblocks(nblocks)
    if total == 0:
        raise SamplingError("a stride plan needs nblocks >= 1, got 0")
    prng = sampler_prng(seed)
    firstblock = int(prng.sampler_random_fract() * total)
    return firstblock, random_relative_prime(total, prng)


def stride_visit_order(seed: int, nblocks: int) -> npt.NDArray[np.uint32]:
    """Every block in the order SYSTEM_ROWS / SYSTEM_TIME visit them.

    Block k (k = 1 .. nblocks) is (firstblock + k*step) mod nblocks; the first
    block visited is firstblock + step, not firstblock.
    """
    total = _check_nblocks(nblocks)
    if total == 0:
        return np.empty(0, dtype=np.uint32)
    first, step = stride_plan(seed, total)
    ks = np.arange(1, total + 1, dtype=np.uint64)
    # step*k + first < 2**64 for every k <= nblocks < 2**32: no uint64 overflow.
    order = (ks * np.uint64(step) + np.uint64(first)) % np.uint64(total)
    return order.astype(np.uint32)


class StrideSampler:
    """Plan and scan state of ``system_rows_nextsampleblock`` and
    ``system_time_nextsampleblock`` (``tsm_system_rows.c``, ``tsm_system_time.c``).

    ``nblocks``, ``firstblock`` and ``step`` belong to the plan and survive
    rescans (``step == 0`` means "not chosen yet"); ``doneblocks`` and ``lb``
    belong to one scan and are reset by ``begin_scan``.
    """

    def __init__(self, seed: int) -> None:
        self.seed = _check_u32("seed", seed)
        self.nblocks = 0
        self.firstblock = 0
        self.step = 0
        self.doneblocks = 0
        self.lb = 0

    @classmethod
    def from_plan(cls, nblocks: int, firstblock: int, step: int) -> StrideSampler:
        """A sampler whose plan is already fixed, e.g. inferred from a server run
        (the seed itself is not observable; see ``sampling.md`` section 8).
        """
        total = _check_int("nblocks", nblocks, 1, _M32)
        first = _check_int("firstblock", firstblock, 0, total - 1)
        stride = _check_int("step", step, 1, max(1, total - 1))
        if _gcd_u32(stride, total) != 1:
            raise SamplingError(f"step {stride} is not coprime with nblocks {total}")
        sampler = cls(0)
        sampler.nblocks, sampler.firstblock, sampler.step = total, first, stride
        return sampler

    def begin_scan(self) -> None:
        """BeginSampleScan (first scan or rescan): restart from firstblock."""
        self.doneblocks = 0

    @property
    def scan_starting(self) -> bool:
        """True iff the next ``next_block`` call is the first of this scan.

        SYSTEM_TIME takes its start time during that call; a caller on a virtual
        clock records it just before the call.
        """
        return self.doneblocks == 0

    def next_block(self, current_nblocks: int, stop: bool | Callable[[], bool] = False) -> int:
        """The next block to read, or ``INVALID_BLOCK_NUMBER`` at the end.

        ``stop`` is the caller's end condition (SYSTEM_ROWS: tuples returned >=
        limit; SYSTEM_TIME: elapsed ms >= limit).  A callable is evaluated exactly
        where PostgreSQL evaluates it: after ``doneblocks`` is incremented and
        found not to exceed ``nblocks``, before ``lb`` advances.
        """
        current = _check_nblocks(current_nblocks)
        if self.doneblocks == 0:
            if self.step == 0:
                if current == 0:
                    return INVALID_BLOCK_NUMBER
                self.nblocks = current
                self.firstblock, self.step = stride_plan(self.seed, current)
            self.lb = self.firstblock
        self.doneblocks += 1
        if self.doneblocks > self.nblocks:
            return INVALID_BLOCK_NUMBER
        if stop() if callable(stop) else stop:
            return INVALID_BLOCK_NUMBER
        if current == 0:
            # PostgreSQL would probe forever here (no block number is < 0).
            raise SamplingError(
                f"relation shrank to 0 blocks during a rescan; the plan was made for {self.nblocks} blocks"
            )
        lb = (self.lb + self.step) % self.nblocks
        while lb >= current:
            lb = (lb + self.step) % self.nblocks
        self.lb = lb
        return lb


class SystemRowsSampler:
    """``TABLESAMPLE SYSTEM_ROWS(n)`` (``tsm_system_rows.c``): stride blocks until
    the scan node has returned ``n`` tuples.

    ``seed`` is the plan's random seed (``pg_prng_uint32`` of the backend's PRNG)
    or a ready ``StrideSampler`` such as ``StrideSampler.from_plan(...)``.
    """

    def __init__(self, seed: int | StrideSampler) -> None:
        self.plan = seed if isinstance(seed, StrideSampler) else StrideSampler(seed)
        self.ntuples: int | None = None

    def begin_scan(self, ntuples: int) -> None:
        """BeginSampleScan: the (re-evaluated) row count; plan state is kept."""
        self.ntuples = system_rows_ntuples(ntuples)
        self.plan.begin_scan()

    def _limit(self) -> int:
        if self.ntuples is None:
            raise SamplingError("begin_scan(ntuples) must be called before sampling")
        return self.ntuples

    def next_block(self, current_nblocks: int, donetuples: int) -> int:
        """NextSampleBlock given the tuples the scan node has returned so far."""
        limit = self._limit()
        done = _check_int("donetuples", donetuples, 0, (1 << 63) - 1)
        return self.plan.next_block(current_nblocks, done >= limit)

    def tuples_exhausted(self, donetuples: int) -> bool:
        """NextSampleTuple's early exit: stop this page once the limit is met."""
        return _check_int("donetuples", donetuples, 0, (1 << 63) - 1) >= self._limit()


class SystemTimeSampler:
    """``TABLESAMPLE SYSTEM_TIME(ms)`` (``tsm_system_time.c``): stride blocks
    until ``ms`` milliseconds have passed since the scan's first block request.

    ``now_us`` is the caller's clock in integer microseconds (a virtual clock);
    ``seed`` is as for ``SystemRowsSampler``.
    """

    def __init__(self, seed: int | StrideSampler, now_us: Callable[[], int]) -> None:
        self.plan = seed if isinstance(seed, StrideSampler) else StrideSampler(seed)
        self.millis: float | None = None
        self._now_us = now_us
        self._start_us = 0

    def begin_scan(self, millis: float) -> None:
        """BeginSampleScan: the (re-evaluated) time limit; plan state is kept."""
        self.millis = system_time_millis(millis)
        self.plan.begin_scan()

    def _expired(self) -> bool:
        assert self.millis is not None
        return (self._now_us() - self._start_us) / 1000.0 >= self.millis

    def next_block(self, current_nblocks: int) -> int:
        """NextSampleBlock; the clock is read only when a block is requested."""
        if self.millis is None:
            raise SamplingError("begin_scan(millis) must be called before sampling")
        if self.plan.scan_starting:
            self._start_us = self._now_us()
        return self.plan.next_block(current_nblocks, self._expired)
