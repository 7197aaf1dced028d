"""Each start and each wait of a stream, compared with the reference model's (issue 26).

The rest of the suite checks what a stream promises (pins, order, limits) and a few read
sequences; the systematic mutants of 18.6's ``read_stream.c`` showed what that leaves open: a
change that only moves *when* a read is started, or how many blocks it asks for, under a pin
budget that binds, after a split read forwarded a buffer, or at a reset that finds a block in
hand. Here a stream over a mixed relation (runs, jumps, cached islands) is consumed whole, and
every ``StartReadBuffers`` (during which consumer call, which block, how many blocks asked and
accepted, whether it must be waited for) and every ``WaitReadBuffers`` (during which call) must
be the model's of the same version. The cases are fixed: each is built from its seed, and each
was kept because it tells a mutant apart that the others do not.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL

from ._harness import Scenario
from ._machine import fit_scenario

pytestmark = pytest.mark.readstream_requires("stream-api")

# The blocks of the stream: runs of 1 to 17 blocks, each followed by a jump forward (often
# none, so that runs merge into reads of io_combine_limit), part of them cached.
_RUNS = (1, 1, 2, 3, 5, 8, 17)
_GAPS = (0, 0, 0, 1, 2, 7, 30)
_CACHED_SHARE = (0.0, 0.2, 0.5, 0.9)


def _runs(rng: random.Random, n: int, runs: tuple[int, ...], gaps: tuple[int, ...]) -> list[int]:
    """``n`` ascending blocks: runs of a length from ``runs``, each followed by a jump from ``gaps``."""
    blocks: list[int] = []
    b = 0
    while len(blocks) < n:
        k = rng.choice(runs)
        blocks += range(b, b + k)
        b += k + rng.choice(gaps)
    return blocks[:n]


def _case(seed: int) -> tuple[Scenario, int | None, int | None]:
    """The scenario of case ``seed``, the ``GetAdditionalPinLimit()`` it forces (or None) and
    after how many buffers it resets the stream (or None)."""
    rng = random.Random(seed)
    blocks = _runs(rng, rng.choice([20, 40, 80]), _RUNS, _GAPS)
    share = rng.choice(_CACHED_SHARE)
    cached = sorted({x for x in blocks if rng.random() < share})
    settings = {
        "io_combine_limit": rng.choice([1, 2, 4, 16]),
        "effective_io_concurrency": rng.choice([0, 1, 2, 4]),
        "io_method": "sync",
    }
    budget = rng.choice([None, None, 2, 3, 4])
    flags = rng.choice([0, READ_STREAM_FULL])
    reset_after = rng.choice([None, None, 3, 7])
    scenario = Scenario(
        settings=settings, relation_blocks=max(blocks) + 11, blocks=blocks, cached=cached, flags=flags
    )
    return scenario, budget, reset_after


def _ring_case(seed: int) -> tuple[Scenario, int | None, int | None]:
    """As :func:`_case`, through a small queue: a ``BULKREAD`` ring of 2 to 16 buffers (or none)
    sizes it, and the cached blocks come in runs of up to 20, so that the fast path is entered
    and left, and reaches the stream's end, at every slot of a queue that wraps often."""
    rng = random.Random(seed)
    blocks = _runs(rng, rng.choice([30, 60, 120]), (1, 2, 3, 5, 8, 17), (0, 0, 1, 3, 20))
    share = rng.choice([0.3, 0.6, 0.9])
    cached: set[int] = set()
    i = 0
    while i < len(blocks):
        if rng.random() < share:
            length = rng.choice([1, 2, 5, 10, 20])
            cached.update(blocks[i : i + length])
            i += length
        else:
            i += rng.choice([1, 2, 3])
    settings = {
        "io_combine_limit": rng.choice([2, 3, 4, 8]),
        "effective_io_concurrency": rng.choice([1, 2, 4]),
        "io_method": "sync",
    }
    strategy = rng.choice([None, ("bulkread", rng.choice([2, 3, 4, 6, 8, 16]))])
    flags = rng.choice([0, READ_STREAM_FULL])
    reset_after = rng.choice([None, 5, 17, 40])
    scenario = Scenario(
        settings=settings,
        relation_blocks=max(blocks) + 11,
        blocks=blocks,
        cached=sorted(cached),
        flags=flags,
        strategy=strategy,
    )
    return scenario, rng.choice([None, None, 2, 3]), reset_after


# The seeds kept, with what each one's stream does that the others' do not (the systematic
# mutants of 18.6's read_stream.c it tells apart, docs/mutation.md).
_CASES = {
    6: "icl 16, eic 2, budget 4, full, reset after 7: split reads forward a buffer while the budget binds",
    7: "icl 4, eic 2, budget 2, full, reset after 7: cold, every read the budget's size",
    18: "icl 4, eic 2, budget 4, full: half cached, the look-ahead stops at max_ios",
    22: "icl 4, eic 2, full, reset after 3: the reset finds a block the look-ahead put back",
    25: "icl 2, eic 0, budget 3, full, reset after 7: reads split at cached blocks, one I/O at a time",
    48: "icl 2, eic 1: runs and jumps, reads split at cached blocks",
    58: "icl 16, eic 4, budget 3, full: forwarded buffers and a binding budget together",
    60: "icl 16, eic 4, budget 4, reset after 3: a pending read exactly the budget's size",
    118: "icl 16, eic 2, full, reset after 7: the look-ahead stops at max_ios with a block in hand",
}
_RING_CASES = {
    2: "icl 3, eic 4, a ring of 8, budget 3, reset at the end: the fast path ends the stream in a wrapped queue",
    15: "icl 8, eic 1, a ring of 8, full, reset at the end: cached runs, the fast path at the stream's end",
    87: "icl 8, eic 4, a ring of 16, full, reset at the end: the same with more reads in flight",
}
_ALL_CASES = [(_case, seed, why) for seed, why in _CASES.items()] + [
    (_ring_case, seed, why) for seed, why in _RING_CASES.items()
]


def _starts_and_waits(
    scenario: Scenario, budget: int | None, reset_after: int | None, impl: Any
) -> tuple[list[int], list[tuple[int, int, int, int, bool]], list[int]]:
    """The blocks returned, each start as (call, first block, blocks asked, blocks accepted,
    must wait) and the call of each wait, of ``scenario``'s stream with ``impl``."""
    d = scenario.start(impl)
    try:
        if budget is not None:
            d.force_additional_pin_limit(budget)
        returned = d.consume(reset_after)
        if reset_after is not None:
            d.reset()
            tail = list(range(scenario.relation_blocks - 5, scenario.relation_blocks))
            d.add_blocks(tail)
            returned += d.consume()
        d.end()
        starts = [(s.call, s.blocknum, s.requested, s.accepted, s.need_wait) for s in d.observer.starts]
        return returned, starts, [w.call for w in d.observer.waits]
    finally:
        d.close()


@pytest.mark.readstream_invariant("reads", "SHOULD", kind="implementation")
@pytest.mark.parametrize(
    ("case", "seed", "why"),
    _ALL_CASES,
    ids=[f"{'ring-' if case is _ring_case else ''}seed-{seed}" for case, seed, _why in _ALL_CASES],
)
def test_each_start_and_wait_is_the_models(readstream_impl: Any, case: Any, seed: int, why: str) -> None:
    """Every ``StartReadBuffers`` and ``WaitReadBuffers`` of a stream over runs, jumps and cached
    islands, consumed whole (reset once in some cases), at the same consumer call, for the same
    blocks, as the reference model's of the same version. Kills these systematic mutants of
    18.6's ``read_stream.c``, which survived the rest of the suite:
    ``read_stream_start_pending_read:327:19`` (a pending read exactly the budget's size is
    refused while buffers are pinned), ``:319:2`` and ``:319:15`` (the forwarded buffers are
    left out of, or taken from, the budget), ``:395:2`` (the count of forwarded buffers is never
    kept), ``read_stream_look_ahead:510:54`` (a pending read of the distance's size starts with
    buffers pinned), ``:513:27`` (a read starts with every I/O slot taken) and
    ``read_stream_reset:1084:2`` (the block put back by the look-ahead outlives a reset and is
    returned after it, in place of the callback's next block); the miscounts of forwarded
    buffers ``read_stream_start_pending_read:392:17`` and ``:393:45``; and, through the small
    queues of the ring cases, ``read_stream_next_buffer:877:4:SDL`` (the fast path reaches the
    stream's end without clearing its queue entry, which a reset then releases again)."""
    from pytest_readstream.reference import ReferenceImplementation

    scenario, budget, reset_after = case(seed)
    scenario = fit_scenario(scenario, readstream_impl)
    got = _starts_and_waits(scenario, budget, reset_after, readstream_impl)
    want = _starts_and_waits(scenario, budget, reset_after, ReferenceImplementation())
    assert got[0] == want[0], "the blocks returned differ from the model's"
    assert got[1] == want[1], (
        f"(call, first block, asked, accepted, must wait) of each start differ from the model's "
        f"({why}): first difference at start "
        f"{next(i for i, (g, w) in enumerate(zip([*got[1], None], [*want[1], None])) if g != w)}"
    )
    assert got[2] == want[2], "the consumer call of each wait differs from the model's"


@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
@pytest.mark.parametrize("consumed", [1, 2, 3])
def test_a_reset_forgets_the_block_the_look_ahead_put_back(readstream_impl: Any, consumed: int) -> None:
    """With one I/O slot (``effective_io_concurrency = 1``) and scattered cold blocks, the
    look-ahead takes a block from the callback, finds the slot taken and puts the block back
    (``read_stream_unget_block``). A reset then forgets it (``read_stream_reset``: "Forget
    buffered block number"): after the reset the stream returns the blocks the callback hands
    out from then on, and only those. Kills ``read_stream_reset:1084:2:SDL`` (the put-back
    block is returned after the reset, although the callback produced it before)."""
    scenario = fit_scenario(
        Scenario(
            settings={"effective_io_concurrency": 1, "io_method": "sync"},
            relation_blocks=200,
            blocks=list(range(0, 80, 10)),
        ),
        readstream_impl,
    )
    d = scenario.start(readstream_impl)
    try:
        assert d.consume(consumed) == list(range(0, 10 * consumed, 10))
        d.reset()
        d.add_blocks([150, 151, 160])
        # The driver checks each block against the callback's order since the reset; what the
        # callback handed out before it (read, in flight or put back) is dropped.
        after = d.consume()
        assert after[-3:] == [150, 151, 160] and set(after[:-3]) <= set(range(10 * consumed, 80, 10)), after
        d.end()
    finally:
        d.close()
