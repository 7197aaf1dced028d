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

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401

pytestmark = pytest.mark.readstream_requires("stream-api")


@pytest.mark.readstream_invariant("reads", "MUST")
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
