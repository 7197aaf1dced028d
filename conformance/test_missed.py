"""The classes of bugs the suite once missed (issue 26), one deterministic test or more each.

Measured against real bugs of ``read_stream.c`` and bugs its authors did not write, the suite
missed whole classes: settings changed while a stream is open, extreme pin budgets, the edge
sequences ``read_stream.c``'s own comments describe, the flags of each start, how far ahead the
callback is asked, whether the fast path is taken, entry points never called, and streams in
another order than ascending. Each test below names, in its docstring, the planted bug it kills:
a C mutant of ``read_stream.c`` (``readstream mutants --impl postgres``) and its Python twin in
the model (``--readstream-impl=mutant:NAME``), both of the same name. Classes 9 to 11 are about
the suite itself (the kind of each invariant, luck, reliability): ``docs/conformance.md``.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL, READ_STREAM_SEQUENTIAL
from reference_impl.buffers.bufmgr import READ_BUFFERS_ISSUE_ADVICE
from reference_impl.errors import OtherSessionTempRelation

from . import _oracle
from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import Scenario
from ._machine import fit_scenario

pytestmark = pytest.mark.readstream_requires("stream-api")


# ------------------------------------------------------------------------------ class 1: settings
@pytest.mark.readstream_invariant("reads", "SHOULD", kind="implementation")
@pytest.mark.parametrize(
    "readstream_settings",
    [{"io_combine_limit": 16, "io_method": m} for m in ("sync", "worker")],
    indirect=True,
)
def test_a_stream_keeps_the_io_combine_limit_it_began_with(drive: Any, relation: Any) -> None:
    """Class 1. ``read_stream_begin_impl`` captures ``io_combine_limit`` "for the lifetime of this
    stream, so we don't have to worry about the GUCs changing underneath us": a cold
    ``READ_STREAM_FULL`` stream begun at 16, reset (a rescan) after ``SET io_combine_limit = 2``
    in its session, reads its second pass 16 blocks at a time, every block once and in order.
    (The rescan starts with no pending read: a stream that followed the GUC mid-read could grow
    a read past its queue.) Kills ``io-combine-limit-read-live`` (18: the look-ahead combines up
    to the GUC) and ``combine-limit-read-live`` (19+: the combine distance grows to the GUC)."""
    rel = relation(320)
    d = drive(rel, list(range(40)), flags=READ_STREAM_FULL)
    assert d.consume() == list(range(40))
    d.reset()
    d.change_setting("io_combine_limit", 2)
    before = len(d.reads)
    d.add_blocks(list(range(40, 320)))
    assert d.consume() == list(range(40, 320))
    after = [r.nblocks for r in d.reads[before:]]
    assert max(after) == 16, f"after SET io_combine_limit = 2 the reads were {after[:12]}..."
    d.end()


# ------------------------------------------------------------------------------ class 2: extreme limits
@pytest.mark.readstream_invariant("pins", "SHOULD", kind="implementation")
@pytest.mark.parametrize("budget", [32767, 65536 + 3, 1 << 20], ids=lambda b: f"budget-{b}")
def test_a_pin_budget_beyond_int16_is_capped_not_wrapped(drive: Any, relation: Any, budget: int) -> None:
    """Class 2. A backend allowed tens of thousands of pins (a pool of tens of millions of
    buffers, which no test can start) gives ``read_stream_start_pending_read`` a budget it caps
    at ``PG_INT16_MAX``: a cold ``READ_STREAM_FULL`` stream still reads ``io_combine_limit``
    blocks at a time. ``GetAdditionalPinLimit()``'s answer is chosen (the traced copy's wrapper
    on a server). Kills ``pin-limit-int16-truncated`` (the budget cast to int16: 65536 + 3
    allows 3 pins)."""
    rel = relation(200)
    d = drive(rel, list(range(200)), flags=READ_STREAM_FULL)
    d.force_additional_pin_limit(budget)
    assert d.consume() == list(range(200))
    icl = _oracle.effective_io_combine_limit(d.settings)
    sizes = [r.nblocks for r in d.reads]
    assert sizes.count(icl) >= len(sizes) - 1, f"reads of {sizes[:16]} blocks with a budget of {budget} pins"
    d.end()


# ------------------------------------------------------------------------------ class 3: edge sequences
# read_stream.c's own special cases, each built deterministically (each version's comments).
_EDGES = {
    # read_stream_start_pending_read: "Copy overflowing buffers to the front of the array ... but
    # also leave a copy in the overflow zone". A BULKREAD ring of 2 buffers makes a queue of 3;
    # the split read [2] at the queue's last slot forwards cached block 3 into the overflow zone.
    "split-read-forwards-into-overflow": Scenario(
        settings={"io_combine_limit": 4, "io_method": "sync"},
        relation_blocks=64,
        blocks=list(range(24)),
        cached=[3, 5, 7, 9, 11],
        flags=READ_STREAM_FULL,
        strategy=("bulkread", 16),
    ),
    # The same with the fast path between cached runs, and a cold multi-block read across the
    # queue's end afterwards.
    "overflow-then-fast-path-then-wrap": Scenario(
        settings={"io_combine_limit": 4, "io_method": "sync"},
        relation_blocks=96,
        blocks=list(range(64)),
        cached=[3, 5, *range(8, 30), 33, *range(40, 52)],
        flags=READ_STREAM_FULL,
        strategy=("bulkread", 24),
    ),
    # io_combine_limit = 1: no overflow zone at all (queue_overflow = 0), cold and cached runs.
    "icl-1-cold-and-cached-runs": Scenario(
        settings={"io_combine_limit": 1, "effective_io_concurrency": 2},
        relation_blocks=64,
        blocks=[*range(0, 20), *range(40, 50), *range(20, 30), 5, 6, 7],
        cached=[*range(5, 12), *range(40, 45)],
    ),
}


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize("edge", list(_EDGES))
def test_read_stream_c_special_cases(readstream_impl: Any, edge: str) -> None:
    """Class 3. The special cases ``read_stream.c``'s comments describe, as deterministic
    sequences the random machine does not reach: a read split at a cached block whose forwarded
    buffer lands in the overflow zone past the queue's end; the fast path entered after such a
    wrap and a cold multi-block read across the queue's end afterwards; ``io_combine_limit = 1``
    (no overflow zone) over cold and cached runs. Every block once, in order, within the pin
    limit, and no pin left (the driver checks after every call). Kills
    ``forwarded-overflow-not-copied`` (the forwarded buffer is not copied to the front: its
    block is pinned again and the forwarded pin leaks)."""
    # In the server's own version where the implementation is a server (fit_scenario).
    scenario = fit_scenario(_EDGES[edge], readstream_impl)
    d = scenario.start(readstream_impl)
    try:
        assert d.consume() == scenario.blocks
    finally:
        d.close()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize("then", ["cached-rescan", "cold-rescan"])
def test_a_stream_that_ends_in_the_fast_path_serves_a_rescan(readstream_impl: Any, then: str) -> None:
    """Class 3. An all-cached stream reaches its end inside the fast path, which clears its one
    queue entry and moves the oldest buffer index there (``read_stream_next_buffer``'s "No more
    blocks, end of stream"); after ``read_stream_reset`` the same stream serves a second pass,
    cached again or cold. Every block once, in order, no pin left. Kills
    ``read_stream_next_buffer:875:4:SDL`` (the queue's oldest index left behind: the second
    pass returns a stale queue entry). Clearing the entry itself (``:877:4:SDL``) survives it:
    the reset's drain never looks at that slot again."""
    second = list(range(20)) if then == "cached-rescan" else list(range(40, 60))
    scenario = fit_scenario(
        Scenario(
            settings={"io_method": "sync"}, relation_blocks=64, blocks=list(range(20)), cached=list(range(20))
        ),
        readstream_impl,
    )
    d = scenario.start(readstream_impl)
    try:
        assert d.consume() == list(range(20))
        d.reset()
        d.add_blocks(second)
        assert d.consume() == second
        d.end()
    finally:
        d.close()


# ------------------------------------------------------------------------------ class 4: flags
_ADVICE_BLOCKS = [0, 1, 2, 30, 31, 32, 33, 9, 60, 61, 90, 91, 92, 93, 94, 95, 40, 41, 120, 7]


def _advice_of_each_start(scenario: Scenario, impl: Any) -> list[tuple[int, int, bool]]:
    """(first block, blocks accepted, advice flag) of each ``StartReadBuffers`` of ``scenario``'s
    stream, consumed whole, with ``impl``; skips where the observation reports no flags."""
    d = scenario.start(impl)
    try:
        assert d.consume() == scenario.blocks
        seen = d.observer.starts
        if any(s.flags is None for s in seen):
            pytest.skip("this implementation's observation does not report the flags of each start")
        return [(s.blocknum, s.accepted, bool((s.flags or 0) & READ_BUFFERS_ISSUE_ADVICE)) for s in seen]
    finally:
        d.close()


@pytest.mark.readstream_invariant("reads", "SHOULD", kind="implementation")
@pytest.mark.parametrize(
    "flags", [0, READ_STREAM_SEQUENTIAL, READ_STREAM_FULL], ids=["default", "sequential", "full"]
)
@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_read_ahead_advice_of_each_start_is_the_models(
    readstream_impl: Any, flags: int, io_method: str
) -> None:
    """Class 4. Under ``io_method=sync`` a stream simulates asynchronous I/O with
    ``posix_fadvise``: each ``StartReadBuffers`` after a jump carries ``READ_BUFFERS_ISSUE_ADVICE``
    (unless the caller promised sequential access), sequential continuations carry it until the
    reads catch up; under ``worker`` none does. The advice of every start of a cold scattered
    stream is compared with the reference model's for the same blocks. Kills ``advice-never``."""
    from pytest_readstream.reference import ReferenceImplementation

    scenario = fit_scenario(
        Scenario(
            settings={"io_method": io_method, "effective_io_concurrency": 4},
            relation_blocks=128,
            blocks=_ADVICE_BLOCKS,
            flags=flags,
        ),
        readstream_impl,
    )

    got = _advice_of_each_start(scenario, readstream_impl)
    want = _advice_of_each_start(scenario, ReferenceImplementation())
    assert got == want, "(first block, blocks, advice) of each start differ from the model's"
    if io_method == "sync" and flags == 0:
        assert any(advice for _b, _n, advice in got), "no start carried read-ahead advice"


# Starts of streams over cached runs and jumps: the fast path's own start (it carries the advice
# flag on every block it pins), a sequential continuation after a jump, a jump with one buffer
# pinned. The scattered cold blocks above reach none of them.
_ADVICE_SHAPES = {
    "fast-path-then-miss": ([*range(48)], [*range(30)], 16),
    "jumps-then-a-run": ([0, 40, 80, 81, 82, 83, 120, *range(5, 13), 100], [], 2),
    "cached-islands": ([*range(96)], [*range(10, 20), *range(40, 60)], 4),
}


@pytest.mark.readstream_invariant("reads", "SHOULD", kind="implementation")
@pytest.mark.parametrize("eic", [4, 1, 0], ids=["eic4", "eic1", "eic0"])
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL], ids=["default", "full"])
@pytest.mark.parametrize("shape", list(_ADVICE_SHAPES))
def test_read_ahead_advice_over_cached_runs_and_jumps_is_the_models(
    readstream_impl: Any, shape: str, flags: int, eic: int
) -> None:
    """Class 4, the branches of the advice the test above does not reach (found by the
    systematic mutants of 18.6's ``read_stream.c``, which survived it): the fast path sets
    ``READ_BUFFERS_ISSUE_ADVICE`` on each block it pins when advice is enabled, and a fast-path
    miss moves ``seq_blocknum`` past its block (``read_stream_next_buffer``); a start that
    continues a region begun by a jump carries the advice until the reads catch up, and a jump
    carries it when a buffer is already pinned (``read_stream_start_pending_read``). Under
    ``io_method=sync``, compared start by start with the reference model. Kills
    ``read_stream_next_buffer:841:5:SDL`` (no advice in the fast path),
    ``read_stream_next_buffer:869:4:SDL`` (``seq_blocknum`` not moved after a fast-path miss)
    and ``read_stream_start_pending_read:289:5:SDL`` (no advice on a continuation); under
    ``effective_io_concurrency`` 1 and 0 (advice is enabled only when ``max_ios > 0``, before 0
    is bumped to 1), ``read_stream_begin_impl:681:11`` and ``:681:13``."""
    from pytest_readstream.reference import ReferenceImplementation

    blocks, cached, icl = _ADVICE_SHAPES[shape]
    scenario = fit_scenario(
        Scenario(
            settings={"io_method": "sync", "effective_io_concurrency": eic, "io_combine_limit": icl},
            relation_blocks=128,
            blocks=blocks,
            cached=cached,
            flags=flags,
        ),
        readstream_impl,
    )

    want = _advice_of_each_start(scenario, ReferenceImplementation())
    assert any(advice for _b, _n, advice in want) == (eic > 0)
    assert _advice_of_each_start(scenario, readstream_impl) == want, (
        "(first block, blocks, advice) of each start differ from the model's"
    )


# ------------------------------------------------------------------------------ class 5: look-ahead
@pytest.mark.readstream_invariant("adaptivity", "SHOULD", kind="implementation")
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL], ids=["default", "full"])
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_a_cached_stream_asks_the_callback_one_block_ahead(
    drive: Any, relation: Any, readstream_instance: Any, flags: int
) -> None:
    """Class 5. Over cached blocks every start is a hit and decays the distance to 1: once it
    has, the stream has taken from the callback at most the block it returns next and one more,
    in the fast path and again after a reset (the driver also checks after every call of every
    test that the blocks taken and not returned never exceed the pin limit plus the one block a
    stream may push back). A ``READ_STREAM_FULL`` stream starts at ``io_combine_limit`` and gets
    there within a few dozen buffers. Kills ``hit-distance-not-decayed`` (hits do not decay the
    distance: the full stream keeps 16 callback blocks ahead over cached data)."""
    rel = relation(160)
    readstream_instance.prewarm(rel)
    d = drive(rel, list(range(100)), flags=flags)
    assert d.consume(40) == list(range(40))
    worst = 0
    for _ in range(40):
        d.next()
        worst = max(worst, len(d.source.queue))
    d.reset()
    d.add_blocks(list(range(100, 160)))
    for _ in range(40):
        d.next()
        worst = max(worst, len(d.source.queue))
    assert worst <= 2, f"the stream held {worst} blocks taken from the callback and not yet returned"
    d.end()


# ------------------------------------------------------------------------------ class 6: fast path
@pytest.mark.readstream_invariant("adaptivity", "SHOULD", kind="implementation")
@pytest.mark.readstream_requires("introspection")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_an_all_cached_stream_takes_the_fast_path(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """Class 6. §5: an all-cached stream without per-buffer data settles into the fast path
    (``stream->fast_path``, one buffer slot and ``StartReadBuffer``) after its first buffer, and
    stays there while the blocks are hits. Kills ``fast-path-never``."""
    rel = relation(40)
    readstream_instance.prewarm(rel)
    d = drive(rel, list(range(40)))
    states = []
    for _ in range(20):
        d.next()
        fast = getattr(d.stream, "fast_path", None)
        if fast is None:
            pytest.skip("the stream does not report whether it is in the fast path")
        states.append(bool(fast))
    assert all(states[2:]), f"fast path after each call: {states}"
    d.end()


# ------------------------------------------------------------------------------ class 7: entry points
@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
def test_another_sessions_temporary_table_is_never_read(drive: Any, readstream_instance: Any) -> None:
    """Class 7. A stream on another session's temporary table raises "cannot access temporary
    tables of other sessions" before it hands out a buffer: at its begin
    (``read_stream_begin_impl``) or at its first read (``StartReadBuffersImpl`` checks
    ``RELATION_IS_OTHER_TEMP`` too): the pages' current contents live in the other session's
    local buffers."""
    other = readstream_instance.backend("other-session")
    rel = readstream_instance.create_relation("other_temp", 16, temp_of=other)
    with pytest.raises(OtherSessionTempRelation):
        d = drive(rel, list(range(16)))
        d.next()


@pytest.mark.readstream_invariant("lifecycle", "SHOULD", kind="implementation")
def test_a_stream_on_another_sessions_temporary_table_is_refused(
    drive: Any, readstream_instance: Any
) -> None:
    """Class 7. ``read_stream_begin_relation`` itself refuses another session's temporary table
    (PostgreSQL 18, 19 and master check ``RELATION_IS_OTHER_TEMP`` in ``read_stream_begin_impl``,
    before any read). Kills ``other-temp-accepted`` (the begin's check removed: the error then
    comes only from the first ``StartReadBuffers``)."""
    other = readstream_instance.backend("other-session")
    rel = readstream_instance.create_relation("other_temp", 16, temp_of=other)
    with pytest.raises(OtherSessionTempRelation):
        drive(rel, list(range(16)))


# ------------------------------------------------------------------------------ class 8: order
_DESCENDING = {
    "descending": list(range(63, -1, -1)),
    "descending-runs": [*range(40, 30, -1), *range(10, 20), *range(29, 19, -1), 5, 4, 3, 50, 49],
}


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
@pytest.mark.parametrize("pattern", list(_DESCENDING))
@pytest.mark.parametrize("cached", ["cold", "every-third"])
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_descending_blocks_come_back_in_order(
    drive: Any, relation: Any, readstream_instance: Any, pattern: str, cached: str
) -> None:
    """Class 8. Blocks in descending order (a backward scan) come back each once in the
    callback's order, every read covering only blocks the callback produced; whatever a stream
    combines, the consumer sees the order it asked for. Kills ``descending-merged`` (a block
    just below the pending read merged into it without moving its start: the read covers the
    block after it)."""
    rel = relation(64)
    blocks = _DESCENDING[pattern]
    if cached == "every-third":
        readstream_instance.prewarm(rel, list(range(0, 64, 3)))
    d = drive(rel, blocks)
    assert d.consume() == blocks
    d.end()
