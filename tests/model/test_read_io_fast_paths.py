"""The read I/O chain's fast paths give exactly the general paths' results.

The per-read chain (``AsyncReadBuffers`` → I/O method → smgr → device, then ``WaitIO`` and the
completion) has shortcuts for its usual case: buffers in consecutive slots updated as slices,
completions kept in a sorted list, smgr without a fault plan, a device without sequential latency.
Each test here compares a shortcut with the per-buffer / per-request rule it replaces, and checks
that the general path is still taken where the shortcut does not apply.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Device,
    Fault,
    FaultPlan,
    ForkNumber,
    Instance,
    ReadBuffersOperation,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.buffers.pool import BM_DIRTY, BM_IO_ERROR, BM_VALID, BM_ZEROED, InflightIO
from reference_impl.costs import CpuCosts
from reference_impl.io.methods import WorkerIOMethod
from reference_impl.storage import DeviceProfile, ForeignIO, ReadOutcome, Storage

_FLAGS = st.sampled_from([0, BM_IO_ERROR, BM_DIRTY, BM_IO_ERROR | BM_DIRTY, BM_ZEROED])


@settings(max_examples=150, deadline=None)
@given(
    lo=st.integers(0, 47),  # the "gap" order moves the last buffer one further: at most 63
    pins=st.lists(st.integers(1, 3), min_size=2, max_size=16),
    flags=st.lists(_FLAGS, min_size=16, max_size=16),
    order=st.sampled_from(["consecutive", "reversed", "gap"]),
)
def test_register_and_complete_match_the_per_buffer_rule(lo, pins, flags, order) -> None:
    """register_io / complete_io on consecutive slots (slices) and on any other buffers (a
    loop) leave the pool exactly as the per-buffer rule does, whatever the pins and flags."""
    inst = Instance(Settings(shared_buffers=64))
    pool = inst.pool
    rel = inst.create_relation("t", 100)
    n = len(pins)
    bufs = list(range(lo, lo + n))
    if order == "reversed":
        bufs.reverse()
    elif order == "gap":
        bufs[-1] += 1  # consecutive but for the last one
    for b, pin, f in zip(bufs, pins, flags):
        pool.refcount[b] = pin
        pool.flags[b] = f
    before = (list(pool.refcount), bytearray(pool.flags))
    ioh = InflightIO(0, rel, ForkNumber.MAIN, 0, bufs, "normal", False, False, False)
    pool.register_io(ioh)
    assert ioh.consecutive == (order == "consecutive")
    for b in range(pool.nbuffers):
        extra = 1 if b in bufs else 0
        assert pool.refcount[b] == before[0][b] + extra
        assert pool.buf_io[b] is (ioh if extra else None)
        assert pool.flags[b] == before[1][b]
    ioh.outcome = ReadOutcome(10, n)
    pool.complete_io(ioh)
    assert ioh.done and ioh.error is None
    for b in range(pool.nbuffers):
        assert pool.refcount[b] == before[0][b]
        assert pool.buf_io[b] is None
        want = (before[1][b] | BM_VALID) & ~BM_IO_ERROR if b in bufs else before[1][b]
        assert pool.flags[b] == want


def test_consecutive_short_read_leaves_the_tail_to_the_per_buffer_rule() -> None:
    """A short read of consecutive buffers validates only the delivered head."""
    inst = Instance(Settings(shared_buffers=64))
    pool = inst.pool
    rel = inst.create_relation("t", 100)
    bufs = list(range(8, 16))
    for b in bufs:
        pool.refcount[b] = 1
    ioh = InflightIO(0, rel, ForkNumber.MAIN, 0, bufs, "normal", False, False, False)
    pool.register_io(ioh)
    assert ioh.consecutive
    ioh.outcome = ReadOutcome(10, 3)
    pool.complete_io(ioh)
    assert [pool.flags[b] & BM_VALID for b in bufs] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert [pool.refcount[b] for b in bufs] == [1] * 8
    assert all(pool.buf_io[b] is None for b in bufs)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=30))
def test_completions_run_in_heap_order(times) -> None:
    """Completions scheduled in any order are kept sorted (a valid heap) and complete in
    (complete_at, issue order), exactly as heap pops would."""
    inst = Instance(Settings(shared_buffers=64))
    pool = inst.pool
    rel = inst.create_relation("t", 100)
    iohs = []
    for i, t in enumerate(times):
        ioh = InflightIO(0, rel, ForkNumber.MAIN, i, [i % 64], "normal", False, False, False)
        pool.register_io(ioh)
        ioh.outcome = ReadOutcome(t, 1)
        ioh.complete_at = t
        pool.schedule_completion(ioh)
        iohs.append(ioh)
        comps = pool._completions
        assert comps == sorted(comps, key=lambda e: (e[0], e[1]))
        heap = list(comps)
        heapq.heapify(heap)
        assert heap[0] is comps[0]
    order: list[InflightIO] = []
    complete = pool.complete_io
    pool.complete_io = lambda ioh: (order.append(ioh), complete(ioh))  # type: ignore[method-assign]
    inst.clock.wait_until(max(times))
    pool.poll()
    assert order == sorted(iohs, key=lambda h: (h.complete_at, h.seq))


def _read_log_after_wait(kind: str, k: int) -> list[tuple[int, int]]:
    """Pin blocks 0..7 under ``sync`` (nothing read yet), make candidate ``k`` valid, failed or
    being read by another backend, then wait: the reads the backend performed."""
    inst = Instance(Settings(io_method="sync", debug_io_direct="data"))
    rel = inst.create_relation("t", 64)
    be = inst.backend()
    op = ReadBuffersOperation(rel)
    bufs = [INVALID_BUFFER] * 8
    got, _ = be.start_read_buffers(op, bufs, 0, 0, 8, 0)
    assert got == 8 and bufs == list(range(8))  # consecutive slots off the free list
    if kind == "valid":
        inst.pool.flags[bufs[k]] |= BM_VALID
    elif kind == "io_error":
        inst.pool.flags[bufs[k]] |= BM_IO_ERROR
    else:
        inst.start_foreign_io(ForeignIO("t", block=k, nblocks=1, duration_us=50))
    be.wait_read_buffers(op)
    assert all(inst.pool.flags[b] & BM_VALID for b in bufs)
    for b in bufs:
        be.release_buffer(b)
    return [(r.start, r.nblocks) for r in be.stats.read_log]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 7))
def test_a_read_stops_at_a_candidate_valid_or_being_read(k) -> None:
    """StartBufferIO(nowait) on consecutive candidates: a valid block or one another backend is
    reading ends the read before it; one with only an I/O error does not."""
    rest = [(k + 1, 7 - k)] if k < 7 else []
    assert _read_log_after_wait("valid", k) == [(0, k), *rest]
    assert _read_log_after_wait("foreign", k) == [(0, k), *rest]
    assert _read_log_after_wait("io_error", k) == [(0, 8)]


def _scan(plan: FaultPlan | None, *, direct: bool = True) -> tuple[object, ...]:
    settings_ = Settings(io_method="worker", debug_io_direct="data" if direct else "")
    inst = Instance(settings_, device="nvme", faults=plan)
    rel = inst.create_relation("t", 3000)
    be = inst.backend()
    stream = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 3000))
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        be.release_buffer(buf)
    stream.end()
    log = [r.as_dict() for r in be.stats.read_log]
    dev = inst.device.stats
    storage = inst.storage
    return (
        log,
        inst.clock.now,
        (dev.reads, dev.read_blocks, dev.busy_until, dev.queue_wait_us),
        (storage.physical_reads, storage.physical_read_blocks),
    )


def test_smgr_read_without_faults_matches_the_fault_path() -> None:
    """With a fault plan that never fires, every read goes through the plan (it sees them all)
    and the scan is identical to the one without a plan, which takes the short path."""
    plan = FaultPlan([Fault("eio", relation="other", block=0)])
    with_plan = _scan(plan)
    assert plan.reads_seen == with_plan[3][0] > 100  # type: ignore[index]
    assert _scan(None) == with_plan
    buffered_plan = FaultPlan([Fault("eio", relation="other", block=0)])
    assert _scan(None, direct=False) == _scan(buffered_plan, direct=False)
    assert buffered_plan.reads_seen > 100


def test_faults_still_fire_on_reads() -> None:
    """The fault path is taken when the plan has faults: a short read is short."""
    plan = FaultPlan([Fault("short_read", relation="t", block=20)])
    log = _scan(plan)[0]
    first = [r for r in log if r["start"] <= 20 < r["start"] + r["nblocks"]]  # type: ignore[index]
    assert first[0]["ok_blocks"] == 20 - first[0]["start"]


def test_sequential_latency_only_where_the_profile_has_one() -> None:
    """A spinning disk still pays only its sequential latency for a request that continues the
    file's last one (read or write); a device without one pays its full latency every time."""
    hdd = Device("hdd")
    t1 = hdd.write(0, 7, 0, 1)
    t2 = hdd.read(t1, 7, 1, 1)
    assert t2 - t1 < 200 and t1 >= 8000
    t3 = hdd.read(t2, 7, 5, 1)  # not where the last request ended: a seek
    assert t3 - t2 >= 8000
    flat = Device(DeviceProfile("flat", 100, 50, 1000.0, 1))
    a = flat.read(0, 7, 0, 1)
    b = flat.read(a, 7, 1, 1)
    assert b - a == a  # the same full latency and transfer again


def test_worker_hand_off_delays_truncate_like_the_costs() -> None:
    """The worker's hand-off is int(io_submit_us + worker_dispatch_us), its wake-up
    int(worker_wakeup_us), from fractional costs."""
    costs = CpuCosts(io_submit_us=2.6, worker_dispatch_us=0.7, worker_wakeup_us=1.9)
    prof = DeviceProfile("flat", 100, 50, 1000.0, 4)
    inst = Instance(Settings(debug_io_direct="data"))
    rel = inst.create_relation("t", 100)
    method = WorkerIOMethod(Storage(Device(prof), direct_io=True), costs, 1)
    ioh = InflightIO(0, rel, ForkNumber.MAIN, 0, [0, 1], "normal", False, False, False)
    assert method.issue(1000, ioh, False) is False
    expected_done = Device(prof).read(1000 + 3, 0, 0, 2)
    assert ioh.outcome.complete_at == expected_done  # type: ignore[union-attr]
    assert ioh.complete_at == expected_done + 1
    assert ioh.submit_us == 1000
