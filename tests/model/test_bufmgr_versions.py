"""The buffer manager of each version on the read path (``bufmgr.c``, ``freelist.c``): what
PostgreSQL 19 changed against 18, through the backend's own API (``StartReadBuffers``,
``WaitReadBuffers``, ``ReadBuffer``), never through a stream's counters."""

from __future__ import annotations

import pytest

from reference_impl import (
    INVALID_BUFFER,
    ForeignIO,
    Instance,
    ReadBuffersOperation,
    Settings,
    begin_stream,
)
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.bufmgr19 import Backend19
from reference_impl.buffers.pool import BufferPool19

from ._streams import list_callback

ASYNC = ["worker", "io_uring"]


def _instance(version: str, io_method: str = "worker", **settings: object) -> Instance:
    inst = Instance(Settings(version=version, io_method=io_method, **settings), debug=True)  # type: ignore[arg-type]
    inst.create_relation("r", 100)
    return inst


def _start(
    be: Backend, block: int, n: int = 1, flags: int = 0
) -> tuple[ReadBuffersOperation, list[int], int, bool]:
    op = ReadBuffersOperation(be.instance.relation("r"))  # type: ignore[attr-defined]
    bufs = [INVALID_BUFFER] * n
    got, need_wait = be.start_read_buffers(op, bufs, 0, block, n, flags)
    return op, bufs, got, need_wait


def _release(be: Backend, bufs: list[int]) -> None:
    for b in bufs:
        if b != INVALID_BUFFER:
            be.release_buffer(b)


def test_each_version_gets_its_buffer_manager() -> None:
    assert type(_instance("18").backend()) is Backend
    for version in ("19", "20devel"):
        inst = _instance(version)
        assert type(inst.backend()) is Backend19 and type(inst.pool) is BufferPool19


# ------------------------------------------------------------------ an I/O already in progress
@pytest.mark.parametrize("io_method", ASYNC)
def test_18_waits_inside_start_read_buffers_for_a_foreign_io_on_the_head(io_method: str) -> None:
    inst = _instance("18", io_method)
    inst.start_foreign_io(ForeignIO("r", block=5, duration_us=50_000))
    be = inst.backend()
    _op, bufs, got, need_wait = _start(be, 5)
    assert (got, need_wait) == (1, False)  # waited, and the block is a hit
    assert inst.clock.now >= 50_000 and be.stats.shared_blks_hit == 1
    _release(be, bufs)


@pytest.mark.parametrize("io_method", ASYNC)
def test_19_joins_a_foreign_io_on_the_head_and_waits_in_wait_read_buffers(io_method: str) -> None:
    inst = _instance("19", io_method)
    foreign = inst.start_foreign_io(ForeignIO("r", block=5, duration_us=50_000))
    be = inst.backend()
    op, bufs, got, need_wait = _start(be, 5, n=3)
    # One block, I/O "started" (joined): the stream takes an I/O slot and moves on.
    assert (got, need_wait) == (1, True) and op.foreign_io and op.ioh is foreign
    assert inst.clock.now < 1_000 and be.stats.shared_blks_hit == 0
    assert be.wait_read_buffers(op) is True  # it had to wait for the foreign read
    assert inst.clock.now >= 50_000
    assert be.stats.shared_blks_hit == 1 and be.stats.shared_blks_read == 0  # TrackBufferHit
    _release(be, bufs)
    be.check_for_buffer_leaks()


@pytest.mark.parametrize("io_method", ASYNC)
def test_19_reads_the_block_itself_when_the_joined_io_fails(io_method: str) -> None:
    inst = _instance("19", io_method)
    inst.start_foreign_io(ForeignIO("r", block=5, duration_us=50_000, fails=True))
    be = inst.backend()
    op, bufs, _got, need_wait = _start(be, 5)
    assert need_wait and op.foreign_io
    assert be.wait_read_buffers(op) is True
    assert [(r.start, r.nblocks) for r in be.stats.read_log] == [(5, 1)]
    assert be.stats.shared_blks_hit == 0 and inst.pool.is_valid(bufs[0])
    _release(be, bufs)


@pytest.mark.parametrize("io_method", ASYNC)
def test_19_joins_its_own_io_in_progress(io_method: str) -> None:
    """The same block twice within the look-ahead (004_read_stream.pl's repeated blocks): 18
    waits for its own first read inside the second StartReadBuffers, 19 joins it."""
    for version, joined in (("18", False), ("19", True)):
        inst = _instance(version, io_method)
        be = inst.backend()
        op1, bufs1, _, wait1 = _start(be, 2)
        assert wait1
        t0 = inst.clock.now
        op2, bufs2, got2, wait2 = _start(be, 2)
        assert bufs2 == bufs1 and got2 == 1
        assert wait2 is joined and op2.foreign_io is joined
        assert (inst.clock.now == t0) is joined  # 18 waited for the read already
        be.wait_read_buffers(op1)
        if wait2:
            assert be.wait_read_buffers(op2) is False  # op1 waited: done by now
        assert be.stats.shared_blks_read == 1 and be.stats.shared_blks_hit == 1
        _release(be, bufs1 + bufs2)
        be.check_for_buffer_leaks()


@pytest.mark.parametrize("io_method", ASYNC)
def test_004_a_stream_moves_past_a_foreign_io_in_19(io_method: str) -> None:
    """004_read_stream.pl (19): "Block 5 is undergoing IO in session b, so session a will move
    on to start a new IO for block 7" -- before the foreign read completes; 18 reads block 7
    only after it."""
    issued = {}
    for version in ("18", "19"):
        inst = _instance(version, io_method, max_connections=8)
        inst.start_foreign_io(ForeignIO("r", block=5, duration_us=50_000))
        be = inst.backend()
        stream = begin_stream(be, inst.relation("r"), list_callback([0, 2, 5, 7]))
        got = []
        while (buf := stream.next_buffer()) != INVALID_BUFFER:
            got.append(be.buffer_block(buf))
            be.release_buffer(buf)
        stream.end()
        assert got == [0, 2, 5, 7]
        reads = {r.start: r.submit_us for r in be.stats.read_log}
        assert sorted(reads) == [0, 2, 7] and be.stats.shared_blks_hit == 1
        issued[version] = reads[7]
    assert issued["18"] >= 50_000 > issued["19"]


# ------------------------------------------------------------------ what WaitReadBuffers reports
def test_19_under_sync_the_read_inside_wait_read_buffers_is_a_wait() -> None:
    for version in ("18", "19"):
        inst = _instance(version, "sync")
        be = inst.backend()
        op, bufs, got, need_wait = _start(be, 10, n=4)
        assert (got, need_wait) == (4, True)
        assert be.wait_read_buffers(op) is True  # 18's model value and 19's alike
        _release(be, bufs)


def test_19_a_pass_that_found_the_block_read_by_another_backend_still_needed_work() -> None:
    """Under sync, another backend reads the block between this backend's StartReadBuffers and
    WaitReadBuffers: 19's loop went round once more (needed_wait = true) and found it done
    (a hit); the model's 18 value is false (its clock did not move)."""
    for version, expected in (("18", False), ("19", True)):
        inst = _instance(version, "sync")
        be = inst.backend()
        other = inst.backend()
        op, bufs, _, need_wait = _start(be, 10)
        assert need_wait
        other.release_buffer(other.read_buffer(inst.relation("r"), 10))
        assert be.wait_read_buffers(op) is expected
        assert be.stats.shared_blks_hit == 1 and be.stats.shared_blks_read == 0
        _release(be, bufs)


@pytest.mark.parametrize("io_method", ASYNC)
def test_19_an_io_done_by_the_time_it_is_waited_for_needed_no_wait(io_method: str) -> None:
    for version in ("18", "19"):
        inst = _instance(version, io_method)
        be = inst.backend()
        op, bufs, _, need_wait = _start(be, 10, n=4)
        assert need_wait and op.ioh is not None
        be.cpu(op.ioh.complete_at - inst.clock.now + 10)
        waits = be.stats.waits
        assert be.wait_read_buffers(op) is False
        assert be.stats.waits - waits == (1 if version == "18" else 0)  # 19 only counts real waits
        _release(be, bufs)


@pytest.mark.parametrize("io_method", ASYNC)
def test_19_a_short_read_needed_another_pass(io_method: str) -> None:
    from reference_impl import Fault, FaultPlan

    for version in ("18", "19"):
        faults = FaultPlan([Fault("short_read", relation="r", block=12)])
        inst = Instance(Settings(version=version, io_method=io_method), faults=faults, debug=True)
        inst.create_relation("r", 100)
        be = inst.backend()
        op, bufs, _, _ = _start(be, 10, n=4)
        assert op.ioh is not None
        be.cpu(op.ioh.complete_at - inst.clock.now + 10)  # the first I/O is done: no wait for it
        needed = be.wait_read_buffers(op)
        assert [r.nblocks for r in be.stats.read_log] == [4, 2]
        assert needed is True  # the retry's I/O was waited for (both), and it was a retry (19)
        _release(be, bufs)


# ------------------------------------------------------------------ private reference counts
def test_19_reserves_the_last_free_refcount_entry() -> None:
    """Nine pins, then the first is released. 18 filled array slots 0..7 in pin order, so the
    ninth pin pushed the first pin's entry (slot 0) into the hash, and releasing it empties the
    hash; 19 filled slots 7..0, so the eighth pin's entry was pushed and stays hashed: its
    GetAdditionalPinLimit is one lower."""
    limits = {}
    for version in ("18", "19"):
        inst = _instance(version)
        be = inst.backend()
        rel = inst.relation("r")
        bufs = [be.read_buffer(rel, b) for b in range(9)]
        be.release_buffer(bufs[0])
        limits[version] = (be.refs.overflowed, be.get_additional_pin_limit())
        _release(be, bufs[1:])
        be.check_for_buffer_leaks()
    pin_limit = Settings().pin_limit
    assert limits == {"18": (0, pin_limit - 8), "19": (1, pin_limit - 9)}


def test_19_locking_a_buffer_moves_its_refcount_entry_back_into_the_array() -> None:
    """19 keeps the content lock's mode in the private refcount entry: BufferLockAcquire looks
    it up with do_move, so locking a pinned buffer whose entry overflowed into the hash takes
    it out of the hash. Nine pins, the ninth pushed one entry into the hash; the first released
    leaves an array slot free, and locking the hashed buffer fills it: overflow 1 -> 0 and
    GetAdditionalPinLimit one higher. 18's LWLock leaves the entries alone."""
    got = {}
    for version in ("18", "19", "20devel"):
        inst = _instance(version)
        be = inst.backend()
        rel = inst.relation("r")
        bufs = [be.read_buffer(rel, b) for b in range(9)]
        hashed = next(iter(be.refs.ovf))
        released = next(b for b in bufs if b != hashed)
        be.release_buffer(released)
        before = be.refs.overflowed
        be.lock_buffer(hashed)
        got[version] = (before, be.refs.overflowed, be.refs.count(hashed))
        _release(be, [b for b in bufs if b != released])
        be.check_for_buffer_leaks()
    assert got == {"18": (1, 1, 1), "19": (1, 0, 1), "20devel": (1, 0, 1)}


# ------------------------------------------------------------------ no free list
def test_19_has_no_free_list() -> None:
    """A new pool: 18 takes buffers off the free list (the clock hand stays at 0), 19's sweep
    takes them in the same order and moves its hand. Dropped buffers: 18 puts them first on the
    free list (StrategyFreeBuffer), 19 lets the sweep reach them."""
    victims = {}
    for version in ("18", "19"):
        inst = _instance(version, shared_buffers=32)
        inst.create_relation("s", 10)
        be = inst.backend()
        a = [be.read_buffer(inst.relation("r"), b) for b in range(10)]
        assert a == list(range(10))
        _release(be, a)
        hand = inst.pool.next_victim
        inst.pool.drop_relation_buffers(inst.relation("r"))
        b = be.read_buffer(inst.relation("s"), 0)
        victims[version] = (hand, b, len(inst.pool.freelist))
        be.release_buffer(b)
    assert victims == {"18": (0, 9, 31), "19": (10, 10, 0)}
