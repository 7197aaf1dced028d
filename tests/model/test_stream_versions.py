"""Each model version's stream does what its own ``read_stream.c`` does where the versions differ.

The expectations are worked out by hand from the C (the function is named in each test): 18.6,
19beta1 and 20devel (master at f20c4278). ``EXPLAIN (IO)`` statistics (``IOStats``, 19+) are
counted where the C counts: ``read_stream_count_prefetch`` once per buffer returned by
``read_stream_next_buffer`` *before* its pin is handed over (``pinned_buffers`` still counts it),
in the fast path too, and for the buffers the reset drain takes (``read_stream_reset`` calls
``read_stream_next_buffer``), but not for the fast path's last buffer (its end-of-stream branch
returns without counting); ``read_stream_count_io`` at each started I/O, the fast path's misses
included; ``read_stream_count_wait`` when ``needed_wait``.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import (
    BAS_BULKREAD,
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Instance,
    ModelUsageError,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
    get_access_strategy_with_size,
)


def _begin(
    version: str, nblocks: int, *, io_method: str = "worker", cached: Any = (), ring: str | None = None
) -> tuple[Instance, Any, Any]:
    inst = Instance(Settings(version=version, io_method=io_method), debug=True, device="cloud-1ms")
    rel = inst.create_relation("t", nblocks)
    inst.prewarm(rel, list(cached))
    be = inst.backend()
    strategy = None if ring is None else inst.strategy(ring)
    priv = BlockRangeReadStreamPrivate(0, nblocks)
    return inst, be, begin_stream(be, rel, block_range_read_stream_cb, priv, strategy=strategy)


def _take(be: Any, stream: Any, n: int | None = None) -> list[int]:
    got: list[int] = []
    while n is None or len(got) < n:
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        got.append(be.buffer_block(buf))
        be.release_buffer(buf)
    return got


def _io(stats: Any) -> tuple[int, ...]:
    return (
        stats.prefetch_count,
        stats.distance_sum,
        stats.distance_max,
        stats.io_count,
        stats.io_nblocks,
        stats.io_in_progress,
        stats.wait_count,
    )


# ------------------------------------------------------------------------------ versions
@pytest.mark.parametrize(
    ("version", "cls", "name"),
    [
        ("18", "ReadStream", "18"),
        ("19", "ReadStream19", "19"),
        ("20devel", "ReadStream20devel", "20devel"),
        ("master", "ReadStream20devel", "20devel"),
    ],
)
def test_each_version_begins_its_own_stream(version: str, cls: str, name: str) -> None:
    _, _, s = _begin(version, 4)
    assert type(s).__name__ == cls and s.version == name
    s.end()


# ------------------------------------------------------------------------------ IOStats (19+)
@pytest.mark.parametrize("version", ["19", "20devel"])
def test_prefetch_is_sampled_before_the_pin_is_handed_over(version: str) -> None:
    """3 cold blocks under sync: read [0] (sample: 1 pinned), read [1-2] and return 1 (2
    pinned), return 2 (1 pinned): distance_sum 4, distance_max 2 (read_stream_next_buffer calls
    read_stream_count_prefetch before ``pinned_buffers--``)."""
    _, be, s = _begin(version, 3, io_method="sync")
    stats = s.enable_stats()
    assert _take(be, s) == [0, 1, 2]
    s.end()
    # prefetch_count, distance_sum, distance_max, io_count, io_nblocks, io_in_progress, wait_count
    assert _io(stats) == (3, 4, 2, 2, 3, 2, 2)


@pytest.mark.parametrize("version", ["19", "20devel"])
@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_buffers_drained_by_end_are_counted(version: str, io_method: str) -> None:
    """Take 2 of 100 cold blocks, then end: the drain returns block 2 (1 pinned), starts the
    pending [3-5] and returns 3, 4, 5 (3, 2, 1 pinned), each through read_stream_next_buffer and
    so read_stream_count_prefetch; the wait for [3-5] counts as one more (it needed to wait)."""
    _, be, s = _begin(version, 100, io_method=io_method)
    stats = s.enable_stats()
    assert _take(be, s, 2) == [0, 1]
    assert _io(stats) == (2, 3, 2, 2, 3, 2, 2)
    s.end()
    assert _io(stats) == (6, 10, 3, 3, 6, 3, 3)


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_fast_path_counts_its_buffers_but_not_its_last(version: str) -> None:
    """10 cached blocks: block 0 comes through the general path, 1..9 through the fast path, and
    the fast path's end-of-stream branch (handing out 9) returns without counting."""
    _, be, s = _begin(version, 10, cached=range(10))
    stats = s.enable_stats()
    assert _take(be, s) == list(range(10))
    assert s.stats.fast_path_returns == 9
    s.end()
    assert _io(stats) == (9, 9, 1, 0, 0, 0, 0)


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_a_fast_path_miss_is_counted_as_an_io(version: str) -> None:
    """Blocks 0-4 cached, 5 cold: the fast path meets 5, starts its one-block read
    (read_stream_count_io(stream, 1, 1)) and counts the buffer it hands out; the next call waits
    for 5 (read synchronously, so needed_wait) and counts it."""
    _, be, s = _begin(version, 6, cached=range(5))
    stats = s.enable_stats()
    assert _take(be, s) == list(range(6))
    s.end()
    assert _io(stats) == (6, 6, 1, 1, 1, 1, 1)


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_capacity_is_max_pinned_buffers_when_stats_are_enabled(version: str) -> None:
    inst, be, s = _begin(version, 50)
    _take(be, s, 5)
    s.reset()
    s.set_strategy(get_access_strategy_with_size(BAS_BULKREAD, 256, inst.settings.nbuffers))
    stats = s.enable_stats()  # read_stream_enable_stats: the cap as it is now
    assert stats.distance_capacity == s.max_pinned_buffers == 32
    s.end()


def test_pg18_has_no_io_stats() -> None:
    _, _, s = _begin("18", 4)
    assert not hasattr(s, "enable_stats")
    s.end()


# ------------------------------------------------------------------------------ what counts as a wait
@pytest.mark.parametrize("version", ["19", "20devel"])
def test_readahead_grows_only_when_wait_read_buffers_says_it_waited(version: str) -> None:
    """read_stream_next_buffer doubles readahead_distance only if WaitReadBuffers() returned
    true (or the read was synchronous); combine_distance doubles after every I/O. A buffer
    manager whose waits never wait leaves the read-ahead distance at 1 while reads grow to
    io_combine_limit (read_stream_should_look_ahead lets a pending read grow while nothing is
    pinned)."""
    _, be, s = _begin(version, 200)
    real = be.wait_read_buffers

    def never_waited(op: Any) -> bool:
        real(op)
        return False

    be.wait_read_buffers = never_waited
    assert _take(be, s) == list(range(200))
    assert {d for _, d in s.stats.distance_history if d} == {1}
    sizes = [r.nblocks for r in be.stats.read_log]
    assert sizes[:5] == [1, 2, 4, 8, 16] and max(sizes) == 16
    s.end()


# ------------------------------------------------------------------------------ API per version
@pytest.mark.parametrize("version", ["18", "20devel"])
def test_clear_strategy_drops_the_ring_of_every_read(version: str) -> None:
    """read_stream_clear_strategy (18.6, 20devel): later reads use no ring; the cap stays."""
    _, be, s = _begin(version, 400, ring="bulkread")
    cap = s.max_pinned_buffers
    _take(be, s, 100)
    bulk = be.stats.io["bulkread"].reads
    s.clear_strategy()
    assert all(op.strategy is None for op in s.ios) and s.max_pinned_buffers == cap
    _take(be, s)
    s.end()
    assert bulk > 0 and be.stats.io["bulkread"].reads <= bulk + s.max_ios
    assert be.stats.io["normal"].reads > 0


def test_pg19_has_no_clear_strategy() -> None:
    _, _, s = _begin("19", 10)
    with pytest.raises(ModelUsageError, match="not in PostgreSQL 19"):
        s.clear_strategy()
    s.end()


@pytest.mark.parametrize("method", ["pause", "resume"])
def test_pg18_has_no_pause_or_resume(method: str) -> None:
    _, _, s = _begin("18", 10)
    with pytest.raises(ModelUsageError, match="not in PostgreSQL 18"):
        getattr(s, method)()
    s.end()


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_pause_saves_both_distances_and_resume_restores_them(version: str) -> None:
    """read_stream_pause saves readahead_distance and combine_distance and zeroes both;
    read_stream_resume puts them back; read_stream_reset sets the saved ones to 1."""
    _, be, s = _begin(version, 100)
    _take(be, s, 10)
    saved = (s.readahead_distance, s.combine_distance)
    assert saved[0] > 1 and saved[1] > 1
    s.pause()
    assert (s.readahead_distance, s.combine_distance) == (0, 0)
    assert (s.resume_readahead_distance, s.resume_combine_distance) == saved
    s.resume()
    assert (s.readahead_distance, s.combine_distance) == saved
    s.reset()
    assert (s.resume_readahead_distance, s.resume_combine_distance, s.distance_decay_holdoff) == (1, 1, 0)
    s.end()


# ------------------------------------------------------------------------------ temporary relations
@pytest.mark.parametrize("version", ["18", "19", "20devel"])
def test_a_temporary_relation_is_streamed_through_local_buffers(version: str) -> None:
    """read_stream_begin_impl caps the queue at GetLocalPinLimit() for a temporary relation
    (SmgrIsTemp) and read_stream_start_pending_read asks GetAdditionalLocalPinLimit(); another
    session's temporary relation is refused (RELATION_IS_OTHER_TEMP)."""
    from reference_impl.errors import OtherSessionTempRelation

    inst = Instance(Settings(version=version, temp_buffers=100), debug=True)
    be = inst.backend()
    rel = inst.create_relation("tmp", 300, temp_of=be)
    s = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 300))
    assert s.temporary and s.max_pinned_buffers == be.get_local_pin_limit() < be.get_pin_limit()
    assert _take(be, s) == list(range(300))
    assert s.stats.max_pinned <= s.max_pinned_buffers
    s.end()
    other = inst.backend()
    with pytest.raises(OtherSessionTempRelation):
        begin_stream(other, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 300))
