"""Adaptivity: the all-cached fast path, and pause/resume (PostgreSQL 19 and later).

``read_stream.md`` §5: a stream over cached blocks settles into a fast path holding one pin;
the first miss there must be read and waited for before its buffer is returned, and the stream
leaves the fast path, so hits and misses can alternate for ever without a buffer ever being
handed out unread. §11.1: a callback can pause the stream (``read_stream_pause``) when it has
temporarily no more blocks; the stream returns what it had, reports the end, and after
``read_stream_resume`` carries on in order, within its pin cap.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import Scenario

pytestmark = pytest.mark.readstream_requires("stream-api")

_METHODS = ["sync", "worker", "io_uring"]


@pytest.mark.readstream_invariant("adaptivity", "SHOULD")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
def test_all_cached_stream_holds_one_pin_and_reads_nothing(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """§8.2: over cached blocks the stream reads nothing and holds a single pin (the fast path)."""
    rel = relation(80)
    readstream_instance.prewarm(rel)
    d = drive(rel, list(range(80)))
    assert d.consume() == list(range(80))
    assert d.reads == []
    assert d.max_stream_pins <= 1
    d.end()


@pytest.mark.readstream_invariant("adaptivity", "MUST")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize(
    "misses",
    [
        pytest.param([12], id="one-miss"),
        pytest.param([10, 11, 12], id="miss-run"),
        pytest.param([5, 15, 25, 35, 45], id="isolated-misses"),
        pytest.param(list(range(20, 60, 2)), id="alternating"),
    ],
)
def test_fast_path_is_left_after_a_miss(
    drive: Any, relation: Any, readstream_instance: Any, misses: list[int]
) -> None:
    """Misses among cached blocks are read, waited for and returned valid, in order, each read
    once; the stream goes back to one pin when the hits resume (§5)."""
    rel = relation(64)
    readstream_instance.prewarm(rel, [b for b in range(64) if b not in misses])
    d = drive(rel, list(range(64)))
    assert d.consume() == list(range(64))
    read = sorted(b for r in d.reads for b in range(r.start, r.start + r.nblocks))
    assert read == sorted(misses)
    d.end()


@pytest.mark.readstream_invariant("adaptivity", "MUST")
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cold=st.sets(st.integers(0, 199), max_size=60),
    method=st.sampled_from(_METHODS),
    eic=st.integers(0, 4),
)
def test_hits_and_misses_in_any_mix(readstream_impl: Any, cold: set[int], method: str, eic: int) -> None:
    """Whatever mix of cached and cold blocks, every buffer comes back valid and in order, and
    every cold block is read exactly once (§5, §6.3, §9.11)."""
    d = Scenario(
        settings={"io_method": method, "effective_io_concurrency": eic},
        relation_blocks=200,
        blocks=list(range(200)),
        cached=[b for b in range(200) if b not in cold],
    ).start(readstream_impl)
    assert d.consume() == list(range(200))
    read = sorted(b for r in d.reads for b in range(r.start, r.start + r.nblocks))
    assert read == sorted(cold)
    d.end()


@pytest.mark.readstream_invariant("adaptivity", "MUST")
@pytest.mark.readstream_requires("pause-resume")
@pytest.mark.parametrize("pause_at", [[0], [1], [5, 6], [17, 40, 90]])
@pytest.mark.parametrize(
    "readstream_settings",
    [{"version": v, "io_method": m} for v in ("19", "20devel") for m in _METHODS],
    indirect=True,
)
def test_pause_and_resume_keep_the_order(
    drive: Any, relation: Any, readstream_instance: Any, pause_at: list[int]
) -> None:
    """The stream returns what it had before a pause, reports the end, and after ``resume()``
    continues with the callback's next blocks, in order and within its pin cap (§11.1)."""
    rel = relation(120)
    readstream_instance.prewarm(rel, range(60, 80))
    d = drive(rel, list(range(120)), pause_at=pause_at)
    got: list[int] = []
    for _ in range(len(pause_at) + 1):
        got += d.consume()
        if d.source.paused:
            d.resume()
    assert got == list(range(120))
    d.end()


@pytest.mark.readstream_invariant("adaptivity", "SHOULD")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"version": v, "io_method": "sync", "effective_io_concurrency": 1}, id=v)
        for v in ("19", "20devel")
    ],
    indirect=True,
)
def test_a_read_holds_the_distances_off_decaying_through_the_next_hits(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """From 19 on, a read holds the distances off decaying for the stream's pin budget of hits
    (``read_stream_next_buffer`` sets ``distance_decay_holdoff = max_pinned_buffers``;
    ``read_stream_start_pending_read`` decrements it, not the distances, on a hit with no I/O in
    progress): after 40 cold blocks have ramped the stream up, 12 cached ones leave it reading
    ``io_combine_limit`` blocks at a time when the misses come back.

    Kills the C mutant ``decay-without-holdoff``: without the hold-off the 12 hits shrink both
    distances and the first read after them is 4 blocks, then 8. ``sync`` makes every read a
    wait (``WaitReadBuffers`` performs it), so the ramp does not depend on timing.
    """
    rel = relation(92)
    readstream_instance.prewarm(rel, range(40, 52))
    d = drive(rel, list(range(92)))
    assert d.consume() == list(range(92))
    after = [r for r in d.reads if r.start >= 52]
    assert after, "the cold blocks after the cached run were not read"
    limit = d.settings.io_combine_limit
    assert (after[0].start, after[0].nblocks) == (52, limit), (
        f"after 12 hits the first read was {after[0].nblocks} block(s) from {after[0].start}, "
        f"not io_combine_limit = {limit}: the distances decayed although a read had just been waited for"
    )
    d.end()
