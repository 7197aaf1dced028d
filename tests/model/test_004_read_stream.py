"""The cases of PostgreSQL's src/test/modules/test_aio/t/004_read_stream.pl, in the model.

Each case runs under every io_method. Reads are observed from the buffer manager's side (the
backend's read log and counters), never from the stream's own counters.
"""

from __future__ import annotations

import pytest

from reference_impl import INVALID_BUFFER, ForeignIO, Instance, Settings, begin_stream

from ._streams import list_callback

METHODS = ["sync", "worker", "io_uring"]


def _run(inst: Instance, blocks: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    be = inst.backend()
    rel = inst.relation("largeish")
    stream = begin_stream(be, rel, list_callback(blocks))
    got = []
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        got.append(be.buffer_block(buf))
        be.release_buffer(buf)
    stream.end()
    be.check_for_buffer_leaks()
    return got, [(r.start, r.nblocks) for r in be.stats.read_log]


def _instance(io_method: str, **settings) -> Instance:
    inst = Instance(Settings(io_method=io_method, max_connections=8, **settings), debug=True)
    inst.create_relation("largeish", 100)
    return inst


@pytest.mark.parametrize("io_method", METHODS)
def test_same_block_missed_twice_in_a_row(io_method: str) -> None:
    inst = _instance(io_method, io_combine_limit=1)
    got, reads = _run(inst, [0, 2, 2, 4, 4])
    assert got == [0, 2, 2, 4, 4]
    assert reads == [(0, 1), (2, 1), (4, 1)]  # each block read once
    # ... and again, now all hits
    got, reads = _run(inst, [0, 2, 2, 4, 4])
    assert got == [0, 2, 2, 4, 4] and reads == []


@pytest.mark.parametrize("io_method", METHODS)
def test_same_block_accessed_repeatedly(io_method: str) -> None:
    inst = _instance(io_method, io_combine_limit=1)
    blocks = [0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0]
    got, reads = _run(inst, blocks)
    assert got == blocks
    assert sorted(b for b, _ in reads) == list(range(7))


@pytest.mark.parametrize("io_method", METHODS)
def test_foreign_io_in_progress_succeeds(io_method: str) -> None:
    inst = _instance(io_method)
    inst.start_foreign_io(ForeignIO("largeish", block=5, duration_us=50_000))
    got, reads = _run(inst, [0, 2, 5, 7])
    assert got == [0, 2, 5, 7]
    assert 5 not in [b for b, _ in reads]  # waited for, not repeated
    assert sorted(b for b, _ in reads) == [0, 2, 7]
    assert inst.clock.now >= 50_000  # it really waited for the foreign read


@pytest.mark.parametrize("io_method", METHODS)
def test_foreign_io_in_progress_fails_and_is_retried(io_method: str) -> None:
    inst = _instance(io_method)
    inst.start_foreign_io(ForeignIO("largeish", block=5, duration_us=50_000, fails=True))
    got, reads = _run(inst, [0, 2, 5, 7])
    assert got == [0, 2, 5, 7]
    assert sorted(b for b, _ in reads) == [0, 2, 5, 7]  # block 5 read by us after the failure


@pytest.mark.parametrize("io_method", METHODS)
def test_two_blocks_inside_one_foreign_io(io_method: str) -> None:
    inst = _instance(io_method)
    inst.start_foreign_io(ForeignIO("largeish", block=2, nblocks=3, duration_us=50_000))
    got, reads = _run(inst, [0, 2, 4])
    assert got == [0, 2, 4]
    assert reads == [(0, 1)]
