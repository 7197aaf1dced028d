"""Strategy: ``read_stream_set_strategy`` and the strategy swap on rescan (the sample-scan thread).

The thread adds ``read_stream_set_strategy(stream, strategy)`` for an idle stream and fixes
``heap_rescan``, which reused a stream created with the old strategy. Reviewed semantics (v3):

* the pin cap follows the new strategy within the queue's capacity and is **never below 1**
  ("stream->max_pinned_buffers might be 0 after this, it should be at least 1 to proceed");
* the current look-ahead distances, and those saved for resuming a paused stream, are clamped to
  the new cap;
* the capacity statistic is left alone ("we are still in the same scan");
* after a rescan that adds a strategy, reads use it (no stale strategy); after a rescan that
  removes one, the freed strategy is never touched again (no dangling pointer). Which buffers a
  pass uses is visible in the pool: a ring recycles its few buffers, no ring fills the pool.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import make_strategy

pytestmark = pytest.mark.readstream_requires("stream-api", "set-strategy")


@pytest.mark.readstream_invariant("strategy", "MUST", kind="contract")
@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(("vacuum", 8), id="vacuum-ring-1-pin-limit-0"),
        pytest.param(("bulkwrite", 8), id="bulkwrite-ring-1-pin-limit-0"),
        pytest.param(("vacuum", 16), id="vacuum-ring-2-pin-limit-1"),
        pytest.param(("bulkread", 8), id="bulkread-ring-1-pin-limit-1"),
        pytest.param(("vacuum", 40), id="vacuum-ring-5-pin-limit-2"),
    ],
)
@pytest.mark.parametrize("when", ["at-start", "after-reset", "after-end-of-stream"])
@pytest.mark.parametrize("readstream_settings", [{}, {"io_method": "sync"}], indirect=True)
def test_pin_limit_stays_at_least_one_after_set_strategy(
    drive: Any, relation: Any, spec: tuple[str, int], when: str
) -> None:
    """A strategy whose pin limit is 0 or 1 still leaves the stream able to pin one buffer: every
    block comes back, never more than the new cap pinned."""
    rel = relation(200)
    d = drive(rel, list(range(60)))
    if when == "after-reset":
        d.consume(5)
        d.reset()
    elif when == "after-end-of-stream":
        d.consume()
        d.add_blocks(list(range(60, 120)))
        d.reset()
    d.set_strategy_spec(spec)
    mark = len(d.source.produced)
    got = d.consume()
    assert got, "the stream delivered nothing after set_strategy()"
    assert got == [b for b, _ in d.source.produced[mark:]]
    assert d.max_stream_pins <= max(d.initial_limit, 1)
    d.end()


@pytest.mark.readstream_invariant("strategy", "MUST", kind="contract")
@pytest.mark.parametrize("spec", [("bulkread", 32), ("vacuum", 64), ("bulkread", 8)])
@pytest.mark.parametrize("readstream_settings", [{}, {"io_method": "sync"}], indirect=True)
def test_set_strategy_clamps_the_current_distance(drive: Any, relation: Any, spec: tuple[str, int]) -> None:
    """A ``READ_STREAM_FULL`` stream starts far ahead; switched to a small ring before its first
    buffer, it never pins more than the ring allows (v3: the current distance is clamped)."""
    rel = relation(200)
    d = drive(rel, list(range(128)), flags=READ_STREAM_FULL)
    d.set_strategy_spec(spec)
    assert d.consume() == list(range(128))
    assert d.max_stream_pins <= d.limit
    d.end()


@pytest.mark.readstream_invariant("strategy", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{"version": "19"}, {"version": "20devel"}], indirect=True)
@pytest.mark.readstream_requires("pause-resume")
@pytest.mark.parametrize("spec", [("bulkread", 32), ("vacuum", 64)])
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL])
def test_set_strategy_clamps_the_distance_saved_by_pause(
    drive: Any, relation: Any, spec: tuple[str, int], flags: int
) -> None:
    """A stream paused far ahead, drained, switched to a small ring and resumed, stays within the
    ring's cap (v3: the distances saved for resuming are clamped too)."""
    rel = relation(400)
    d = drive(rel, list(range(400)), pause_at=[200], flags=flags)
    assert d.consume() == list(range(200))
    assert d.source.paused
    d.set_strategy_spec(spec)
    d.resume()
    assert d.consume() == list(range(200, 400))
    d.end()


def _capacity(stream: Any) -> int | None:
    io_stats = getattr(stream, "io_stats", None)
    if io_stats is not None:
        return int(io_stats.distance_capacity)
    stats = getattr(stream, "stats", None)
    cap = getattr(stats, "capacity", None)
    return None if cap is None else int(cap)


@pytest.mark.readstream_invariant("strategy", "SHOULD")
@pytest.mark.readstream_requires("introspection")
@pytest.mark.parametrize(
    "readstream_settings", [{"version": "18"}, {"version": "19"}, {"version": "20devel"}], indirect=True
)
def test_capacity_statistic_unchanged_by_set_strategy(drive: Any, relation: Any) -> None:
    """The stream's capacity statistic (``distance_capacity`` in master's
    ``read_stream_enable_stats``) stays the value of its first ``max_pinned_buffers`` when a
    strategy changes it within the scan (sample-scan thread review of v1)."""
    rel = relation(300)
    d = drive(rel, list(range(100)))
    enable = getattr(d.stream, "enable_stats", None)
    if callable(enable):
        enable()
    first = _capacity(d.stream)
    if first is None:
        pytest.skip("the stream exposes no capacity statistic (stats.capacity or enable_stats())")
    assert first == d.initial_limit
    d.consume(20)
    d.reset()
    d.set_strategy_spec(("bulkread", 32))
    assert d.limit < d.initial_limit
    d.consume()
    assert _capacity(d.stream) == first
    d.end()


@pytest.mark.readstream_invariant("strategy", "MUST", kind="implementation")
@pytest.mark.parametrize(
    "readstream_settings", [{}, {"io_method": "sync"}, {"effective_io_concurrency": 1}], indirect=True
)
def test_rescan_that_adds_a_strategy_uses_its_ring(
    drive: Any, relation: Any, readstream_instance: Any, readstream_backend: Any
) -> None:
    """A stream begun without a strategy, reset and given a BULKREAD ring for its second pass
    reads that pass through the ring: counted in context ``bulkread``, and only about a ring's
    worth of the relation stays in the pool (the heap-rescan bug: "keep using no strategy after
    one is allocated")."""
    rel = relation(1500)
    d = drive(rel, list(range(200)))
    d.consume()
    d.reset()
    readstream_instance.evict(rel)
    ring = d.set_strategy_spec(("bulkread", None))
    assert ring is not None
    d.add_blocks(list(range(200, 1500)))
    assert d.consume() == list(range(200, 1500))
    contexts = {r.context for r in d.reads if r.start >= 200}
    assert contexts == {"bulkread"}, contexts
    resident = readstream_instance.pool.resident_blocks(rel)
    assert len(resident) <= ring.nbuffers + 8, f"{len(resident)} pages of the second pass stayed in the pool"
    d.end()
    assert readstream_backend.stats.io["bulkread"].reuses > 0


@pytest.mark.readstream_invariant("strategy", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{}, {"io_method": "sync"}], indirect=True)
def test_rescan_that_removes_a_strategy_never_touches_the_freed_one(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """A stream begun with a BULKREAD ring, reset, whose ring is freed and replaced by no
    strategy, reads its second pass without the ring (context ``normal``) and never asks the freed
    ring for a buffer (the heap-rescan bug: "retain a dangling pointer after one is freed")."""
    rel = relation(1500)
    ring = make_strategy(readstream_instance, ("bulkread", None))
    d = drive(rel, list(range(300)), strategy=ring)
    d.consume()
    d.reset()
    assert ring is not None
    ring.free()
    d.set_strategy(None, code="d.set_strategy(None)")
    d.add_blocks(list(range(300, 1500)))
    assert d.consume() == list(range(300, 1500))
    assert {r.context for r in d.reads if r.start >= 300} == {"normal"}
    assert len(readstream_instance.pool.resident_blocks(rel)) >= 1200
    assert ring.uses_after_free == 0, f"the freed ring was asked for {ring.uses_after_free} buffers"
    d.end()
