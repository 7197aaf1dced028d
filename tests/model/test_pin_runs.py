"""The read path's run helpers do what their per-block counterparts do, state for state.

``PrivateRefCount.pin_new_run`` against ``reserve()`` + ``pin_new()`` per buffer;
``BufferPool.sweep_chunks`` (inside ``get_buffer_outside_ring``) against the clock sweep one
buffer at a time.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, NoUnpinnedBuffers, Settings
from reference_impl.buffers.pool import BM_DIRTY, SWEEP_CHUNK, BufferPool
from reference_impl.buffers.refcount import PrivateRefCount

# ------------------------------------------------------------------------------ private counts


def _refcount_state(refs: PrivateRefCount) -> tuple[object, ...]:
    """Everything observable of the private counts, dict insertion orders included."""
    return (
        list(refs.arr_buf),
        list(refs.arr_cnt),
        list(refs.pos.items()),
        list(refs.ovf.items()),
        refs.clock,
        refs.reserved,
    )


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
    assert _refcount_state(batch) == _refcount_state(single)


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
