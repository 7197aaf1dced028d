"""ReadStream API semantics: set_strategy, reset, end, debug invariants, master variant."""

from __future__ import annotations

import pytest

from reference_impl import (
    BAS_BULKREAD,
    INVALID_BUFFER,
    READ_STREAM_FULL,
    BlockRangeReadStreamPrivate,
    Instance,
    InvariantViolation,
    ModelUsageError,
    ReadStreamMaster,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
    get_access_strategy_with_size,
)
from reference_impl.buffers.strategy import BAS_VACUUM

from ._streams import drive, list_callback


def _stream(inst: Instance, n: int, **kw):
    rel = (
        inst.relation("t")
        if "t" in [r.name for r in inst.storage.relations()]
        else inst.create_relation("t", n)
    )
    be = inst.backends[0] if inst.backends else inst.backend()
    return be, begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, n), **kw)


def test_set_strategy_never_leaves_a_zero_pin_limit() -> None:
    inst = Instance(Settings(shared_buffers=128))
    be, s = _stream(inst, 50)
    tiny = get_access_strategy_with_size(BAS_VACUUM, 8, inst.settings.nbuffers)  # 1 buffer → limit 0
    assert tiny is not None and tiny.pin_limit() == 0
    s.set_strategy(tiny)
    assert s.max_pinned_buffers == 1 and s.distance <= 1
    got = []
    while (b := s.next_buffer()) != INVALID_BUFFER:
        got.append(be.buffer_block(b))
        be.release_buffer(b)
    assert got == list(range(50))
    s.end()


def test_set_strategy_clamps_distance_and_keeps_capacity() -> None:
    inst = Instance()
    be, s = _stream(inst, 300, flags=READ_STREAM_FULL)
    for _ in range(40):
        be.release_buffer(s.next_buffer())
    s.reset()
    s.distance = 80  # a large distance left from the first pass
    ring = get_access_strategy_with_size(BAS_BULKREAD, 256, inst.settings.nbuffers)
    s.set_strategy(ring)
    assert s.max_pinned_buffers == 32 and s.distance == 32
    assert s.stats.capacity == 94
    s.end()


def test_set_strategy_requires_an_idle_stream() -> None:
    inst = Instance()
    be, s = _stream(inst, 50)
    be.release_buffer(s.next_buffer())
    with pytest.raises(ModelUsageError, match="idle stream"):
        s.set_strategy(None)
    s.end()


def test_freed_strategy_is_refused() -> None:
    inst = Instance()
    ring = inst.strategy("bulkread")
    assert ring is not None
    ring.free()
    with pytest.raises(ModelUsageError, match="freed"):
        _stream(inst, 10, strategy=ring)


def test_reset_releases_everything_and_the_stream_is_reusable() -> None:
    inst = Instance()
    be, s = _stream(inst, 100)
    for _ in range(5):
        be.release_buffer(s.next_buffer())
    consumed_through = 4
    s.reset()
    assert be.pinned_buffers() == {}
    # reusable: the callback continues after the blocks it produced (those read ahead are dropped)
    buf = s.next_buffer()
    assert buf != INVALID_BUFFER and be.buffer_block(buf) > consumed_through
    be.release_buffer(buf)
    s.end()
    with pytest.raises(ModelUsageError):
        s.next_buffer()
    be.check_for_buffer_leaks()


def test_debug_mode_catches_a_callback_called_after_its_end() -> None:
    inst = Instance(debug=True)
    rel = inst.create_relation("t", 10)
    be = inst.backend()
    s = begin_stream(be, rel, list_callback([1, 2]))
    s.callback_ended = True  # pretend the end was already reported
    with pytest.raises(InvariantViolation):
        s.next_buffer()


def test_per_buffer_data_follows_its_block_across_wraparounds() -> None:
    inst = Instance(Settings(effective_io_concurrency=1, io_combine_limit=2), debug=True)
    rel = inst.create_relation("t", 500)
    be = inst.backend()
    blocks = list(range(0, 500, 3)) + list(range(1, 500, 7))

    it = iter(blocks)

    def cb(stream, private):
        b = next(it, 0xFFFFFFFF)
        return b if b == 0xFFFFFFFF else (b, ("data", b))

    s = begin_stream(be, rel, cb, per_buffer_data=True)
    seen = []
    while True:
        buf, data = s.next_buffer_with_data()
        if buf == INVALID_BUFFER:
            break
        assert data == ("data", be.buffer_block(buf))
        seen.append(be.buffer_block(buf))
        be.release_buffer(buf)
    s.end()
    assert seen == blocks


@pytest.mark.parametrize("io_method", ["sync", "worker", "io_uring"])
def test_master_reproduces_8_1_when_waits_block(io_method: str) -> None:
    reads, _, _ = drive(
        nblocks=20, settings=Settings(version="master", io_method=io_method), device="cloud-1ms"
    )
    assert reads == [(0, 0), (1, 2), (3, 6), (7, 14), (15, 19)]


@pytest.mark.parametrize("version", ["18", "19", "20devel"])
@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_end_starts_and_reads_the_pending_read(version: str, io_method: str) -> None:
    """read_stream_reset (every version) drains through read_stream_next_buffer with the
    distance at 0, which starts the pending read: 18's final test (distance == 0), 19's
    read_stream_should_issue_now (readahead_distance == 0). Taking 2 of 100 cold blocks and
    ending reads [0] [1-2] [3-5], as an 18.6 and a master server do."""
    reads, got, _ = drive(
        nblocks=100, take=2, settings=Settings(version=version, io_method=io_method), device="cloud-1ms"
    )
    assert got == [0, 1]
    assert reads == [(0, 0), (1, 2), (3, 5)]


def test_master_pause_and_resume_keep_order() -> None:
    inst = Instance(Settings(version="master"), debug=True)
    rel = inst.create_relation("t", 100)
    be = inst.backend()
    blocks = iter(range(100))
    state = {"n": 0}

    def cb(stream, private):
        state["n"] += 1
        if state["n"] == 30:
            return stream.pause()
        return next(blocks, 0xFFFFFFFF)

    s = begin_stream(be, rel, cb)
    assert isinstance(s, ReadStreamMaster)
    got = []
    while (b := s.next_buffer()) != INVALID_BUFFER:
        got.append(be.buffer_block(b))
        be.release_buffer(b)
    assert got == list(range(29))
    s.resume()
    while (b := s.next_buffer()) != INVALID_BUFFER:
        got.append(be.buffer_block(b))
        be.release_buffer(b)
    assert got == list(range(100))
    s.end()


def test_master_stats_capacity_and_counts() -> None:
    inst = Instance(Settings(version="master"))
    be, s = _stream(inst, 64)
    stats = s.enable_stats()
    while (b := s.next_buffer()) != INVALID_BUFFER:
        be.release_buffer(b)
    s.end()
    assert stats.distance_capacity == 94 and stats.prefetch_count == 64 and stats.io_nblocks == 64


def test_debug_mode_catches_a_lost_unget() -> None:
    """A stream that forgets the block it could not start reads the wrong blocks: caught."""
    from reference_impl import InvalidBlockNumber, ReadStream

    class LosesUngotBlock(ReadStream):
        def _unget_block(self, blocknum: int) -> None:
            return None

    inst = Instance(Settings(io_combine_limit=4, effective_io_concurrency=1), debug=True)
    rel = inst.create_relation("t", 100)
    be = inst.backend()
    blocks = iter([0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23, 40, 41, 42, 43, 50])
    s = LosesUngotBlock(be, rel, lambda st, p: next(blocks, InvalidBlockNumber))
    with pytest.raises(InvariantViolation, match="next block the callback produced"):
        while (b := s.next_buffer()) != INVALID_BUFFER:
            be.release_buffer(b)
