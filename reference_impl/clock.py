"""Virtual time, and a deterministic scheduler for several simulated processes.

Nothing in the model sleeps. Time is an integer number of microseconds on a ``VirtualClock``;
work that would take time in PostgreSQL (CPU work on a page, waiting for a read) moves the
clock forward instead. A simulated 64 GiB scan therefore costs only the Python work of
simulating it.

One backend needs nothing more: ``advance(us)`` adds to ``now`` and ``wait_until(t)`` jumps to
``t``. Several backends sharing a buffer pool and a device (the multi-client benchmarks, a
foreign backend holding an I/O) must interleave in virtual-time order, and they are written as
ordinary sequential code, as PostgreSQL backends are. ``Simulation`` runs each one in its own
thread but lets exactly one run at a time: a process that would move time forward past another
process's wake-up time hands control to the earliest one (ties broken by a sequence number,
as SimPy orders its event heap), so a run is deterministic and the clock never goes backwards.
A process that stays the earliest keeps running without any thread switch, so the single-backend
case pays nothing for this.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any

from .errors import ModelUsageError

__all__ = ["VirtualClock", "Simulation", "SimProcess"]


class VirtualClock:
    """Simulated time in integer microseconds (models wall-clock time of the whole instance)."""

    __slots__ = ("now", "_sim")

    def __init__(self, start_us: int = 0) -> None:
        if not isinstance(start_us, int) or start_us < 0:
            raise ModelUsageError(f"clock start {start_us!r} must be a non-negative integer (µs)")
        self.now: int = start_us
        self._sim: Simulation | None = None

    def advance(self, us: int) -> None:
        """Spend ``us`` microseconds (CPU work, a sleep); other processes may run meanwhile."""
        if us <= 0:
            if us < 0:
                raise ModelUsageError(f"cannot advance the clock by {us} µs: time never goes back")
            return
        target = self.now + us
        if self._sim is None:
            self.now = target
        else:
            self._sim._block_until(target)

    def wait_until(self, t_us: int) -> None:
        """Block until time ``t_us`` (no-op if it has passed)."""
        if t_us <= self.now:
            return
        if self._sim is None:
            self.now = t_us
        else:
            self._sim._block_until(t_us)

    @property
    def now_ms(self) -> float:
        return self.now / 1000.0

    def __repr__(self) -> str:
        return f"VirtualClock(now={self.now} µs)"


class SimProcess:
    """One simulated process (a backend); created by :meth:`Simulation.spawn`."""

    def __init__(self, sim: Simulation, name: str, fn: Callable[..., Any], args: tuple) -> None:
        self.sim = sim
        self.name = name
        self._fn = fn
        self._args = args
        self._go = threading.Semaphore(0)
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.finished_at: int | None = None
        self._thread = threading.Thread(target=self._main, name=f"sim:{name}", daemon=True)

    def _main(self) -> None:
        self._go.acquire()
        try:
            self.result = self._fn(*self._args)
        except BaseException as exc:  # re-raised by Simulation.run in the caller's thread
            self.error = exc
        finally:
            self.done = True
            self.finished_at = self.sim.clock.now
            self.sim._finished(self)

    def __repr__(self) -> str:
        return f"SimProcess({self.name!r}, done={self.done})"


class Simulation:
    """Runs several processes on one ``VirtualClock`` in deterministic virtual-time order.

    Models the postmaster's children running concurrently: each ``spawn``-ed function is a
    backend's main loop; ``run()`` returns when all have finished and re-raises the first error.
    """

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._procs: list[SimProcess] = []
        self._heap: list[tuple[int, int, SimProcess]] = []
        self._seq = itertools.count()
        self._back = threading.Semaphore(0)
        self._current: SimProcess | None = None
        self._running = False

    def spawn(self, fn: Callable[..., Any], *args: Any, name: str | None = None) -> SimProcess:
        if self._running:
            raise ModelUsageError("spawn() must be called before run()")
        proc = SimProcess(self, name or f"proc{len(self._procs)}", fn, args)
        self._procs.append(proc)
        return proc

    def run(self) -> list[Any]:
        """Run every process to completion; return their results in spawn order."""
        if self.clock._sim is not None:
            raise ModelUsageError("another Simulation is already running on this clock")
        self._running = True
        self.clock._sim = self
        try:
            for proc in self._procs:
                heapq.heappush(self._heap, (self.clock.now, next(self._seq), proc))
                proc._thread.start()
            if self._heap:
                # Processes hand control to each other directly; this thread is woken once, when
                # the last one finishes or one fails.
                self._resume_next()
                self._back.acquire()
            for proc in self._procs:
                if proc.error is not None:
                    raise proc.error
        finally:
            self.clock._sim = None
            self._current = None
            self._running = False
        return [p.result for p in self._procs]

    def _resume_next(self) -> None:
        """Give control to the earliest waiting process."""
        t, _, proc = heapq.heappop(self._heap)
        if t > self.clock.now:
            self.clock.now = t
        self._current = proc
        proc._go.release()

    def _finished(self, proc: SimProcess) -> None:
        if proc.error is not None or not self._heap:
            # A failure ends the run (the others stay parked as daemon threads); so does the end
            # of the last process.
            self._heap.clear()
            self._back.release()
        else:
            self._resume_next()

    def _block_until(self, t: int) -> None:
        heap = self._heap
        if not heap or heap[0][0] >= t:
            # Still the earliest process: keep running, no switch.
            self.clock.now = t
            return
        me = self._current
        if me is None:
            raise ModelUsageError("clock moved by a thread that is not a simulated process")
        heapq.heappush(heap, (t, next(self._seq), me))
        self._resume_next()
        me._go.acquire()
