"""A read through a ring takes its run of victims at once exactly as the per-block loop would.

``Backend._alloc_ring_run`` (the BULKREAD ring's counterpart of ``_alloc_unmapped_run``) is
compared with ``start_read_buffers``' own per-block loop (the run switched off) on rings in
varied states: empty slots, pinned, used, dirty and never-valid ring buffers, a dirty one that
needs a WAL flush (``StrategyRejectBuffer``), a buffer held twice, blocks of the read already in
the pool, the ring wrapping round and smaller than the read, a freed ring, a read in flight
completing before the first victim; on random pools and rings; and end to end through streamed
scans with small pools, pages dirtied during the scans and rings kept across rescans. Each
comparison is also run against planted bugs, which it must catch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    BlockRangeReadStreamPrivate,
    Instance,
    NoUnpinnedBuffers,
    ReadBuffersOperation,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.pool import BM_DIRTY, BM_VALID
from reference_impl.buffers.strategy import BAS_BULKREAD, BufferAccessStrategy, get_access_strategy
from reference_impl.scans import run_scan
from tests.model._pools import (
    MethodSpy,
    _Buf,
    _buf,
    _clean_pool,
    _mutant,
    _pools,
    _setup_pool,
    _with,
    pool_state,
    run_patched,
    switched_off,
)

# ------------------------------------------------------------------------------ helpers


# The ring run switched off (start_read_buffers' loop then takes every victim), and a spy
# counting the blocks the ring runs took.
_per_block = partial(switched_off, "_alloc_ring_run", (0, 0, 0))
_Spy = partial(MethodSpy, method="_alloc_ring_run", count=lambda result: result[0])


def _ring_state(inst: Instance, be: Backend, strategy: BufferAccessStrategy) -> dict[str, Any]:
    pool = inst.pool
    return {
        "ring": (list(strategy.buffers), strategy.current, strategy.uses_after_free),
        "wal": (pool.wal_insert_lsn, pool.wal_flushed_lsn, list(pool.page_lsn)),
        **pool_state(inst, be),
    }


# ------------------------------------------------------------------------------ one read on a given ring


def _run_read(case: dict[str, Any], index: int = 3) -> dict[str, Any]:
    """One StartReadBuffers of ``case['n']`` blocks from ``case['start']`` through a BULKREAD
    ring holding ``case['ring']`` at position ``case['current']``, on the pool of
    test_pin_slices' ``_setup_pool``; the buffers listed in ``case['unflushed']`` have pages
    whose WAL is not flushed yet."""
    inst, be, _ = _setup_pool(
        case["nbuffers"], case["bufs"], case["order"], case["freelist"], case["hand"], case["start"]
    )
    pool = inst.pool
    if case["unflushed"]:
        pool.wal_insert_lsn = 7
        for b in case["unflushed"]:
            pool.page_lsn[b] = 7
    strategy = BufferAccessStrategy(BAS_BULKREAD, len(case["ring"]))
    strategy.buffers[:] = case["ring"]
    strategy.current = case["current"]
    if case["freed"]:
        strategy.free()
    op = ReadBuffersOperation(inst.relation("t"), strategy=strategy)
    buffers = [-1] * (index + 40)
    try:
        result: object = be.start_read_buffers(op, buffers, index, case["start"], case["n"], 0)
    except NoUnpinnedBuffers:
        result = "NoUnpinnedBuffers"
    return {
        "result": result,
        "op": (op.nblocks, op.nblocks_done),
        "buffers": buffers,
        **_ring_state(inst, be, strategy),
    }


def _ring_case(
    bufs: list[_Buf],
    ring: list[int],
    *,
    current: int = 0,
    hand: int = 20,
    freelist: list[int] | None = None,
    start: int = 10,
    n: int = 6,
    unflushed: tuple[int, ...] = (),
    freed: bool = False,
) -> dict[str, Any]:
    return {
        "nbuffers": len(bufs),
        "bufs": bufs,
        "order": list(range(len(bufs))),
        "freelist": freelist or [],
        "hand": hand,
        "start": start,
        "n": n,
        "ring": ring,
        "current": current,
        "unflushed": unflushed,
        "freed": freed,
    }


# A pool of 40 clean valid pages whose buffers 0-7 are a ring's, each used once since the ring
# took it (a scan's steady state); the clock's usual victims from buffer 8 on.
_RING = list(range(8))
_USED_RING = _with(_clean_pool(40), **{f"b{b}": _buf(500 + b, usage=1) for b in _RING})
_EMPTY = [-1] * 8
_DIRTY = BM_VALID | BM_DIRTY

# Named rings, each with the number of blocks the ring run must take (the loop does the rest).
CASES: dict[str, tuple[dict[str, Any], int]] = {
    "ring of reusable buffers": (_ring_case(_USED_RING, _RING), 6),
    "ring wraps round": (_ring_case(_USED_RING, _RING, current=5), 6),
    "ring smaller than the read": (_ring_case(_USED_RING, _RING, current=7, n=16), 16),
    "ring smaller than the read, from the free list": (
        _ring_case(_USED_RING, _RING, n=12, freelist=list(range(30, 40))),
        12,
    ),
    "empty ring, free list": (_ring_case(_clean_pool(40), _EMPTY, n=12, freelist=list(range(20, 40))), 12),
    "empty ring, clock": (_ring_case(_clean_pool(40), _EMPTY, n=12, hand=5), 12),
    "empty ring, free list partly in use": (
        _ring_case(
            _with(_clean_pool(40), b22=_buf(522, usage=1), b23=_buf(523, pinned=True)),
            _EMPTY,
            n=8,
            freelist=list(range(20, 40)),
        ),
        8,
    ),
    "ring partly empty": (_ring_case(_USED_RING, [0, 1, -1, -1, 4, 5, -1, 7], n=8), 8),
    "ring buffer pinned": (_ring_case(_with(_USED_RING, b3=_buf(503, usage=1, pinned=True)), _RING), 6),
    "ring holds a buffer twice": (_ring_case(_USED_RING, [0, 1, 2, 1, 4, 5, 6, 7]), 6),
    "ring buffer never valid": (_ring_case(_with(_USED_RING, b2=_buf(None, flags=0)), _RING), 6),
    "ring buffer swept to usage 0": (_ring_case(_with(_USED_RING, b2=_buf(502)), _RING), 6),
    "ring buffer used again": (_ring_case(_with(_USED_RING, b3=_buf(503, usage=2)), _RING), 2),
    "ring buffer used again, at the clock hand before a pinned buffer": (
        _ring_case(
            _with(_USED_RING, b3=_buf(503, usage=2), b4=_buf(504, pinned=True)), _RING, current=2, hand=3
        ),
        0,
    ),
    "dirty ring buffer": (_ring_case(_with(_USED_RING, b4=_buf(504, usage=1, flags=_DIRTY)), _RING), 3),
    "dirty ring buffer that needs a WAL flush": (
        _ring_case(_with(_USED_RING, b4=_buf(504, usage=1, flags=_DIRTY)), _RING, unflushed=(4,)),
        3,
    ),
    "dirty ring buffer first": (
        _ring_case(_with(_USED_RING, b1=_buf(501, usage=1, flags=_DIRTY)), _RING, unflushed=(1,)),
        0,
    ),
    "dirty victim outside the ring": (
        _ring_case(_with(_clean_pool(40), b8=_buf(508, flags=_DIRTY)), _EMPTY, hand=5),
        3,
    ),
    "pinned buffer outside the ring": (
        _ring_case(_with(_clean_pool(40), b7=_buf(507, pinned=True)), _EMPTY, hand=5),
        2,
    ),
    "block of the read in the pool": (_ring_case(_with(_USED_RING, b30=_buf(14)), _RING), 4),
    "block of the read in the pool, not valid": (
        _ring_case(_with(_USED_RING, b30=_buf(14, flags=0)), _RING),
        4,
    ),
    "block of the read held by a ring victim": (
        _ring_case(_with(_USED_RING, b2=_buf(14, usage=1)), _RING),
        6,
    ),
    "freed ring": (_ring_case(_USED_RING, _RING, freed=True), 0),
}


def _named_case_failures(patches: dict[str, Callable[..., Any]]) -> list[str]:
    """The named rings where the ring run (with ``patches`` applied to Backend) leaves another
    state than the per-block loop, fails, or takes another number of blocks than expected."""
    failures = []
    for name, (case, expected) in CASES.items():
        with _per_block():
            slow = _run_read(case)
        fast, spy = run_patched(partial(_run_read, case), patches, _Spy)
        if isinstance(fast, Exception):
            failures.append(f"{name}: {type(fast).__name__}")
            continue
        if fast != slow:
            failures.append(f"{name}: differs")
        if spy.taken != expected:
            failures.append(f"{name}: {spy.taken} blocks taken by the run, not {expected}")
    return failures


def test_the_named_rings_match_and_take_the_run_where_they_should() -> None:
    """Each named ring leaves the same state with and without the ring run, which takes the
    blocks up to exactly where its conditions stop it."""
    assert _named_case_failures({}) == []


def test_the_named_rings_cover_reuses_evictions_writes_and_rejections() -> None:
    """The named rings reach every case of the loop they stand for: reuses and evictions, a
    dirty ring buffer written, one rejected (the ring's slot emptied), a hit cutting the read."""
    with _per_block():
        steady = _run_read(CASES["ring smaller than the read"][0])
        written = _run_read(CASES["dirty ring buffer"][0])
        rejected = _run_read(CASES["dirty ring buffer that needs a WAL flush"][0])
        hit = _run_read(CASES["block of the read in the pool"][0])
    bulkread = steady["stats"]["io"]["bulkread"]
    assert (bulkread["reuses"], bulkread["evictions"]) == (8, 8)
    assert steady["buffers"][3:19] == [*range(8), *range(20, 28)] and steady["ring"][0] == list(range(20, 28))
    assert written["stats"]["io"]["bulkread"]["writes"] == 1
    assert rejected["stats"]["io"]["bulkread"]["writes"] == 0 and rejected["ring"][0][4] == -1
    assert hit["result"] == (4, True)


def _in_flight_state() -> dict[str, Any]:
    """A read of the ring's buffers still in flight, due by the time the next read through the
    ring starts: its completion unpins them, so they are reused."""
    inst = Instance(Settings(shared_buffers=64, io_method="worker"))
    rel = inst.create_relation("t", 100)
    be = inst.backend()
    strategy = BufferAccessStrategy(BAS_BULKREAD, 8)
    buffers = [-1] * 16
    be.start_read_buffers(ReadBuffersOperation(rel, strategy=strategy), buffers, 0, 0, 8, 0)
    for b in buffers[:8]:
        be.release_buffer(b)
    assert inst.pool.refcount[buffers[0]] == 1  # the I/O's pin
    inst.clock.advance(10_000)
    be.start_read_buffers(ReadBuffersOperation(rel, strategy=strategy), buffers, 8, 8, 8, 0)
    return {"buffers": buffers, **_ring_state(inst, be, strategy)}


def _in_flight_failures(patches: dict[str, Callable[..., Any]]) -> list[str]:
    """As :func:`_named_case_failures` for :func:`_in_flight_state`, whose two reads the ring
    run takes whole."""
    with _per_block():
        slow = _in_flight_state()
    fast, spy = run_patched(_in_flight_state, patches, _Spy)
    if isinstance(fast, Exception):
        return [f"read in flight: {type(fast).__name__}"]
    failures = [] if fast == slow else ["read in flight: differs"]
    if spy.taken != 16:
        failures.append(f"read in flight: {spy.taken} blocks taken by the run, not 16")
    return failures


def test_a_read_in_flight_completes_before_the_first_victim() -> None:
    """The read in flight completes before the second read's first victim is chosen, in the
    run as in the loop: the second read reuses the first one's buffers."""
    assert _in_flight_failures({}) == []
    state = _in_flight_state()
    assert state["buffers"][8:] == state["buffers"][:8]
    assert state["stats"]["io"]["bulkread"]["reuses"] == 8


@st.composite
def _rings(draw: st.DrawFn) -> dict[str, Any]:
    """test_pin_slices' random pools with a ring: buffers (some twice) or empty slots, its
    members mostly used once, some pages not flushed to WAL, sometimes freed."""
    case = draw(_pools())
    n = case["nbuffers"]
    size = draw(st.integers(1, 12))
    ring = draw(
        st.lists(
            st.one_of(st.integers(0, n - 1), st.integers(0, n - 1), st.just(-1)), min_size=size, max_size=size
        )
    )
    bufs = list(case["bufs"])
    for b in ring:
        if b >= 0 and bufs[b][1] == 0 and draw(st.booleans()):
            block, _, pinned, flags = bufs[b]
            bufs[b] = (block, 1, pinned, flags)
    return {
        **case,
        "bufs": bufs,
        "n": draw(st.integers(2, 40)),
        "ring": ring,
        "current": draw(st.integers(0, size - 1)),
        "unflushed": tuple(draw(st.lists(st.integers(0, n - 1), max_size=6))),
        "freed": draw(st.integers(0, 9)) == 0,
    }


@settings(max_examples=400, deadline=None)
@given(_rings())
def test_ring_runs_equal_the_per_block_loop(case) -> None:
    """On random pools and rings the ring run leaves the pool (the mapping table's order
    included), the ring, the private counts, the statistics, the buffers and the time exactly
    as the per-block loop."""
    fast = _run_read(case)
    with _per_block():
        slow = _run_read(case)
    assert fast == slow


# ------------------------------------------------------------------------------ end to end


# One connection, so that a pool of a few hundred buffers still allows reads of many blocks.
_ONE_CONNECTION = {
    "max_connections": 1,
    "autovacuum_worker_slots": 1,
    "max_worker_processes": 0,
    "max_wal_senders": 0,
}


def _scan_state(setup: dict[str, Any]) -> dict[str, Any]:
    """Streamed scans through a BULKREAD ring on a small pool, the ring kept across rescans
    (or replaced), pages dirtied during a scan (as hint bits do), pins held, hot pages and
    other relations' buffers in between."""
    # Direct I/O, as the benchmark: reads of many blocks (buffered, the stream reads one at a time).
    direct = {"debug_io_direct": "data"} if setup["direct"] else {}
    inst = Instance(
        Settings(shared_buffers=setup["nbuffers"], io_method=setup["io_method"], **direct, **_ONE_CONNECTION)
    )
    nblocks = setup["nblocks"]
    rel = inst.create_relation("t", nblocks)
    other = inst.create_relation("o", 40)
    be = inst.backend()
    strategy = get_access_strategy(BAS_BULKREAD, inst.settings)
    assert strategy is not None
    held: list[int] = []
    for kind, arg in setup["steps"]:
        try:
            if kind == "scan":
                stream = begin_stream(
                    be,
                    rel,
                    block_range_read_stream_cb,
                    BlockRangeReadStreamPrivate(arg % nblocks, nblocks),
                    strategy=strategy,
                )
                dirty_every = arg % 7
                k = 0
                while (buf := stream.next_buffer()) >= 0:
                    k += 1
                    if dirty_every and k % dirty_every == 0:
                        be.mark_buffer_dirty(buf, wal_logged=k % 2 == 0)
                    be.release_buffer(buf)
                stream.end()
            elif kind == "new ring":
                strategy = get_access_strategy(BAS_BULKREAD, inst.settings)
                assert strategy is not None
            elif kind == "hold":
                held.append(be.read_buffer(rel, arg % nblocks))
            elif kind == "hot":
                for _ in range(2):
                    be.release_buffer(be.read_buffer(rel, arg % nblocks))
            elif kind == "flush":
                be.flush_wal()
            elif kind == "other":
                for block in range(arg % 40):
                    be.release_buffer(be.read_buffer(other, block))
            elif kind == "drop":
                inst.pool.drop_relation_buffers(other)
            elif kind == "release" and held:
                be.release_buffer(held.pop(arg % len(held)))
        except NoUnpinnedBuffers:
            return {"error": "NoUnpinnedBuffers", **_ring_state(inst, be, strategy)}
    log = [asdict(r) for r in be.stats.read_log or []]
    return {"log": log, **_ring_state(inst, be, strategy)}


_scans = st.fixed_dictionaries(
    {
        "nbuffers": st.integers(64, 1200),
        "nblocks": st.integers(50, 2000),
        "direct": st.sampled_from([True, True, False]),
        "io_method": st.sampled_from(["worker", "sync", "io_uring"]),
        "steps": st.lists(
            st.tuples(
                st.sampled_from(
                    ["scan", "scan", "scan", "new ring", "hold", "hot", "flush", "other", "drop", "release"]
                ),
                st.integers(0, 400),
            ),
            max_size=10,
        ),
    }
)


@settings(max_examples=50, deadline=None)
@given(_scans)
def test_streamed_ring_scans_equal_the_per_block_loop(setup) -> None:
    """Streamed scans through rings leave the pool, the ring, the private counts, the
    statistics, the reads issued and the time exactly as with the per-block loop."""
    fast = _scan_state(setup)
    with _per_block():
        slow = _scan_state(setup)
    assert fast == slow


def test_streamed_ring_scans_take_runs() -> None:
    """The end-to-end comparison above reaches the ring run: rescans through one ring with
    pages dirtied during the second, most blocks by runs."""
    setup = {
        "nbuffers": 1200,
        "nblocks": 2000,
        "io_method": "worker",
        "direct": True,
        "steps": [("scan", 0), ("scan", 3)],
    }
    with pytest.MonkeyPatch.context() as mp:
        spy = _Spy(mp)
        fast = _scan_state(setup)
    with _per_block():
        slow = _scan_state(setup)
    assert fast == slow
    assert fast["stats"]["io"]["bulkread"]["writes"] > 0
    assert spy.taken >= 2000


def test_a_seqscan_with_a_small_pool_reads_its_ring_in_runs() -> None:
    """run_scan's seqscan of three times a small pool, twice (the second time through a full
    ring): the same pool, statistics and result as the loop, nearly every block by a ring run."""

    def state() -> tuple[object, ...]:
        inst = Instance(
            Settings(shared_buffers=2000, io_method="io_uring", debug_io_direct="data", **_ONE_CONNECTION),
            record_reads=False,
        )
        rel = inst.create_relation("t", 6000)
        be = inst.backend()
        results = [run_scan("seqscan", be, rel), run_scan("seqscan", be, rel)]
        return repr(results), pool_state(inst, be)

    with pytest.MonkeyPatch.context() as mp:
        spy = _Spy(mp)
        fast = state()
    with _per_block():
        slow = state()
    assert fast == slow
    assert spy.taken >= 11_500


# ------------------------------------------------------------------------------ planted bugs

_RING_RUN_BUGS = [
    # (method, old, new): each a plausible slip in the ring run or its call.
    ("_alloc_ring_run", "if comps and comps[0][0] <= self.clock.now:", "if False:"),  # no poll
    ("_alloc_ring_run", "if t in mapping:", "if False:"),  # maps a block twice
    ("_alloc_ring_run", "if b >= 0 and not refcount[b]:", "if b >= 0:"),  # takes a pinned buffer
    # A used ring buffer searched for outside the ring: a stopped search has decremented it.
    ("_alloc_ring_run", "if b >= 0 and not refcount[b]:", "if b >= 0 and not refcount[b] and usage[b] <= 1:"),
    ("_alloc_ring_run", "if usage[b] > 1:", "if usage[b] > 2:"),
    ("_alloc_ring_run", "if f & BM_DIRTY:", "if False:"),  # takes a dirty ring buffer unwritten
    ("_alloc_ring_run", "reused += 1", "evicted += 1"),
    ("_alloc_ring_run", "evicted += 1", "reused += 1"),
    ("_alloc_ring_run", "if b < 0:", "if b < -1:"),
    ("_alloc_ring_run", "ring[c] = b", "pass"),  # the outside victim does not take the slot
    ("_alloc_ring_run", "if c == size:", "if c > size:"),  # no wrap-around
    ("_alloc_ring_run", "cur = c\n", "pass\n"),
    ("_alloc_ring_run", "strategy.current = cur", "pass"),
    ("_alloc_ring_run", "del mapping[old]", "pass"),
    ("_alloc_ring_run", "usage[b] = 1", "pass"),
    ("_alloc_ring_run", "pool_flags[b] = 0", "pass"),
    ("_alloc_ring_run", "self.refs.pin_new_run(buffers[index:j])", "pass"),
    ("start_read_buffers", "self.stats.io[op.context].reuses += reused", "pass"),
    ("start_read_buffers", "(strategy is None or not strategy.freed)", "True"),  # a freed ring
]


@pytest.mark.parametrize(
    ("method", "old", "new"), _RING_RUN_BUGS, ids=[f"{m}:{o}->{n}" for m, o, n in _RING_RUN_BUGS]
)
def test_the_comparison_catches_planted_bugs(method: str, old: str, new: str) -> None:
    """With the bug planted, some named ring (or the read in flight) differs from the per-block
    loop, fails, or the run takes another number of blocks."""
    mutant = _mutant(Backend, method, old, new)
    patches = {method: mutant}
    assert _named_case_failures(patches) + _in_flight_failures(patches), (
        f"planted bug {old!r} -> {new!r} unnoticed"
    )
