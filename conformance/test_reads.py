"""Reads: which blocks are read, in which I/Os, how many at once.

``read_stream.md`` §9.4, §9.5, §9.11, §9.12 and §6: every I/O covers consecutive blocks the
callback produced, at most ``io_combine_limit`` of them, inside one 1 GiB segment; no more than
``max_ios`` reads are started and not yet waited for; a block is read at most once while it stays
in the pool (the repeated-block cases of PostgreSQL's ``004_read_stream.pl``); a block-range
stream never reads at or past the ``numblocks`` fixed when it began, even while the relation
grows (the online-checksums thread). The exact read sequences of §8 are SHOULD: they hold in
PostgreSQL 18 absent other backends.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import (
    READ_STREAM_FULL,
    READ_STREAM_SEQUENTIAL,
    RELSEG_SIZE,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)

from . import _oracle
from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import make_the_consumer_wait

pytestmark = pytest.mark.readstream_requires("stream-api")

_METHODS = ["sync", "worker", "io_uring"]


def _io(d: Any) -> list[tuple[int, int]]:
    """The stream's reads as ``(first, last)`` block pairs, in issue order."""
    return [(r.start, r.start + r.nblocks - 1) for r in d.reads]


@pytest.mark.readstream_invariant("reads", "MUST")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize("grow_after", [0, 3, 39])
def test_block_range_never_reads_past_numblocks_fixed_at_start(
    drive: Any, relation: Any, grow_after: int
) -> None:
    """``block_range_read_stream_cb`` stops at ``last_exclusive`` even when the relation grows
    meanwhile: no read at or past the size the scan started with (online-checksums thread)."""
    rel = relation(40)
    private = BlockRangeReadStreamPrivate(0, rel.nblocks())
    d = drive(rel, [], fn=block_range_read_stream_cb, private=private, flags=READ_STREAM_FULL)
    got = d.consume(grow_after)
    d.grow(200)
    got += d.consume()
    assert got == list(range(40))
    assert all(last < 40 for _, last in _io(d)), _io(d)
    d.end()


@pytest.mark.readstream_invariant("reads", "MUST")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL])
def test_reads_never_cross_a_segment(drive: Any, relation: Any, flags: int) -> None:
    """A run of blocks across a 1 GiB boundary is read in I/Os that stop at the boundary (§6.1,
    §9.5; confirmed on PostgreSQL 18.6)."""
    start = RELSEG_SIZE - 12
    rel = relation(2 * RELSEG_SIZE + 64)
    blocks = [*range(start, RELSEG_SIZE + 19), *range(2 * RELSEG_SIZE - 8, 2 * RELSEG_SIZE + 8)]
    d = drive(rel, blocks, flags=flags)
    assert d.consume() == blocks
    for first, last in _io(d):
        assert first // RELSEG_SIZE == last // RELSEG_SIZE, (first, last)
    d.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
def test_segment_boundary_read_sequence(drive: Any, relation: Any) -> None:
    """§8.7: a ``FULL`` stream over 131060..131090 reads [131060-131071] [131072-131087]
    [131088-131090]."""
    rel = relation(RELSEG_SIZE + 64)
    d = drive(rel, list(range(131060, 131091)), flags=READ_STREAM_FULL)
    d.consume()
    assert _io(d) == [(131060, 131071), (131072, 131087), (131088, 131090)]
    d.end()


@pytest.mark.readstream_invariant("reads", "MUST")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param(
            {"io_combine_limit": icl, "io_max_combine_limit": max(icl, 16), "io_method": m},
            id=f"icl{icl}-{m}",
        )
        for icl in (1, 3, 8, 16, 32)
        for m in ("sync", "worker")
    ],
    indirect=True,
)
def test_reads_are_at_most_io_combine_limit(drive: Any, relation: Any, readstream_settings: Any) -> None:
    """No I/O is longer than ``io_combine_limit`` blocks (§9.5)."""
    icl = _oracle.effective_io_combine_limit(readstream_settings)
    rel = relation(400)
    d = drive(rel, list(range(400)), flags=READ_STREAM_FULL)
    d.consume()
    assert max(last - first + 1 for first, last in _io(d)) <= icl
    d.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"io_combine_limit": icl, "io_max_combine_limit": max(icl, 16)}, id=f"icl{icl}")
        for icl in (3, 16, 32)
    ],
    indirect=True,
)
def test_cold_sequential_reads_reach_io_combine_limit(
    drive: Any, relation: Any, readstream_settings: Any
) -> None:
    """A long cold sequential run is read in I/Os of ``io_combine_limit`` blocks (§8.1)."""
    icl = _oracle.effective_io_combine_limit(readstream_settings)
    rel = relation(400)
    d = drive(rel, list(range(400)), flags=READ_STREAM_FULL)
    d.consume()
    sizes = [last - first + 1 for first, last in _io(d)]
    assert max(sizes) == icl, f"reads never reached io_combine_limit {icl}: {sizes}"
    d.end()


@pytest.mark.readstream_invariant("reads", "MUST")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"effective_io_concurrency": e, "io_method": m}, id=f"eic{e}-{m}")
        for e in (0, 1, 2, 8)
        for m in _METHODS
    ],
    indirect=True,
)
def test_reads_in_flight_never_exceed_max_ios(drive: Any, relation: Any) -> None:
    """At most ``max_ios`` reads are started and not yet waited for (§9.4)."""
    rel = relation(5000)
    blocks = [(b * 4099) % 5000 for b in range(1, 200)]
    d = drive(rel, blocks)
    d.consume()
    assert 1 <= d.observer.max_outstanding <= d.max_ios
    d.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"effective_io_concurrency": e, "io_method": m}, id=f"eic{e}-{m}")
        for e in (2, 8)
        for m in _METHODS
    ],
    indirect=True,
)
def test_scattered_stream_starts_reads_ahead(
    drive: Any, relation: Any, readstream_faults: Any, readstream_settings: Any
) -> None:
    """A scattered cold stream whose consumer waits for its reads has ``max_ios`` reads started
    and not yet waited for at some point (§4.2: look-ahead runs until ``max_ios`` reads are in
    progress). Its first reads are slow (:func:`make_the_consumer_wait`): from 19 on the distance
    grows only after a real wait."""
    rel = relation(5000)
    blocks = [(b * 4099) % 5000 for b in range(1, 200)]
    make_the_consumer_wait(readstream_faults, rel.name, blocks, readstream_settings)
    d = drive(rel, blocks)
    d.consume()
    assert d.observer.max_outstanding == d.max_ios, (
        f"at most {d.observer.max_outstanding} reads were in flight"
    )
    d.end()


@pytest.mark.readstream_invariant("reads", "MUST")
@pytest.mark.parametrize(
    "readstream_settings", [{"io_method": m, "io_combine_limit": 1} for m in _METHODS], indirect=True
)
@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param([0, 2, 2, 4, 4], id="same-block-missed-twice"),
        pytest.param([0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0], id="same-block-accessed-again"),
        pytest.param([7, 7, 7, 7, 8, 8, 7], id="runs-of-one-block"),
    ],
)
def test_repeated_blocks_are_read_once(drive: Any, relation: Any, blocks: list[int]) -> None:
    """``004_read_stream.pl``: a block requested twice (in a row or later) is read once and
    returned each time; requested again when cached, it is not read at all (§6.4, §9.11)."""
    rel = relation(20)
    d = drive(rel, blocks)
    assert d.consume() == blocks
    assert sorted(b for first, last in _io(d) for b in range(first, last + 1)) == sorted(set(blocks))
    d.end()
    again = drive(rel, blocks)
    assert again.consume() == blocks
    assert again.reads == [], "cached blocks were read again"
    again.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_ramp_up_read_sequence(drive: Any, relation: Any) -> None:
    """§8.1 / §9.12: a fresh stream over cold sequential blocks reads [0] [1-2] [3-6] [7-14], then
    ``io_combine_limit``-sized reads."""
    rel = relation(200)
    d = drive(rel, list(range(20)), flags=READ_STREAM_SEQUENTIAL)
    d.consume()
    assert _io(d) == [(0, 0), (1, 2), (3, 6), (7, 14), (15, 19)]
    d.end()
    d2 = drive(rel, list(range(100, 200)), flags=READ_STREAM_SEQUENTIAL)
    d2.consume()
    sizes = [last - first + 1 for first, last in _io(d2)]
    assert sizes[:5] == [1, 2, 4, 8, 16] and set(sizes[5:-1]) == {16}, sizes
    d2.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in ("sync", "worker")], indirect=True)
def test_alternating_misses_and_hits_read_one_block_each(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """§8.3: with even blocks cold and odd ones cached every miss is its own one-block read."""
    rel = relation(10)
    readstream_instance.prewarm(rel, range(1, 10, 2))
    d = drive(rel, list(range(10)))
    d.consume()
    assert _io(d) == [(0, 0), (2, 2), (4, 4), (6, 6), (8, 8)]
    d.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
def test_skipping_callback_read_sequence(drive: Any, relation: Any) -> None:
    """§8.9: a vacuum-like callback 0,1,2,3,40..45,90 reads [0] [1-2] [3] [40-45] [90]."""
    rel = relation(100)
    d = drive(rel, [0, 1, 2, 3, *range(40, 46), 90])
    d.consume()
    assert _io(d) == [(0, 0), (1, 2), (3, 3), (40, 45), (90, 90)]
    d.end()
