"""I/O methods: who performs a read, and when it completes (``io_method``).

PostgreSQL 18 can perform the reads the buffer manager starts in three ways:

* ``sync`` (``method_sync.c``): nothing happens at start; the backend performs the read itself
  when it waits for it (``WaitReadBuffers``), so reads never overlap the backend's own work.
  Look-ahead still helps through ``posix_fadvise`` advice, which lets the kernel read ahead.
* ``worker`` (``method_worker.c``, the default): the read is handed to one of ``io_workers``
  I/O worker processes when it is started; the backend keeps working and waits later.
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
from ..settings import IO_METHODS
from ..storage.smgr import Storage

if TYPE_CHECKING:
    from .handle import InflightIO

__all__ = [
    "IOMethod",
    "SyncIOMethod",
    "WorkerIOMethod",
    "IoUringIOMethod",
    "make_io_method",
]


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


def make_io_method(name: str, storage: Storage, costs: CpuCosts, io_workers: int = 3) -> IOMethod:
    """The I/O method object for ``io_method = name``."""
    if name == "sync":
        return SyncIOMethod(storage, costs)
    if name == "worker":
        return WorkerIOMethod(storage, costs, io_workers)
    if name == "io_uring":
        return IoUringIOMethod(storage, costs)
    raise SettingError(f"io_method = {name!r} is invalid: allowed {', '.join(IO_METHODS)}")
