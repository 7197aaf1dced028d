"""Order: buffers come back exactly in the callback's order, each once, with their own data.

``read_stream.md`` §9.6–§9.8: the consumer receives the blocks the callback produced, in order,
each once (a reset may discard the rest); the per-buffer data returned with a buffer is what the
callback stored for that block, however often the circular queue has wrapped; the end of the
stream is reported only after the callback reported its end and every produced block came back.
"""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from pytest_readstream import strategies as rs
from reference_impl import INVALID_BUFFER, READ_STREAM_FULL

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import Scenario

pytestmark = pytest.mark.readstream_requires("stream-api")

_SMALL_QUEUES = st.fixed_dictionaries(
    {
        "io_combine_limit": st.sampled_from((1, 2, 4, 16)),
        "effective_io_concurrency": st.integers(0, 4),
        "io_method": st.sampled_from(("sync", "worker", "io_uring")),
    }
)


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
@hypothesis.settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blocks=rs.block_sequences(300, max_len=150),
    settings=_SMALL_QUEUES,
    cached=st.lists(st.integers(0, 299), max_size=80, unique=True),
    full=st.booleans(),
)
def test_buffers_come_back_in_callback_order_each_once(
    readstream_impl: Any, blocks: list[int], settings: dict[str, Any], cached: list[int], full: bool
) -> None:
    """Every produced block is returned once, in the callback's order, then the end (§9.6)."""
    d = Scenario(
        settings=settings,
        relation_blocks=300,
        blocks=blocks,
        cached=cached,
        flags=READ_STREAM_FULL if full else 0,
    ).start(readstream_impl)
    assert d.consume() == blocks
    assert d.next() == INVALID_BUFFER, "end of stream must be reported again when asked again"
    d.end()


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
@pytest.mark.readstream_requires("per-buffer-data")
@pytest.mark.parametrize("pattern", ["cold", "cached", "alternate", "repeated"])
@pytest.mark.parametrize(
    "readstream_settings",
    [
        {"effective_io_concurrency": 1, "io_combine_limit": 2},
        {"effective_io_concurrency": 0, "io_combine_limit": 3},
        {"effective_io_concurrency": 4, "io_combine_limit": 4, "io_method": "sync"},
    ],
    indirect=True,
)
def test_per_buffer_data_survives_queue_wraparound(
    drive: Any, relation: Any, readstream_instance: Any, pattern: str
) -> None:
    """Per-buffer data comes back with its own buffer after many laps of the queue (§9.7)."""
    rel = relation(400)
    blocks = list(range(400))
    if pattern == "cached":
        readstream_instance.prewarm(rel)
    elif pattern == "alternate":
        readstream_instance.prewarm(rel, range(1, 400, 2))
    elif pattern == "repeated":
        blocks = [b // 3 for b in range(400)]
    d = drive(rel, blocks, per_buffer_data=True)
    assert d.consume() == blocks
    laps = len(blocks) // (d.initial_limit + 1)
    assert laps >= 5, f"the queue of {d.initial_limit + 1} slots wrapped only {laps} times"
    d.end()


def _pushback_params() -> list[Any]:
    out = []
    for io_method in ("sync", "worker", "io_uring"):
        for eic in (1, 2):
            out.append(
                pytest.param(
                    {"io_method": io_method, "effective_io_concurrency": eic, "io_combine_limit": 4},
                    id=f"{io_method}-eic{eic}",
                )
            )
    return out


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", _pushback_params(), indirect=True)
@pytest.mark.parametrize("shape", ["scattered", "pairs", "repeats"])
def test_unget_block_neither_lost_nor_duplicated(drive: Any, relation: Any, shape: str) -> None:
    """With ``max_ios`` reads in flight the block just taken from the callback is pushed back and
    delivered exactly once (``read_stream_unget_block``; §4.2 step 5, §9.6)."""
    rel = relation(3000)
    if shape == "scattered":
        blocks = [(b * 7919) % 3000 for b in range(1, 150)]
    elif shape == "pairs":
        blocks = [x for b in range(1, 80) for x in ((b * 37) % 2999, (b * 37) % 2999 + 1)]
    else:
        blocks = [(b // 2 * 101) % 3000 for b in range(160)]
    d = drive(rel, blocks)
    assert d.consume() == blocks
    d.end()


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
def test_end_of_stream_only_after_the_callback_ends(drive: Any, relation: Any) -> None:
    """An empty callback ends at once; otherwise the end comes after the last produced block and
    is repeated on every later call (§7, §9.6, §9.8)."""
    rel = relation(50)
    empty = drive(rel, [])
    assert empty.next() == INVALID_BUFFER
    assert empty.next() == INVALID_BUFFER
    empty.end()
    d = drive(rel, [3, 4, 5, 40, 41])
    assert d.consume() == [3, 4, 5, 40, 41]
    for _ in range(3):
        assert d.next() == INVALID_BUFFER
    d.end()


@pytest.mark.readstream_invariant("order", "MUST", kind="contract")
@pytest.mark.parametrize(
    "readstream_settings",
    [{"io_method": m, "effective_io_concurrency": e} for m in ("sync", "worker") for e in (0, 16)],
    indirect=True,
)
def test_reset_discards_and_the_callback_continues(drive: Any, relation: Any) -> None:
    """After a reset the next buffers are the callback's next blocks: nothing produced before the
    reset comes back (§4.4, §9.6)."""
    rel = relation(300)
    d = drive(rel, list(range(300)))
    first = d.consume(7)
    assert first == list(range(7))
    d.reset()
    before = len(d.source.produced)
    nxt = d.consume(5)
    assert nxt == [b for b, _ in d.source.produced[before : before + 5]]
    assert nxt[0] > 6
    d.end()
