"""The pin path's slice shortcuts do what the per-block code does, state for state.

``Backend._take_slot_run`` takes a read's victims at once where they are consecutive slots (the
free list's head, or the buffers from the clock hand): it is compared with
``Backend._alloc_unmapped_run``'s own per-block loop (the shortcut switched off) on pools in
varied states: pinned, used, dirty and unmapped buffers, blocks of the read already in the pool,
the hand near the pool's end, free lists consecutive or not and partly in use; and end to end
through streamed scans. ``Backend.release_buffer``'s inlined paths are compared with
``PrivateRefCount.unpin``. Each comparison is also run against planted bugs (the code's source
with one check or step changed), which it must catch.
"""

from __future__ import annotations

import random
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
    ModelUsageError,
    NoUnpinnedBuffers,
    ReadPathObserver,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.buffers import bufmgr
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.pool import BM_DIRTY, BM_IO_ERROR, BM_VALID, BM_ZEROED
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
    refcount_state,
    run_patched,
    switched_off,
)

# ------------------------------------------------------------------------------ helpers


# The shortcut switched off (_alloc_unmapped_run's loop then takes every victim), and a spy
# counting the runs it took.
_per_block = partial(switched_off, "_take_slot_run", (0, 0))
_Spy = partial(MethodSpy, method="_take_slot_run", count=lambda result: 1 if result[0] else 0)


# ------------------------------------------------------------------------------ one run on a given pool


def _run_once(case: dict[str, Any], index: int = 3) -> dict[str, Any]:
    inst, be, tag = _setup_pool(
        case["nbuffers"], case["bufs"], case["order"], case["freelist"], case["hand"], case["start"]
    )
    buffers = [-1] * (index + 40)
    try:
        result: object = be._alloc_unmapped_run(tag, case["n"], buffers, index)
    except NoUnpinnedBuffers:
        result = "NoUnpinnedBuffers"
    return {"result": result, "buffers": buffers, **pool_state(inst, be)}


def _compare(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    fast = _run_once(case)
    with _per_block():
        slow = _run_once(case)
    return fast, slow


def _case(
    bufs: list[_Buf],
    *,
    hand: int = 0,
    freelist: list[int] | None = None,
    start: int = 10,
    n: int = 16,
    order: list[int] | None = None,
) -> dict[str, Any]:
    nbuffers = len(bufs)
    return {
        "nbuffers": nbuffers,
        "bufs": bufs,
        "order": order if order is not None else list(range(nbuffers)),
        "freelist": freelist or [],
        "hand": hand,
        "start": start,
        "n": n,
    }


_CLEAN = _clean_pool(40)

# Named pools, each a case the shortcut must either take exactly or leave to the loop.
CASES: dict[str, dict[str, Any]] = {
    # The benchmark's case: the clock hand over unpinned, unused, clean valid buffers; the
    # mapping table in an order other than the slots'.
    "clock run": _case(_CLEAN, hand=5, order=list(range(39, -1, -1))),
    "clock run, some pages invalid or never used": _case(
        _with(_CLEAN, b7=_buf(None, flags=0), b9=_buf(509, flags=0), b11=_buf(None)), hand=5
    ),
    "pinned buffer in the run": _case(_with(_CLEAN, b12=_buf(512, pinned=True)), hand=5),
    "used buffer in the run": _case(_with(_CLEAN, b12=_buf(512, usage=2)), hand=5),
    "dirty buffer in the run": _case(_with(_CLEAN, b12=_buf(512, flags=BM_VALID | BM_DIRTY)), hand=5),
    "zeroed page in the run": _case(_with(_CLEAN, b12=_buf(512, flags=BM_VALID | BM_ZEROED)), hand=5),
    "failed read in the run": _case(_with(_CLEAN, b12=_buf(512, flags=BM_IO_ERROR)), hand=5),
    "block of the run held by another buffer": _case(_with(_CLEAN, b30=_buf(17)), hand=5),
    "block of the run held by one of its victims": _case(_with(_CLEAN, b8=_buf(20)), hand=5),
    "run wraps at the pool's end": _case(_CLEAN, hand=33),
    "run ends at the pool's end": _case(_CLEAN, hand=24),
    "consecutive free list": _case(
        _CLEAN, freelist=[20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36]
    ),
    "free list then clock": _case(_CLEAN, freelist=[30, 31, 32, 33, 34], hand=2),
    "free list up to the pool's end": _case(_CLEAN, freelist=[35, 36, 37, 38, 39, 3, 4], hand=9),
    "free list run stops at a block in the pool": _case(
        _with(_CLEAN, b0=_buf(15)), freelist=list(range(20, 37))
    ),
    "free list with a gap": _case(
        _CLEAN, freelist=[20, 21, 22, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37]
    ),
    "free list partly in use": _case(
        _with(_CLEAN, b23=_buf(523, usage=1)), freelist=list(range(20, 39)), hand=1
    ),
    "free list of fresh buffers": _case(
        [_buf(None, flags=0) for _ in range(24)] + _clean_pool(16, 600), freelist=list(range(24))
    ),
}


# The named cases whose runs (some of them) the shortcut takes; the others it leaves to the loop.
_TAKEN = {
    "clock run",
    "clock run, some pages invalid or never used",
    "block of the run held by another buffer",
    "block of the run held by one of its victims",
    "run wraps at the pool's end",
    "run ends at the pool's end",
    "consecutive free list",
    "free list then clock",
    "free list up to the pool's end",
    "free list of fresh buffers",
    "free list run stops at a block in the pool",
}


def _named_case_failures(patches: dict[str, Callable[..., Any]]) -> list[str]:
    """The named cases where the shortcut (with ``patches`` applied to Backend) leaves another
    state than the per-block loop, fails, or is taken where it should not be or the reverse."""
    failures = []
    for name, case in CASES.items():
        with _per_block():
            slow = _run_once(case)
        fast, spy = run_patched(partial(_run_once, case), patches, _Spy)
        if isinstance(fast, Exception):
            failures.append(f"{name}: {type(fast).__name__}")
            continue
        if fast != slow:
            failures.append(f"{name}: differs")
        if (spy.taken > 0) != (name in _TAKEN):
            failures.append(f"{name}: shortcut {'taken' if spy.taken else 'not taken'}")
    return failures


def test_the_named_cases_match_and_take_the_shortcut_where_they_should() -> None:
    """Each named pool leaves the same state with and without the shortcut, and the shortcut
    takes a run exactly where its conditions hold."""
    assert _named_case_failures({}) == []


def test_free_list_then_clock_takes_two_runs() -> None:
    """Five buffers from the free list's head, then eleven from the clock hand: both runs."""
    case = CASES["free list then clock"]
    with pytest.MonkeyPatch.context() as mp:
        spy = _Spy(mp)
        state = _run_once(case)
    assert spy.taken == 2
    assert state["result"] == (16, 16)
    assert state["buffers"][3:19] == [30, 31, 32, 33, 34, *range(2, 13)]
    assert state["freelist"] == [] and state["clock"] == (13, 0, 16)


@settings(max_examples=400, deadline=None)
@given(_pools())
def test_slot_runs_equal_the_per_block_loop(case) -> None:
    """On random pools the shortcut leaves the pool (the mapping table's order included), the
    private counts, the buffers and the result exactly as the per-block loop."""
    fast, slow = _compare(case)
    assert fast == slow


# ------------------------------------------------------------------------------ end to end


def _scan_state(setup: dict[str, Any]) -> dict[str, Any]:
    """Streamed scans through a small pool, with pins held, pages dirtied and a relation's
    buffers dropped (refilling the free list) in between."""
    # One connection, so that a pool of a few hundred buffers still allows reads of 16 blocks.
    inst = Instance(
        Settings(
            shared_buffers=setup["nbuffers"],
            io_method=setup["io_method"],
            max_connections=1,
            autovacuum_worker_slots=1,
            max_worker_processes=0,
            max_wal_senders=0,
        )
    )
    rel = inst.create_relation("t", setup["nblocks"])
    other = inst.create_relation("o", 40)
    be = inst.backend()
    held: list[int] = []
    for step in setup["steps"]:
        kind, arg = step
        try:
            if kind == "scan":
                lo = arg % setup["nblocks"]
                stream = begin_stream(
                    be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(lo, setup["nblocks"])
                )
                while (buf := stream.next_buffer()) >= 0:
                    be.release_buffer(buf)
                stream.end()
            elif kind == "hold":
                held.append(be.read_buffer(rel, arg % setup["nblocks"]))
            elif kind == "dirty":
                buf = be.read_buffer(rel, arg % setup["nblocks"])
                be.mark_buffer_dirty(buf, wal_logged=arg % 2 == 0)
                be.release_buffer(buf)
            elif kind == "other":
                for block in range(arg % 40):
                    be.release_buffer(be.read_buffer(other, block))
            elif kind == "drop":
                inst.pool.drop_relation_buffers(other)
            elif kind == "evict":
                inst.pool.evict_relation(other)
            elif kind == "release" and held:
                be.release_buffer(held.pop(arg % len(held)))
        except NoUnpinnedBuffers:
            return {"error": "NoUnpinnedBuffers", **pool_state(inst, be)}
    log = [asdict(r) for r in be.stats.read_log or []]
    return {"log": log, **pool_state(inst, be)}


_scans = st.fixed_dictionaries(
    {
        "nbuffers": st.integers(200, 900),
        "nblocks": st.integers(50, 2000),
        "io_method": st.sampled_from(["worker", "sync", "io_uring"]),
        "steps": st.lists(
            st.tuples(
                st.sampled_from(["scan", "scan", "hold", "dirty", "other", "drop", "evict", "release"]),
                st.integers(0, 400),
            ),
            max_size=12,
        ),
    }
)


@settings(max_examples=60, deadline=None)
@given(_scans)
def test_streamed_scans_equal_the_per_block_loop(setup) -> None:
    """Streamed scans (the shortcut's users) leave the pool, the private counts, the statistics,
    the reads issued and the time exactly as with the per-block loop."""
    fast = _scan_state(setup)
    with _per_block():
        slow = _scan_state(setup)
    assert fast == slow


def test_a_cold_scan_takes_runs_from_the_free_list_then_the_clock() -> None:
    """A scan of three times the pool: the first lap from the free list, then the clock, each
    read of 16 blocks one run (but the sweep's first victim after a lap of used buffers)."""
    setup = {"nbuffers": 800, "nblocks": 2400, "io_method": "worker", "steps": [("scan", 0)]}
    with pytest.MonkeyPatch.context() as mp:
        spy = _Spy(mp)
        fast = _scan_state(setup)
    with _per_block():
        slow = _scan_state(setup)
    assert fast == slow
    assert spy.taken >= 140


# ------------------------------------------------------------------------------ planted bugs


_SLOT_RUN_BUGS = [
    # (method, old, new): each a plausible slip in the shortcut.
    ("_take_slot_run", "any(pool.refcount[lo:hi])", "False"),  # takes pinned buffers
    ("_take_slot_run", "any(pool.usage[lo:hi])", "False"),  # takes used buffers
    ("_take_slot_run", "+ flags.count(0, lo, hi) != m", "!= -1"),  # takes dirty buffers
    ("_take_slot_run", "if t in mapping:", "if False:"),  # maps a block twice
    ("_take_slot_run", "del mapping[old]", "pass"),  # leaves the old block mapped
    ("_take_slot_run", "t = tag\n", "t = tag + 1\n"),  # one block off
    ("_take_slot_run", "if old >= 0:", "if old > 0 or t > tag:"),  # unmaps block -1
    ("_take_slot_run", "valid = flags.count(BM_VALID, lo, hi)", "valid = k"),  # every victim an eviction
    ("_take_slot_run", "hi = lo + k\n", "pass\n"),  # a truncated run's slices too long
    ("_take_slot_run", "pool.usage[lo:hi] = ones", "pass"),
    ("_take_slot_run", "flags[lo:hi] = bytes(k)", "pass"),
    ("_take_slot_run", "buffers[j : j + k] = slots", "buffers[j : j + k] = slots[::-1]"),
    ("_alloc_unmapped_run", "pool.complete_passes += 1", "pass"),  # the run's wrap
    ("_alloc_unmapped_run", "pool.in_freelist[lo : lo + k] = bytes(k)", "pass"),
    ("_alloc_unmapped_run", "list(islice(freelist, m)) == pool._slots[lo : lo + m]", "True"),
    # A run past the pool's end, whose slices come out short: the shortcut then refuses it.
    ("_alloc_unmapped_run", "m = min(n - (j - index), nbuffers - hand)", "m = n - (j - index)"),
    ("_alloc_unmapped_run", "m = min(n, len(freelist), nbuffers - lo)", "m = min(n, nbuffers - lo)"),
    ("_alloc_unmapped_run", "hand += k\n", "hand += k - 1\n"),
    ("_alloc_unmapped_run", "for _ in range(k):", "for _ in range(m):"),
]


@pytest.mark.parametrize(
    ("method", "old", "new"), _SLOT_RUN_BUGS, ids=[f"{m}:{o}" for m, o, _ in _SLOT_RUN_BUGS]
)
def test_the_comparison_catches_planted_bugs(method: str, old: str, new: str) -> None:
    """With the bug planted, some named case differs from the per-block loop, fails, or loses
    the shortcut."""
    mutant = _mutant(Backend, method, old, new)
    assert _named_case_failures({method: mutant}), f"planted bug {old!r} -> {new!r} went unnoticed"


def test_bufmgr_mutants_compile_against_the_module() -> None:
    """The planted-bug machinery itself: an unchanged copy behaves as the original."""
    copy = _mutant(Backend, "_take_slot_run", "return k, valid", "return k, valid")
    assert copy is not Backend._take_slot_run and copy.__globals__["BM_VALID"] is bufmgr.BM_VALID
    assert _named_case_failures({"_take_slot_run": copy}) == []


# ------------------------------------------------------------------------------ ReleaseBuffer


class _Releases(ReadPathObserver):
    def __init__(self) -> None:
        self.heard: list[int] = []

    def buffer_released(self, backend: Backend, buf: int) -> None:
        self.heard.append(buf)


def _release_run(
    ops: list[tuple[str, int]], reference: bool, observed: bool = True, paths: set[str] | None = None
) -> tuple[object, ...]:
    """Pins and releases on one backend; releases through release_buffer, or with
    ``reference`` through PrivateRefCount.unpin (Backend._unpin). Returns the private counts,
    the shared pin counts, the outcome of each step and what the observer heard; ``paths``
    collects where the released entries were."""
    inst = Instance(Settings(shared_buffers=64))
    be = inst.backend()
    pool = inst.pool
    obs = _Releases()
    if observed:
        be.add_observer(obs)
    outcomes: list[str] = []
    for kind, b in ops:
        if kind == "pin":
            be.refs.reserve()
            if be.refs.pin(b):
                pool.refcount[b] += 1
            outcomes.append("pinned")
            continue
        if kind == "incr":
            b = b if be.refs.count(b) else -1
            if b >= 0:
                be.incr_buffer_refcount(b)
            continue
        if kind == "stray":  # not pinned, or invalid: an error either way
            b = -1 if b % 2 else b + 100
        if paths is not None and b >= 0:
            last = be.refs.count(b) == 1
            paths.add(f"{'array' if b in be.refs.pos else 'hash'}, {'last pin' if last else 'pins left'}")
        try:
            if reference:
                if observed:
                    obs.buffer_released(be, b)
                if b < 0:
                    raise ModelUsageError(f"ReleaseBuffer of invalid buffer {b}")
                be._unpin(b)
            else:
                be.release_buffer(b)
            outcomes.append("released")
        except ModelUsageError as exc:
            outcomes.append(str(exc))
    # A freed array slot's count is never read (the next entry there sets it): release_buffer
    # leaves it, PrivateRefCount.unpin zeroes it.
    refs = refcount_state(be.refs)
    live = [c if b >= 0 else 0 for b, c in zip(be.refs.arr_buf, be.refs.arr_cnt)]
    return (refs[0], live, *refs[2:], list(pool.refcount), outcomes, obs.heard)


def _release_ops(rng: random.Random) -> list[tuple[str, int]]:
    """Pins of up to 30 buffers (more than the array's 8), some pinned twice, released in
    random order, with IncrBufferRefCount and stray releases now and then."""
    ops: list[tuple[str, int]] = []
    pinned: list[int] = []
    for _ in range(rng.randrange(20, 120)):
        r = rng.random()
        if r < 0.5 or not pinned:
            b = rng.randrange(30)
            ops.append(("pin", b))
            pinned.append(b)
        elif r < 0.55:
            ops.append(("incr", rng.choice(pinned)))
            pinned.append(ops[-1][1])
        elif r < 0.58:
            ops.append(("stray", rng.randrange(30)))
        else:
            ops.append(("release", pinned.pop(rng.randrange(len(pinned)))))
    return ops


_RELEASE_CASES = [_release_ops(random.Random(seed)) for seed in range(60)]


def _release_failures(release: Callable[..., Any] | None) -> list[int]:
    failures = []
    for k, ops in enumerate(_RELEASE_CASES):
        with pytest.MonkeyPatch.context() as mp:
            if release is not None:
                mp.setattr(Backend, "release_buffer", release)
            try:
                got = _release_run(ops, reference=False)
            except Exception:  # a planted bug may crash
                failures.append(k)
                continue
        if got != _release_run(ops, reference=True):
            failures.append(k)
    return failures


def test_release_buffer_equals_unpin() -> None:
    """ReleaseBuffer's inlined paths (array, hash, last pin or not) leave the private counts,
    the hash's insertion order and the shared pin counts as PrivateRefCount.unpin, raise the
    same errors, and the observer hears every release."""
    assert _release_failures(None) == []
    paths: set[str] = set()
    for ops in _RELEASE_CASES:
        _release_run(ops, False, paths=paths)
    assert paths == {"array, last pin", "array, pins left", "hash, last pin", "hash, pins left"}


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.booleans())
def test_release_buffer_equals_unpin_at_random(rng, observed) -> None:
    """As above on random sequences, with and without an observer."""
    ops = _release_ops(rng)
    assert _release_run(ops, False, observed) == _release_run(ops, True, observed)


_RELEASE_BUGS = [
    ("if hashed == 1:", "if hashed:"),  # drops a hashed entry with pins left
    ("self._ref_ovf[buf] = hashed - 1", "del self._ref_ovf[buf]; self._ref_ovf[buf] = hashed - 1"),  # order
    ("refs.reserved = i", "pass"),
    ("self._release_observer.buffer_released(self, buf)", "pass"),
    ("if c:", "if c > 1:"),
]


@pytest.mark.parametrize(("old", "new"), _RELEASE_BUGS, ids=[o for o, _ in _RELEASE_BUGS])
def test_release_comparison_catches_planted_bugs(old: str, new: str) -> None:
    """With the bug planted in release_buffer, some case differs from PrivateRefCount.unpin."""
    assert _release_failures(_mutant(Backend, "release_buffer", old, new)), f"{old!r} -> {new!r} unnoticed"
