"""The read path's run helpers do what their per-block counterparts do, state for state.

``PrivateRefCount.pin_new_run`` against ``reserve()`` + ``pin_new()`` per buffer;
``BufferPool.get_clean_victim_outside_ring`` and ``BufferPool.sweep_chunks`` against the clock
sweep one buffer at a time; ``Backend._alloc_unmapped_run`` against ``start_read_buffers``' own
loop, on pools with mapped blocks inside the read, dirty and pinned buffers, a refilled free list.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, NoUnpinnedBuffers, ReadBuffersOperation, Settings
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.pool import BM_DIRTY, SWEEP_CHUNK, BufferPool
from reference_impl.buffers.refcount import PrivateRefCount
from tests.model._pools import pool_state, refcount_state

# ------------------------------------------------------------------------------ private counts


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=80),
    st.integers(1, 40),
)
def test_pin_new_run_equals_single_pins(ops, n) -> None:
    """pin_new_run leaves the array, the hash (in insertion order), the clock and the
    reservation exactly as reserve() + pin_new() for each buffer in turn."""
    batch = PrivateRefCount()
    single = PrivateRefCount()
    for refs in (batch, single):
        for pin, buf in ops:
            if pin:
                refs.reserve()
                refs.pin(buf)
            elif refs.count(buf):
                refs.unpin(buf)
    bufs = [100 + 3 * k for k in range(n)]
    batch.pin_new_run(bufs)
    for b in bufs:
        single.reserve()
        single.pin_new(b)
    assert refcount_state(batch) == refcount_state(single)


def test_pin_new_run_from_a_full_array_orders_the_hash() -> None:
    """Twenty new pins onto a full array whose clock is at slot 3: the hash receives the old
    entries from slot 3 round, then the first twelve new ones; the array holds the last eight,
    112 under slot 7."""
    refs = PrivateRefCount()
    for b in range(11):  # 8 in the array, 3 pushed: the clock is at slot 3
        refs.reserve()
        refs.pin(b)
    refs.pin_new_run(list(range(100, 120)))
    assert list(refs.ovf) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, *range(100, 112)]
    assert list(refs.pos) == list(range(112, 120))
    assert refs.arr_buf == [113, 114, 115, 116, 117, 118, 119, 112]
    assert refs.clock == 23 and refs.reserved == -1


# ------------------------------------------------------------------------------ victims


def _pool(
    nbuffers: int, usage: list[int], pins: list[int], dirty: list[bool], free: list[int], hand: int
) -> BufferPool:
    pool = Instance(Settings(shared_buffers=nbuffers)).pool
    pool.usage[:] = usage
    pool.refcount[:] = pins
    for b, d in enumerate(dirty):
        pool.flags[b] = BM_DIRTY if d else 0
    pool.freelist = deque(free)
    pool.in_freelist = bytearray(nbuffers)
    for b in free:
        pool.in_freelist[b] = 1
    pool.next_victim = hand % nbuffers
    return pool


def _victim_state(pool: BufferPool) -> tuple[object, ...]:
    return (
        list(pool.usage),
        list(pool.refcount),
        list(pool.freelist),
        bytes(pool.in_freelist),
        pool.next_victim,
        pool.complete_passes,
        pool.num_allocs,
    )


def _reference_victim(pool: BufferPool) -> int:
    """StrategyGetBuffer without a ring, one buffer at a time, as freelist.c has it."""
    pool.num_allocs += 1
    while pool.freelist:
        b = pool.freelist.popleft()
        pool.in_freelist[b] = 0
        if not pool.refcount[b] and not pool.usage[b]:
            return b
    trycounter = pool.nbuffers
    while True:
        b = pool.next_victim
        pool.next_victim = b + 1
        if pool.next_victim == pool.nbuffers:
            pool.next_victim = 0
            pool.complete_passes += 1
        if not pool.refcount[b]:
            if not pool.usage[b]:
                return b
            pool.usage[b] -= 1
            trycounter = pool.nbuffers
        else:
            trycounter -= 1
            if not trycounter:
                raise NoUnpinnedBuffers()


def _take(pool: BufferPool, search: Any) -> int | str:
    """One victim search; the victim is pinned and used, as BufferAlloc leaves it."""
    try:
        b = search(pool)
    except NoUnpinnedBuffers:
        return "NoUnpinnedBuffers"
    if b >= 0:
        pool.refcount[b] = 1
        pool.usage[b] = 1
    return b


_pools = st.integers(17, 700).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.sampled_from([0, 1, 1, 1, 2, 5]), min_size=n, max_size=n),
        st.lists(st.sampled_from([0, 0, 0, 0, 0, 0, 0, 1]), min_size=n, max_size=n),
        st.lists(st.sampled_from([False] * 9 + [True]), min_size=n, max_size=n),
        st.lists(st.integers(0, n - 1), max_size=20, unique=True),
        st.integers(0, n - 1),
        st.integers(1, 40),
    )
)


@settings(max_examples=200, deadline=None)
@given(_pools)
def test_clean_victims_are_the_sweeps_victims(case) -> None:
    """get_clean_victim_outside_ring gives the victims and state of the clock sweep one buffer
    at a time; where it gives up (-1), the sweep goes on from its state to the same result."""
    n, usage, pins, dirty, free, hand, searches = case
    fast = _pool(n, usage, pins, dirty, free, hand)
    ref = _pool(n, usage, pins, dirty, free, hand)
    for _ in range(searches):
        b = _take(fast, BufferPool.get_clean_victim_outside_ring)
        if b == -1:
            # It gave up before a dirty victim or at a pinned buffer on the clock.
            if fast.freelist:
                head = fast.freelist[0]
                assert fast.flags[head] & BM_DIRTY and not fast.refcount[head] and not fast.usage[head]
            else:
                h = fast.next_victim
                assert fast.refcount[h] or (not fast.usage[h] and fast.flags[h] & BM_DIRTY)
            b = _take(fast, _reference_victim)
            assert b == _take(ref, _reference_victim)
        else:
            assert b == _take(ref, _reference_victim)
            assert not fast.flags[b] & BM_DIRTY
        assert _victim_state(fast) == _victim_state(ref)
        if isinstance(b, str):
            break


@settings(max_examples=200, deadline=None)
@given(_pools, st.integers(0, 3))
def test_chunked_sweep_equals_the_sweep(case, runs) -> None:
    """get_buffer_outside_ring, which decrements whole chunks of unpinned buffers in use,
    leaves the pool as the clock sweep one buffer at a time; long stretches of buffers in
    use (a cold scan's second lap) make it take the chunks."""
    n, usage, pins, dirty, free, hand, searches = case
    usage = list(usage)
    for r in range(runs):  # stretches of more than a chunk in use, from a chunk boundary
        start = (r * 2 * SWEEP_CHUNK) % n
        for b in range(start, min(start + SWEEP_CHUNK + 40, n)):
            usage[b] = max(usage[b], 1 + r % 2)
    chunked = _pool(n, usage, pins, dirty, free, hand)
    ref = _pool(n, usage, pins, dirty, free, hand)
    for _ in range(searches):
        b = _take(chunked, lambda p: p.get_buffer_outside_ring(None))
        assert b == _take(ref, _reference_victim)
        assert _victim_state(chunked) == _victim_state(ref)
        if isinstance(b, str):
            break


def test_sweep_chunks_decrements_a_lap_at_once() -> None:
    """A cold scan's second lap: every buffer used once, none pinned. The sweep decrements the
    whole pool chunk by chunk and comes round to buffer 0."""
    pool = _pool(1000, [1] * 1000, [0] * 1000, [False] * 1000, [], 0)
    assert pool.get_buffer_outside_ring(None) == 0
    assert pool.usage == [0] * 1000 and pool.next_victim == 1 and pool.complete_passes == 1


# ------------------------------------------------------------------------------ the read's run


def _read_state(inst: Instance, be: Backend, buffers: list[int], result: object) -> dict[str, Any]:
    pool = inst.pool
    return {
        "result": result,
        "buffers": list(buffers),
        **pool_state(inst, be),
        "wal": (pool.wal_insert_lsn, pool.wal_flushed_lsn),
    }


_setup = st.fixed_dictionaries(
    {
        "nbuffers": st.integers(16, 48),
        "io_method": st.sampled_from(["worker", "sync", "io_uring"]),
        # (block, dirty: None / plain / WAL-logged, keep pinned)
        "reads": st.lists(
            st.tuples(st.integers(0, 90), st.sampled_from([None, False, True]), st.booleans()),
            max_size=60,
        ),
        "drop_other": st.booleans(),
        "start": st.integers(0, 80),
        "n": st.integers(2, 20),
        "forwarding": st.booleans(),
        # a read of another relation left in flight, and the time that passes after it
        "in_flight": st.one_of(st.none(), st.integers(0, 400)),
    }
)


def _run_read(setup: dict[str, Any], lane: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if not lane:
        monkeypatch.setattr(Backend, "_alloc_unmapped_run", lambda self, tag, n, buffers, index: (0, 0))
    inst = Instance(Settings(shared_buffers=setup["nbuffers"], io_method=setup["io_method"]))
    rel = inst.create_relation("t", 100)
    other = inst.create_relation("o", 20)
    be = inst.backend()
    pinned = 0
    for block, dirty, keep in setup["reads"]:
        try:
            buf = be.read_buffer(rel, block)
        except NoUnpinnedBuffers:
            break
        if dirty is not None:
            be.mark_buffer_dirty(buf, wal_logged=dirty)
        if keep and pinned < setup["nbuffers"] // 2:
            pinned += 1
        else:
            be.release_buffer(buf)
    if setup["drop_other"]:
        for block in range(4):
            try:
                be.release_buffer(be.read_buffer(other, block))
            except NoUnpinnedBuffers:
                break
        inst.pool.drop_relation_buffers(other)  # refills the free list at its head
    if setup["in_flight"] is not None:
        try:
            be.start_read_buffers(ReadBuffersOperation(other), [-1] * 4, 0, 10, 4, 0)
        except NoUnpinnedBuffers:
            pass
        inst.clock.advance(setup["in_flight"])
    buffers = [-1] * 32
    op = ReadBuffersOperation(rel)
    n = min(setup["n"], 100 - setup["start"])
    try:
        result: object = be.start_read_buffers(
            op, buffers, 0, setup["start"], n, 0, allow_forwarding=setup["forwarding"]
        )
    except NoUnpinnedBuffers:
        result = "NoUnpinnedBuffers"
    state = _read_state(inst, be, buffers, result)
    monkeypatch.undo()
    return state


@settings(max_examples=150, deadline=None)
@given(_setup)
def test_alloc_unmapped_run_equals_the_loop(setup) -> None:
    """A read without a ring leaves the pool (mapping order included), the private counts, the
    statistics and the time exactly as start_read_buffers' per-block loop alone."""
    with pytest.MonkeyPatch.context() as mp:
        assert _run_read(setup, True, mp) == _run_read(setup, False, mp)
