"""I/O methods: who performs a read, and when it completes (``io_method``).

PostgreSQL 18 can perform the reads the buffer manager starts in three ways:

* ``sync`` (``method_sync.c``): nothing happens at start; the backend performs the read itself
  when it waits for it (``WaitReadBuffers``), so reads never overlap the backend's own work.
  Look-ahead still helps through ``posix_fadvise`` advice, which lets the kernel read ahead.
* ``worker`` (``method_worker.c``, the default): the read is handed to an I/O worker process when
  it is started; the backend keeps working and waits later. PostgreSQL 18 has a fixed pool of
  ``io_workers`` (:class:`WorkerIOMethod`); 19 and later a pool that sizes itself between
  ``io_min_workers`` and ``io_max_workers`` (:class:`WorkerIOMethod19`).
* ``io_uring`` (``method_io_uring.c``): the backend submits the read to the kernel's ring when it
  is started; as many reads can be in flight as the device accepts.

Under every method, a read flagged *synchronous* (``READ_BUFFERS_SYNCHRONOUSLY``: the
one-block ``ReadBuffer`` path, or a stream with ``effective_io_concurrency = 0``) is performed by
the backend at once, because it is about to wait anyway (``pgaio_io_needs_synchronous_execution``).

``issue`` computes the completion time of one read from the storage layer and, for synchronous
execution, tells the caller to block until then. Submission and completion times are recorded on
the I/O handle, so every method's timeline can be printed.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

from ..costs import CpuCosts
from ..errors import SettingError
from ..settings import IO_METHODS, Settings
from ..storage.smgr import Storage

if TYPE_CHECKING:
    from .handle import InflightIO

__all__ = [
    "IOMethod",
    "SyncIOMethod",
    "WorkerIOMethod",
    "WorkerIOMethod19",
    "IoUringIOMethod",
    "make_io_method",
]


MAX_IO_WORKERS = 32  # proc.h


class IOMethod:
    """Base of the I/O methods; ``issue`` fills in ``ioh.submit_us``/``complete_at``/``outcome``."""

    name = "base"
    performs_at_start = True  # AIO methods start the read in StartReadBuffers

    def __init__(self, storage: Storage, costs: CpuCosts) -> None:
        self.storage = storage
        self.costs = costs
        self.ios = 0
        # The whole microseconds of submitting and completing a read (CpuCosts is frozen),
        # taken once: every read pays them.
        self._submit_us = int(costs.io_submit_us)
        self._complete_us = int(costs.io_complete_us)

    def _execute_in_backend(self, now: int, ioh: InflightIO) -> None:
        """The backend performs the read itself (``pgaio_io_perform_synchronously``)."""
        storage = self.storage
        out = storage.read(ioh.rel, ioh.fork, ioh.start, ioh.nblocks, now + self._submit_us)
        ioh.submit_us = now
        ioh.outcome = out
        copy = 0 if storage.direct_io else int(self.costs.copy_us_per_block * out.ok_blocks)
        ioh.complete_at = out.complete_at + copy + self._complete_us

    def issue(self, now: int, ioh: InflightIO, synchronous: bool) -> bool:
        """Start one read at ``now``; True if the caller must block until ``ioh.complete_at``."""
        raise SettingError(f"io_method {self.name!r} cannot issue reads")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SyncIOMethod(IOMethod):
    """``io_method=sync``: the backend reads when it waits (``method_sync.c``)."""

    name = "sync"
    performs_at_start = False

    def issue(self, now: int, ioh: InflightIO, synchronous: bool) -> bool:
        self.ios += 1
        self._execute_in_backend(now, ioh)
        return True


class WorkerIOMethod(IOMethod):
    """``io_method=worker``: reads are handed to ``io_workers`` worker processes (``method_worker.c``).

    Workers take submissions first come first served; each performs one read at a time. The
    worker's own CPU (page cache copy) and the hand-off latencies come from ``CpuCosts``.
    """

    name = "worker"

    # io_worker_queue_size: a ring of 64 slots, one always empty (pgaio_worker_submission_queue_insert).
    QUEUE_CAPACITY = 63

    def __init__(self, storage: Storage, costs: CpuCosts, io_workers: int) -> None:
        super().__init__(storage, costs)
        if not 1 <= io_workers <= 32:
            raise SettingError(f"io_workers = {io_workers} is out of range: allowed 1..32")
        self.io_workers = io_workers
        self._free: list[int] = [0] * io_workers
        # Start times of submitted reads no worker has picked up yet (non-decreasing: FIFO).
        self._queued: deque[int] = deque()
        self.dispatched = 0
        self.queue_full_fallbacks = 0
        # The hand-off's whole microseconds (CpuCosts is frozen): from submission until a
        # worker can start the read, and from its end until the waiter runs.
        self._dispatch_us = int(costs.io_submit_us + costs.worker_dispatch_us)
        self._wakeup_us = int(costs.worker_wakeup_us)

    def issue(self, now: int, ioh: InflightIO, synchronous: bool) -> bool:
        self.ios += 1
        if synchronous:
            self._execute_in_backend(now, ioh)
            return True
        queued = self._queued
        while queued and queued[0] <= now:
            queued.popleft()
        if len(queued) >= self.QUEUE_CAPACITY:
            # The submission queue is full: the backend performs the read itself
            # (pgaio_worker_submit_internal).
            self.queue_full_fallbacks += 1
            self._execute_in_backend(now, ioh)
            return True
        self.dispatched += 1
        ready = now + self._dispatch_us
        free = self._free[0]
        start = ready if free <= ready else free
        storage = self.storage
        out = storage.read(ioh.rel, ioh.fork, ioh.start, ioh.nblocks, start)
        if storage.direct_io:
            worker_done = out.complete_at
        else:
            worker_done = out.complete_at + int(self.costs.copy_us_per_block * out.ok_blocks)
        heapq.heapreplace(self._free, worker_done)
        if start > now:
            queued.append(start)
        ioh.submit_us = now
        ioh.outcome = out
        ioh.complete_at = worker_done + self._wakeup_us
        return False


class WorkerIOMethod19(WorkerIOMethod):
    """``io_method=worker`` of PostgreSQL 19 and later: a pool of I/O workers that sizes itself
    (``method_worker.c``, the postmaster's ``maybe_start_io_workers``).

    What is the same as 18 (:class:`WorkerIOMethod`): reads are taken first come first served,
    one at a time per worker, through the 63-entry submission queue, with the same hand-off
    costs; a read the backend must wait for at once, or one that finds the queue full, is done
    by the backend itself.

    What 19 changes, each step as its source has it:

    * The postmaster starts ``io_min_workers`` workers (ids 0, 1, ...) at start-up, and each
      launch moves ``io_worker_launch_next_time`` on by ``io_worker_launch_interval``
      (``maybe_start_io_workers``): after the first two, the next launch is not before 200 ms.
    * A submission wakes the lowest-numbered idle worker (``pgaio_worker_choose_idle``).
    * A worker that takes a read and still sees reads waiting, with no idle worker above it to
      wake, asks for one more worker if more reads wait than there are workers
      (``IoWorkerMain``, ``pgaio_worker_request_grow``); a worker that finds the queue empty
      cancels the request (``pgaio_worker_cancel_grow``). The postmaster launches a worker at
      ``io_worker_launch_next_time`` if the request still stands, and again an interval later
      while it stands, up to ``io_max_workers`` (``maybe_start_io_workers_scheduled_at``).
    * Only the highest-numbered worker, and only if its id is at least ``io_min_workers``, may
      time out: after ``io_worker_idle_timeout`` idle as the highest, it exits
      (``pgaio_worker_can_timeout``); the next one's clock starts then.

    The model decides these events on the virtual clock from the reads it has been given: at
    each submission it first plays the pool's events up to the submission's time in time order
    (reads taken, workers going idle, launches, time-outs), then places the read. Two things
    are simplified, both named in ``docs/fidelity.md``: a worker starts the moment it is
    launched (no fork time), and a worker launched while reads already wait serves only reads
    submitted after the model learned of it (completion times are fixed when a read is
    submitted, so reads already placed on the busy workers keep their times). A woken worker
    always finds work (no spurious wake-ups), so the wake-up to I/O ratio never stops a grow
    request.
    """

    def __init__(
        self,
        storage: Storage,
        costs: CpuCosts,
        io_min_workers: int,
        io_max_workers: int,
        io_worker_idle_timeout_ms: int,
        io_worker_launch_interval_ms: int,
    ) -> None:
        for name, value in (("io_min_workers", io_min_workers), ("io_max_workers", io_max_workers)):
            if not 1 <= value <= MAX_IO_WORKERS:
                raise SettingError(f"{name} = {value} is out of range: allowed 1..{MAX_IO_WORKERS}")
        super().__init__(storage, costs, min(io_min_workers, io_max_workers))
        self.io_min_workers = io_min_workers
        self.io_max_workers = io_max_workers
        self.idle_timeout_us = io_worker_idle_timeout_ms * 1000
        self.launch_interval_us = io_worker_launch_interval_ms * 1000
        # Per worker id: running, and the end of its last read (free from then on).
        self.running = [False] * MAX_IO_WORKERS
        self.free_at = [0] * MAX_IO_WORKERS
        # Reads placed on workers whose start the pool has not played yet: (start, seq, ready,
        # worker, done); and every read placed and not yet started at the time played, for
        # the queue depth a worker sees when it takes one.
        self._to_take: list[tuple[int, int, int, int, int]] = []
        self._waiting: list[tuple[int, int, int]] = []  # (ready, start, seq)
        self._seq = 0
        self._played_to = 0
        # Ends of reads whose worker may go idle then (end, worker).
        self._ends: list[tuple[int, int]] = []
        # The postmaster's view (PgAioWorkerControl.grow / grow_signal_sent, its launch time).
        self.grow = False
        self.grow_signal_sent = False
        self.launch_next_time = -(1 << 62)  # TimestampTz 0: long before the instance started
        # When the current highest worker started to count its idle time (None: it cannot).
        self._timeout_from: int | None = None
        self.launches: list[int] = []  # times workers were started (start-up included)
        self.exits: list[int] = []  # times workers timed out
        self._maybe_start_io_workers(0)

    # ------------------------------------------------------------------------------ the pool
    @property
    def nworkers(self) -> int:
        """``io_worker_control->nworkers``."""
        return sum(self.running)

    def _register_worker(self, t: int) -> None:
        """``pgaio_worker_register``: the lowest free id; the pool change wakes every worker,
        so the timeout worker's clock restarts."""
        wid = self.running.index(False)
        self.running[wid] = True
        self.free_at[wid] = t
        self.launches.append(t)
        self._timeout_from = t

    def _highest(self) -> int:
        return max(i for i, r in enumerate(self.running) if r)

    def _maybe_start_io_workers_scheduled_at(self) -> int | None:
        """``maybe_start_io_workers_scheduled_at``: when the postmaster starts the next worker
        (None: no launch is due)."""
        n = self.nworkers
        if n >= self.io_max_workers:
            return None
        if n < self.io_min_workers:
            return -(1 << 62)  # TIMESTAMP_MINUS_INFINITY: as soon as possible
        if not self.grow_signal_sent:
            return None
        return self.launch_next_time

    def _maybe_start_io_workers(self, now: int) -> None:
        """``maybe_start_io_workers`` at ``now``."""
        while (at := self._maybe_start_io_workers_scheduled_at()) is not None:
            if at > now:
                break
            self.launch_next_time += self.launch_interval_us
            if self.launch_next_time <= now:
                self.launch_next_time = now + self.launch_interval_us
            if self.nworkers >= self.io_min_workers and not self.grow:
                # pgaio_worker_pm_clear_grow_signal_sent
                self.grow = False
                self.grow_signal_sent = False
                break
            self._register_worker(now)

    def _request_grow(self) -> None:
        """``pgaio_worker_request_grow`` (the postmaster hears the signal at once)."""
        if self.nworkers >= self.io_max_workers or self.grow:
            return
        self.grow = True
        if self.grow_signal_sent:
            return
        self.grow_signal_sent = True

    def _next_timeout(self) -> int | None:
        """When the highest worker times out if nothing reaches it first (None: it cannot)."""
        if self._timeout_from is None:
            return None
        h = self._highest()
        if h < self.io_min_workers:
            return None
        start = max(self._timeout_from, self.free_at[h])
        return start + self.idle_timeout_us

    def _play(self, now: int) -> None:
        """The pool's events up to ``now`` in time order: reads taken (grow requests), workers
        going idle (cancelled requests), launches and time-outs."""
        take = self._to_take
        ends = self._ends
        while True:
            t_take = take[0][0] if take else None
            t_end = ends[0][0] if ends else None
            t_launch = self._maybe_start_io_workers_scheduled_at()
            t_out = self._next_timeout()
            times = [t for t in (t_take, t_end, t_launch, t_out) if t is not None and t <= now]
            if not times:
                break
            t = max(min(times), self._played_to)
            self._played_to = t
            if t_take is not None and t_take <= t:
                start, seq, _ready, _wid, _done = heapq.heappop(take)
                # IoWorkerMain: the worker took the read; the reads still waiting behind it.
                self._waiting = [w for w in self._waiting if w[2] != seq and w[1] > start]
                depth = sum(1 for ready, _s, _q in self._waiting if ready <= start)
                if depth > 0 and depth > self.nworkers:
                    self._request_grow()
            elif t_end is not None and t_end <= t:
                end, wid = heapq.heappop(ends)
                if self.running[wid] and self.free_at[wid] == end:
                    # No read placed on it since: nothing was waiting when it finished, and
                    # the worker goes idle.
                    self.grow = False  # pgaio_worker_cancel_grow
            elif t_launch is not None and t_launch <= t:
                self._maybe_start_io_workers(t)
            else:
                # The highest worker timed out (pgaio_worker_can_timeout): it exits, waking the
                # others, and the next highest counts its idle time from now.
                h = self._highest()
                self.running[h] = False
                self.exits.append(t)
                self._timeout_from = t

    # ------------------------------------------------------------------------------ submission
    def issue(self, now: int, ioh: InflightIO, synchronous: bool) -> bool:
        self._play(now)
        self.ios += 1
        if synchronous:
            self._execute_in_backend(now, ioh)
            return True
        queued = self._queued
        while queued and queued[0] <= now:
            queued.popleft()
        if len(queued) >= self.QUEUE_CAPACITY:
            # The submission queue is full (pgaio_worker_submission_queue_insert).
            self.queue_full_fallbacks += 1
            self._execute_in_backend(now, ioh)
            return True
        self.dispatched += 1
        ready = now + self._dispatch_us
        # pgaio_worker_choose_idle: the lowest-numbered idle worker; with none idle, the read
        # waits for the first worker to finish (the lowest-numbered of those finishing first).
        running = [i for i, r in enumerate(self.running) if r]
        idle = [i for i in running if self.free_at[i] <= ready]
        wid = idle[0] if idle else min(running, key=lambda i: (self.free_at[i], i))
        free = self.free_at[wid]
        start = ready if free <= ready else free
        storage = self.storage
        out = storage.read(ioh.rel, ioh.fork, ioh.start, ioh.nblocks, start)
        if storage.direct_io:
            worker_done = out.complete_at
        else:
            worker_done = out.complete_at + int(self.costs.copy_us_per_block * out.ok_blocks)
        self.free_at[wid] = worker_done
        self._seq += 1
        heapq.heappush(self._to_take, (start, self._seq, ready, wid, worker_done))
        heapq.heappush(self._ends, (worker_done, wid))
        if start > ready or start > now:
            self._waiting.append((ready, start, self._seq))
        if start > now:
            queued.append(start)
        ioh.submit_us = now
        ioh.outcome = out
        ioh.complete_at = worker_done + self._wakeup_us
        return False


class IoUringIOMethod(IOMethod):
    """``io_method=io_uring``: the backend submits to the kernel's ring (``method_io_uring.c``)."""

    name = "io_uring"

    def issue(self, now: int, ioh: InflightIO, synchronous: bool) -> bool:
        self.ios += 1
        storage = self.storage
        out = storage.read(ioh.rel, ioh.fork, ioh.start, ioh.nblocks, now + self._submit_us)
        copy = 0 if storage.direct_io else int(self.costs.copy_us_per_block * out.ok_blocks)
        ioh.submit_us = now
        ioh.outcome = out
        ioh.complete_at = out.complete_at + copy + self._complete_us
        return synchronous


def make_io_method(
    name: str, storage: Storage, costs: CpuCosts, io_workers: int = 3, settings: Settings | None = None
) -> IOMethod:
    """The I/O method object for ``io_method = name``: with ``settings`` of PostgreSQL 19 or
    later, ``worker`` is the pool that sizes itself (:class:`WorkerIOMethod19`) and
    ``io_workers`` is not used; else a fixed pool of ``io_workers``."""
    if name == "sync":
        return SyncIOMethod(storage, costs)
    if name == "worker":
        if settings is not None and settings.version != "18":
            assert settings.io_min_workers is not None and settings.io_max_workers is not None
            assert settings.io_worker_idle_timeout is not None
            assert settings.io_worker_launch_interval is not None
            return WorkerIOMethod19(
                storage,
                costs,
                settings.io_min_workers,
                settings.io_max_workers,
                settings.io_worker_idle_timeout,
                settings.io_worker_launch_interval,
            )
        if settings is not None:
            assert settings.io_workers is not None
            io_workers = settings.io_workers
        return WorkerIOMethod(storage, costs, io_workers)
    if name == "io_uring":
        return IoUringIOMethod(storage, costs)
    raise SettingError(f"io_method = {name!r} is invalid: allowed {', '.join(IO_METHODS)}")
