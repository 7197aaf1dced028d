"""How low the model benchmark's ratio can go (``readstream bench model --bounds``).

Issue 16 asks for a streamed all-miss scan within 8x of a bare pin/unpin loop in pure Python.
Two sessions of restructuring took the model from about 25x to about 20x; this module measures
what is left to gain, by timing, in the same rounds as the model and the bare loop, two scans
that do less than the model and so bound it from below:

* **the floor**: only the work each block costs in the model's representation of the buffer
  pool, on structures of the same size: a stream that hands out runs of 16 buffers from a
  list, ``ReleaseBuffer`` through a private refcount dict, the 16,384-entry buffer mapping
  table updated per block (look up the new tag, unmap the victim's old one, map the new one),
  and one completion per read. No stream logic, statistics, CPU accounting, I/O timing.
* **a fused lane**: the whole read path of the benchmark's steady state written as two
  functions over the model's own buffer pool, with every test the general code needs for
  other cases left out: the run of victims taken by the model's own ``_take_slot_run`` and
  private refcount (``PrivateRefCount.pin_new_run``), the model's ``ReleaseBuffer``, the
  worker method's queue and the device's timetable (its common case inline, on the model's own
  device), the statistics and the CPU charges the model makes. It leaves out more than a faithful
  lane could: the stream's look-ahead steps (the distance, the pin limit per step, forwarded
  buffers), the ``ReadBuffersOperation`` and ``PgAioHandle`` objects, the observer and fault-plan
  tests, the read log, end-of-file checks. Each later step of a faithful lane would only add
  to its time, so its ratio is a lower bound on any pure-Python lane over this pool.

  On the same relation the lane leaves the same buffer pool as the model (mapping table in the
  same order, tags, pins, flags, free list, clock hand, allocation and pass counts), except the
  usage counts of the buffers the clock sweep meets while the two hold different numbers of
  reads in flight (``tests/bench/test_bounds.py``).

  Three variants take one of the model's obligations out: ``timetable`` (the worker queue and
  the device's timetable: a read completes 100 µs after it is issued), ``private refcount``
  (the 8-entry array and its clock: every pin goes straight into the hash, and the release
  looks only there), ``accounting`` (the statistics and the CPU charges); a fourth takes all
  three out.
"""

from __future__ import annotations

import heapq
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

from reference_impl import Instance, Settings

from .model import bare_pin_loop, model_scan

__all__ = ["LANE_VARIANTS", "floor_scan", "format_bounds", "lane_scan", "run_bounds_benchmark", "run_lane"]

_RUN = 16  # io_combine_limit: blocks per read
_NBUFFERS = 16_384  # shared_buffers = 128 MB, the benchmark's pool
_READS_IN_FLIGHT = 5  # 80 pins: within the benchmark backend's pin limit of 94

# name -> (timetable, private refcount, accounting)
LANE_VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "lane": (True, True, True),
    "lane without the timetable": (False, True, True),
    "lane without the private refcount array": (True, False, True),
    "lane without accounting": (True, True, False),
    "lane without all three": (False, False, False),
}


def _consume(next_buffer: Callable[[], int], release: Callable[[int], None]) -> float:
    """The benchmark's consumer (``bench.model.model_scan``'s loop): CPU seconds until the end."""
    t0 = time.process_time()
    while True:
        buf = next_buffer()
        if buf < 0:
            break
        release(buf)
    return time.process_time() - t0


# ---------------------------------------------------------------------------------- the floor
class _FloorBackend:
    """The per-block state of ``bufmgr.c`` the floor keeps: the mapping table, the buffers'
    tags, shared and private pin counts."""

    def __init__(self) -> None:
        self.mapping: dict[int, int] = {}
        self.tag = [-1] * _NBUFFERS
        self.refcount = [0] * _NBUFFERS
        self.private: dict[int, int] = {}
        self.completions: deque[int] = deque()

    def release_buffer(self, buf: int) -> None:
        private = self.private
        if private.get(buf) == 1:
            del private[buf]
            self.refcount[buf] -= 1
            return
        raise AssertionError(f"buffer {buf} released but not pinned once")

    def read(self, tag: int, lo: int, n: int) -> list[int]:
        """Map the blocks from ``tag`` to the buffers from ``lo``, pin them, queue one completion."""
        mapping = self.mapping
        pool_tag = self.tag
        private = self.private
        bufs = list(range(lo, lo + n))
        t = tag
        for b in bufs:
            if t in mapping:
                raise AssertionError(f"tag {t} is already mapped")
            old = pool_tag[b]
            if old >= 0:
                del mapping[old]
            mapping[t] = b
            pool_tag[b] = t
            private[b] = 1
            t += 1
        self.refcount[lo : lo + n] = [1] * n
        self.completions.append(lo)
        return bufs


class _FloorStream:
    def __init__(self, backend: _FloorBackend, tag_base: int, nblocks: int) -> None:
        self.backend = backend
        self.tag_base = tag_base
        self.nblocks = nblocks
        self.next_block = 0
        self.hand = 0
        self.run: list[int] = []
        self.pending: deque[list[int]] = deque()

    def next_buffer(self) -> int:
        run = self.run
        if run:
            return run.pop()
        return self._next_read()

    def _next_read(self) -> int:
        backend = self.backend
        while len(self.pending) < _READS_IN_FLIGHT and self.next_block < self.nblocks:
            n = min(_RUN, self.nblocks - self.next_block)
            if self.hand + n > _NBUFFERS:
                self.hand = 0
            bufs = backend.read(self.tag_base + self.next_block, self.hand, n)
            self.hand += n
            self.next_block += n
            bufs.reverse()
            self.pending.append(bufs)
        if not self.pending:
            return -1
        backend.completions.popleft()
        self.run = run = self.pending.popleft()
        return run.pop()


def floor_scan(nblocks: int) -> float:
    """Seconds (CPU) for the floor's scan of ``nblocks`` blocks."""
    backend = _FloorBackend()
    stream = _FloorStream(backend, 16384 << 34, nblocks)
    elapsed = _consume(stream.next_buffer, backend.release_buffer)
    if backend.private or len(backend.mapping) != min(nblocks, _NBUFFERS):
        raise RuntimeError("the floor's scan left pins behind or did not map every block")
    return elapsed


# ------------------------------------------------------------------------------- the fused lane
class _FusedLane:
    """The benchmark's read path fused: StartReadBuffers → AsyncReadBuffers → the worker → the
    device for a run of clean victims, and WaitReadBuffers, over a model ``Backend``'s pool.

    Reads the model's private state on purpose (it stands in for code that would live inside
    ``bufmgr.py``); the free list phase and any run the lane's common case does not cover go
    through the model's own ``_alloc_unmapped_run``.
    """

    def __init__(
        self,
        backend: Any,
        rel: Any,
        nblocks: int,
        *,
        timetable: bool,
        private_refcount: bool,
        accounting: bool,
    ) -> None:
        self.backend = backend
        self.rel = rel
        self.nblocks = nblocks
        self.timetable = timetable
        self.private_refcount = private_refcount
        self.accounting = accounting
        self.next_block = 0
        self.run: list[int] = []
        self.in_flight: deque[tuple[int, list[int]]] = deque()
        self.completions: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.pinned = 0
        self.ios_started = 0
        self.waits = 0
        self.wait_us = 0
        self.distance = 94
        self.queue: list[int] = [-1] * (8 * _RUN)
        self.tag_base = rel._tag_bases[0]
        self.relstats = backend.stats.relation(rel.name)
        self.io_stats = backend.stats.io["normal"]
        costs = backend.costs
        self.alloc_us = costs.buffer_alloc_us
        self.submit_us = costs.io_submit_us
        self.complete_us = costs.io_complete_us
        self.buffer_us = costs.stream_buffer_us  # the stream's own CPU per buffer handed out
        self.worker = backend.io_method
        self.device = backend.storage.device

    # The consumer's two calls ----------------------------------------------------------------
    def next_buffer(self) -> int:
        run = self.run
        if run:
            if self.accounting:
                self.backend._cpu_debt += self.buffer_us
            self.pinned -= 1
            return run.pop()
        return self._wait_for_next_read()

    def release_unarrayed(self, buf: int) -> None:
        """``ReleaseBuffer`` without the private refcount array: the hash only."""
        backend = self.backend
        hashed = backend._ref_ovf.get(buf)
        if hashed == 1:
            del backend._ref_ovf[buf]
            backend._refcount[buf] -= 1
            return
        backend.release_buffer(buf)

    # WaitReadBuffers -------------------------------------------------------------------------
    def _wait_for_next_read(self) -> int:
        backend = self.backend
        while len(self.in_flight) < _READS_IN_FLIGHT and self._start_read():
            pass
        if not self.in_flight:
            return -1
        seq, run = self.in_flight.popleft()
        clock = backend.clock
        t0 = clock.now
        comps = self.completions
        while comps and comps[0][1] <= seq:
            entry = comps.pop(0)
            if entry[0] > clock.now:
                clock.now = entry[0]
            self._complete(entry)
        if self.accounting:
            backend.cpu(self.complete_us)
            self.waits += 1
            self.wait_us += clock.now - t0
        d = self.distance * 2
        self.distance = d if d < 94 else 94
        self.run = run
        if self.accounting:
            backend._cpu_debt += self.buffer_us
        self.pinned -= 1
        return run.pop()

    def _complete(self, entry: tuple[int, int, int, int]) -> None:
        pool = self.backend.pool
        lo = entry[2]
        hi = entry[3]
        n = hi - lo
        pool.buf_io[lo:hi] = [None] * n
        pool.refcount[lo:hi] = [1] * n
        pool.flags[lo:hi] = b"\x01" * n  # BM_VALID

    # StartReadBuffers ------------------------------------------------------------------------
    def _start_read(self) -> bool:
        backend = self.backend
        n = min(_RUN, self.nblocks - self.next_block)
        if n <= 0:
            return False
        limit = backend.get_additional_pin_limit()
        if limit < n:
            n = limit
        pool = backend.pool
        clock = backend.clock
        comps = self.completions
        while comps and comps[0][0] <= clock.now:
            self._complete(comps.pop(0))
        tag = self.tag_base + self.next_block
        queue = self.queue
        index = (self.ios_started % 8) * _RUN
        k = evicted = 0
        hand = pool.next_victim
        if not pool.freelist and hand + n <= pool.nbuffers:
            k, evicted = backend._take_slot_run(tag, hand, n, queue, index)
            if not k:
                # The clock sweep passes buffers still in use: the model's own search finds the
                # next victim, from where the run is taken.
                b = pool.get_buffer_outside_ring(None)
                pool.num_allocs -= 1  # counted again below, with the run
                pool.next_victim = hand = b
                if b + n <= pool.nbuffers:
                    k, evicted = backend._take_slot_run(tag, b, n, queue, index)
            if k:
                hand += k
                if hand == pool.nbuffers:
                    hand = 0
                    pool.complete_passes += 1
                pool.next_victim = hand
                pool.num_allocs += k
                if self.private_refcount:
                    backend.refs.pin_new_run(queue[index : index + k])
                else:
                    ovf = backend._ref_ovf
                    for b in queue[index : index + k]:
                        ovf[b] = 1
        if not k:
            k, evicted = backend._alloc_unmapped_run(tag, n, queue, index)
            if not k:
                raise RuntimeError(f"the fused lane found no victim for block {self.next_block}")
        io_stats = self.io_stats
        if self.accounting:
            self.relstats.blks_fetched += k
            if evicted:
                io_stats.evictions += evicted
            backend.cpu(k * self.alloc_us)
        lo = queue[index]
        hi = lo + k
        run = queue[index : index + k]  # consecutive buffers (the tests compare the pools)
        self.seq = seq = self.seq + 1
        pool.buf_io[lo:hi] = [seq] * k  # the model keeps the I/O's handle here
        pool.refcount[lo:hi] = [2] * k  # pinned by the backend and by the I/O
        if self.accounting:
            io_stats.reads += 1
            io_stats.read_bytes += 8192 * k
            backend.stats.shared_blks_read += k
        done = self._issue(clock.now, self.next_block, k) if self.timetable else clock.now + 100
        comps.append((done, seq, lo, hi))
        if self.accounting:
            backend.cpu(self.submit_us)
        self.pinned += k
        self.ios_started += 1
        self.next_block += k
        run.reverse()
        self.in_flight.append((seq, run))
        return True

    def _issue(self, now: int, start_block: int, n: int) -> int:
        """``pgaio_worker_submit`` → ``smgrreadv`` → the device, in their common case (the
        queue not full, the device's next transfer after every booked one): the completion time."""
        worker = self.worker
        queued = worker._queued
        while queued and queued[0] <= now:
            queued.popleft()
        if len(queued) >= worker.QUEUE_CAPACITY:
            raise RuntimeError("the worker queue is full: not the lane's case")
        worker.ios += 1
        worker.dispatched += 1
        ready = now + worker._dispatch_us
        free = worker._free[0]
        at = ready if free <= ready else free
        # Device.read / Device._service, inline
        device = self.device
        key = (self.tag_base >> 16) | (start_block // 131072)
        latency = device._read_latency
        last_end = device._last_end
        if device._seq_latency is not None:
            if last_end.get(key) == start_block:
                latency = device._seq_latency
            last_end[key] = start_block + n
        st = device.stats
        st.reads += 1
        st.read_blocks += n
        channels = device._channels
        channel_free = channels[0]
        bus_start = device._bus_start
        start = at if channel_free <= at else channel_free
        lat_done = start + latency
        if (
            device._jitter
            or not (channel_free <= at or at >= device._dense_from)
            or (bus_start and lat_done < bus_start[-1])
        ):
            done = device._service(at, latency, n)  # an uncommon case: the model's own code
        else:
            if start > at:
                st.queue_wait_us += start - at
            bus_end = device._bus_end
            last = bus_end[-1] if bus_end else -1
            xfer = lat_done if lat_done > last else last
            done = int(xfer + n * device._us_per_block + 0.999999)
            if done <= at:
                done = at + 1
            if xfer == last:
                bus_end[-1] = done
            elif done > xfer:
                bus_start.append(xfer)
                bus_end.append(done)
            if done > channel_free:
                heapq.heapreplace(channels, done)
                if start > channel_free and start > device._dense_from:
                    device._dense_from = start
            device._svc_start.append(start)
            device._svc_end.append(done)
            if done > st.busy_until:
                st.busy_until = done
            if len(device._svc_start) >= device._prune_at:
                device._prune()
        heapq.heapreplace(worker._free, done)
        if at > now:
            queued.append(at)
        return done + worker._wakeup_us


def run_lane(
    nblocks: int, *, timetable: bool = True, private_refcount: bool = True, accounting: bool = True
) -> tuple[Any, float]:
    """The fused lane's scan of the model benchmark's relation of ``nblocks`` blocks (its
    instance, pool and I/O method): (the model ``Backend`` it ran on, CPU seconds)."""
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="nvme", record_reads=False)
    rel = inst.create_relation("bench", nblocks)
    backend = inst.backend()
    lane = _FusedLane(
        backend, rel, nblocks, timetable=timetable, private_refcount=private_refcount, accounting=accounting
    )
    elapsed = _consume(
        lane.next_buffer, backend.release_buffer if private_refcount else lane.release_unarrayed
    )
    if backend.pool.refcount.count(0) != backend.pool.nbuffers or lane.next_block != nblocks:
        raise RuntimeError("the fused lane's scan left pins behind or did not read every block")
    return backend, elapsed


def lane_scan(
    nblocks: int, *, timetable: bool = True, private_refcount: bool = True, accounting: bool = True
) -> float:
    """Seconds (CPU) for the fused lane's scan of ``nblocks`` blocks (see :func:`run_lane`)."""
    return run_lane(nblocks, timetable=timetable, private_refcount=private_refcount, accounting=accounting)[1]


# ------------------------------------------------------------------------------ the benchmark
def run_bounds_benchmark(
    *, nblocks: int = 200_000, rounds: int = 3, out: TextIO | None = None
) -> dict[str, Any]:
    """Time the model, the floor and the lane's variants in ``rounds`` interleaved rounds, each
    scan against a bare loop timed just before it.

    Returns ``{"nblocks", "rounds", "scans": {name: {"ns_per_block": [...], "ratios": [...],
    "median_ratio"}}}``; prints :func:`format_bounds` of it with progress on standard error.
    """
    if not isinstance(nblocks, int) or nblocks < 1000:
        raise ValueError(f"nblocks = {nblocks!r} is too small: allowed an int >= 1000")
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds = {rounds!r} is invalid: allowed an int >= 1")
    scans: dict[str, Any] = {"model": model_scan, "floor": floor_scan}
    for name, (timetable, private_refcount, accounting) in LANE_VARIANTS.items():
        scans[name] = _variant(timetable, private_refcount, accounting)
    bare_pin_loop(nblocks)  # warm imports and caches
    for scan in scans.values():
        scan(min(nblocks, 5000))
    times: dict[str, list[float]] = {name: [] for name in ["bare", *scans]}
    ratios: dict[str, list[float]] = {name: [] for name in scans}
    for r in range(rounds):
        sys.stderr.write(f"readstream bench model --bounds: round {r + 1} of {rounds}\n")
        bares = []
        for name, scan in scans.items():
            # Each scan against a bare loop timed just before it: a spike of the machine's load
            # then moves one ratio, not a whole round's.
            bare = bare_pin_loop(nblocks) / nblocks * 1e9
            bares.append(bare)
            ns = scan(nblocks) / nblocks * 1e9
            times[name].append(round(ns, 1))
            ratios[name].append(round(ns / bare, 2))
        times["bare"].append(round(statistics.median(bares), 1))
    result: dict[str, Any] = {
        "nblocks": nblocks,
        "rounds": rounds,
        "bare_ns_per_block": times["bare"],
        "scans": {
            name: {
                "ns_per_block": times[name],
                "ratios": ratios[name],
                "median_ratio": round(statistics.median(ratios[name]), 2),
            }
            for name in scans
        },
    }
    stream = out if out is not None else sys.stdout
    stream.write(format_bounds(result) + "\n")
    return result


def _variant(timetable: bool, private_refcount: bool, accounting: bool) -> Any:
    def scan(nblocks: int) -> float:
        return lane_scan(
            nblocks, timetable=timetable, private_refcount=private_refcount, accounting=accounting
        )

    return scan


def format_bounds(result: dict[str, Any]) -> str:
    """The bounds as a table: each scan's ratio to the bare loop per round, and the median."""
    rounds = result["rounds"]
    head = f"{'scan':<42}" + "".join(f"{'round ' + str(r + 1):>9}" for r in range(rounds)) + f"{'median':>9}"
    lines = [
        f"ratio to the bare pin/unpin loop, {result['nblocks']:,} blocks, {rounds} interleaved rounds",
        head,
    ]
    for name, row in result["scans"].items():
        cells = "".join(f"{x:>9.1f}" for x in row["ratios"])
        lines.append(f"{name:<42}{cells}{row['median_ratio']:>9.1f}")
    bare = " / ".join(f"{x:.0f}" for x in result["bare_ns_per_block"])
    lines.append(f"bare loop, median of each round: {bare} ns/block (goal: the model <= 8 in pure Python)")
    return "\n".join(lines)
