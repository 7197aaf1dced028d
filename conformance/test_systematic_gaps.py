"""Gaps the systematic C mutants of ``read_stream.c`` found (``docs/mutation.md``).

Each test here was written for a systematic mutant that survived the rest of the suite on
PostgreSQL 18.6: the docstring names the mutant by its stable id
(``function:line:column:OPERATOR:original->replacement`` of 18.6's file) and says what the
mutated stream does that the correct one does not. The tests state what every stream must do;
they hold for the model and for every version's server, mutant or not.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL, BlockRangeReadStreamPrivate, block_range_read_stream_cb

from . import _oracle
from ._fixtures import drive_fixture, relation_fixture  # noqa: F401

pytestmark = pytest.mark.readstream_requires("stream-api")


@pytest.mark.readstream_invariant("reads", "MUST", kind="contract")
@pytest.mark.parametrize(("first", "last_exclusive"), [(3, 3), (7, 3)], ids=["empty", "inverted"])
def test_an_empty_block_range_returns_nothing(
    drive: Any, relation: Any, first: int, last_exclusive: int
) -> None:
    """``block_range_read_stream_cb`` over ``[first, last_exclusive)`` with ``first >=
    last_exclusive`` hands out no block: the stream ends at once and reads nothing.

    Kills ``block_range_read_stream_cb:168:26:ROR:<->!=`` (18.6): ``current_blocknum !=
    last_exclusive`` is the same test for every range the suite used to begin (``first <=
    last_exclusive``), but an inverted range then runs on past the relation's end."""
    rel = relation(16)
    private = BlockRangeReadStreamPrivate(first, last_exclusive)
    d = drive(rel, [], fn=block_range_read_stream_cb, private=private, flags=READ_STREAM_FULL)
    assert d.consume() == []
    assert d.reads == []
    d.end()


@pytest.mark.readstream_invariant("adaptivity", "SHOULD", kind="implementation")
@pytest.mark.readstream_requires("introspection")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_cached_blocks_after_a_miss_take_the_fast_path_again(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """§5: once the one miss of an otherwise cached relation has been read and waited for, the
    look-ahead distance decays with the hits that follow back to 1, and the stream takes the
    fast path again (one pin, one block at a time).

    Kills ``read_stream_start_pending_read:367:26:CRP:1->2`` (18.6): with ``distance > 2`` the
    distance never decays below 2 and the stream never takes the fast path again, which neither
    the blocks it returns nor its reads (there are none) show."""
    rel = relation(240)
    readstream_instance.prewarm(rel, [b for b in range(240) if b != 12])
    d = drive(rel, list(range(240)))
    assert d.consume(180) == list(range(180))
    fast = getattr(d.stream, "fast_path", None)
    if fast is None:
        pytest.skip("the stream exposes no fast_path field")
    assert fast, f"not in the fast path after 168 hits since the miss (distance {d.stream.distance})"
    assert d.stream.distance == 1
    assert d.consume() == list(range(180, 240))
    d.end()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{}, {"io_method": "sync"}], indirect=True)
@pytest.mark.parametrize("order", ["sequential", "scattered"])
def test_a_stream_without_a_spare_pin_still_returns_every_block_one_pin_at_a_time(
    drive: Any, relation: Any, readstream_backend: Any, order: str
) -> None:
    """§4.3 step 2: when the consumer's own pins use up the backend's share
    (``GetAdditionalPinLimit()`` is 0), a stream that holds no pin may still take one, so it
    returns every block; one that holds a pin takes no other: it never holds more than one.

    Kills the "guarantee progress" mutants of ``read_stream_start_pending_read`` line 322 (18.6:
    ``if (buffer_limit == 0 && stream->pinned_buffers == 0) buffer_limit = 1``), for example
    ``read_stream_start_pending_read:322:6:ROR:buffer_limit == 0->false`` (no read at all: the
    stream ends early) and ``read_stream_start_pending_read:322:50:ROR:==->>=`` (a second pin
    beyond the share): the rest of the suite never leaves a stream without a spare pin."""
    pin_limit = _oracle.max_proportional_pins(readstream_backend.settings)
    held = pin_limit + 4
    other = relation(held + 8, name="other")
    kept = [readstream_backend.read_buffer(other, b) for b in range(held)]
    rel = relation(61)
    blocks = list(range(61)) if order == "sequential" else [(7 * i) % 61 for i in range(61)]
    d = drive(rel, blocks, held=kept, flags=READ_STREAM_FULL)
    pins = []
    got = []
    for _ in range(61):
        d.next()
        got.append(d.returned[-1])
        pins.append(d.stream_pins)
    assert got == blocks
    assert max(pins) <= 1, f"the stream's pins after each call, with no spare pin: {pins}"
    assert d.consume() == []
    d.end()
    while d.held:
        d.release_held()
