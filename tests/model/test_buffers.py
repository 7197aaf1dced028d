"""Buffer pool, private refcounts, pin limits, strategies and abort semantics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    BAS_BULKREAD,
    BAS_BULKWRITE,
    BAS_VACUUM,
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Instance,
    NoUnpinnedBuffers,
    ReadBuffersOperation,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
    get_access_strategy,
    get_access_strategy_pin_limit,
)
from reference_impl.buffers.refcount import PrivateRefCount


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=200))
def test_private_refcount_tracks_true_counts(ops) -> None:
    refs = PrivateRefCount()
    truth: dict[int, int] = {}
    for pin, buf in ops:
        if pin:
            refs.reserve()
            first = refs.pin(buf)
            assert first == (buf not in truth)
            truth[buf] = truth.get(buf, 0) + 1
        elif buf in truth:
            last = refs.unpin(buf)
            truth[buf] -= 1
            assert last == (truth[buf] == 0)
            if not truth[buf]:
                del truth[buf]
        assert refs.pinned() == truth
        assert refs.estimated_pins >= 8 and refs.estimated_pins >= refs.distinct()


def test_estimate_can_exceed_true_count() -> None:
    """Freeing array entries while others sit in the hash makes the estimate overshoot."""
    refs = PrivateRefCount()
    for b in range(12):
        refs.reserve()
        refs.pin(b)
    assert refs.overflowed == 4
    for b in range(12):
        if b in refs.pos:
            refs.unpin(b)
    assert refs.distinct() == 4 and refs.estimated_pins == 12


def test_ring_sizes_and_pin_limits_pg18() -> None:
    s = Settings()
    bulk = get_access_strategy(BAS_BULKREAD, s)
    assert bulk is not None and bulk.nbuffers == 94 and get_access_strategy_pin_limit(bulk, s.nbuffers) == 94
    vac = get_access_strategy(BAS_VACUUM, s)
    assert vac is not None and vac.nbuffers == 256 and vac.pin_limit() == 128
    bw = get_access_strategy(BAS_BULKWRITE, s)
    assert bw is not None and bw.nbuffers == 2048 and bw.pin_limit() == 1024
    assert get_access_strategy(BAS_BULKREAD, Settings(effective_io_concurrency=0)).nbuffers == 32
    assert get_access_strategy_pin_limit(None, s.nbuffers) == 16384
    # the ring follows the *effective* io_combine_limit
    assert get_access_strategy(BAS_BULKREAD, Settings(io_combine_limit=64)).nbuffers == 94


def test_vacuum_buffer_usage_limit_ring() -> None:
    inst = Instance(Settings(vacuum_buffer_usage_limit=256))
    ring = inst.vacuum_strategy()
    assert ring is not None and ring.nbuffers == 32 and ring.pin_limit() == 16
    assert Instance(Settings(vacuum_buffer_usage_limit=0)).vacuum_strategy() is None


def test_additional_pin_limit_counts_the_plus_eight() -> None:
    inst = Instance()
    be = inst.backend()
    assert be.get_pin_limit() == 94 and be.get_additional_pin_limit() == 86


def test_bulkread_ring_leaves_only_ring_pages_resident() -> None:
    inst = Instance(Settings(shared_buffers=16384))
    rel = inst.create_relation("t", 5000)
    be = inst.backend()
    from reference_impl.scans import run_scan

    run_scan("seqscan", be, rel)
    resident = inst.pool.resident_blocks(rel)
    assert len(resident) == 94 and max(resident) == 4999


def test_clock_sweep_errors_when_everything_is_pinned() -> None:
    inst = Instance(Settings(shared_buffers=16))
    rel = inst.create_relation("t", 40)
    be = inst.backend()
    held = [be.read_buffer(rel, b) for b in range(16)]
    with pytest.raises(NoUnpinnedBuffers):
        be.read_buffer(rel, 20)
    for b in held:
        be.release_buffer(b)


@pytest.mark.parametrize("io_method, reads_complete", [("worker", True), ("sync", False)])
def test_abort_without_end_leaves_staged_sync_reads_invalid(io_method: str, reads_complete: bool) -> None:
    """read_stream.md §7.1: abort drops pins; AIO reads complete, staged sync reads never run."""
    inst = Instance(Settings(io_method=io_method))
    rel = inst.create_relation("t", 100)
    be = inst.backend()
    stream = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 100))
    for _ in range(3):
        be.release_buffer(stream.next_buffer())
    pinned_by_stream = stream.pinned_buffers
    assert pinned_by_stream > 0
    be.abort()  # no read_stream_end
    be.check_for_buffer_leaks()
    inst.clock.advance(10_000_000)
    resident = inst.pool.resident_blocks(rel)
    invalid = inst.pool.mapped_invalid_blocks(rel)
    if reads_complete:
        assert not invalid and len(resident) > 3
    else:
        assert invalid and resident == {0, 1, 2}
    # evict skips mapped-but-invalid buffers, as pg_buffercache_evict_relation does
    evicted, skipped = inst.evict(rel)
    assert skipped == len(invalid) and evicted == len(resident)


def test_start_read_buffers_cuts_at_a_hit_and_forwards_it() -> None:
    inst = Instance(Settings(io_method="worker"))
    rel = inst.create_relation("t", 20)
    inst.prewarm(rel, [5])
    be = inst.backend()
    op = ReadBuffersOperation(rel)
    bufs = [INVALID_BUFFER] * 16
    n, need_wait = be.start_read_buffers(op, bufs, 0, 2, 8, 0)
    assert (n, need_wait) == (3, True)
    assert bufs[3] != INVALID_BUFFER and be.buffer_block(bufs[3]) == 5  # forwarded
    be.wait_read_buffers(op)
    n2, wait2 = be.start_read_buffers(op, bufs, 3, 5, 5, 0)
    assert (n2, wait2) == (1, False)
    for b in bufs[:4]:
        be.release_buffer(b)
    be.check_for_buffer_leaks()


def test_read_buffer_is_one_block_synchronous_even_under_worker() -> None:
    inst = Instance(Settings(io_method="worker"))
    rel = inst.create_relation("t", 4)
    be = inst.backend()
    for b in range(4):
        be.release_buffer(be.read_buffer(rel, b))
    assert [(r.start, r.nblocks, r.synchronous) for r in be.stats.read_log] == [
        (b, 1, True) for b in range(4)
    ]
