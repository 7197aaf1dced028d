"""The stream's simple steps (``ReadStream._open_window``) and its look-ahead's taking of the
block range's blocks at once (``ReadStream._take_range_blocks``) change nothing anybody can see.

A stream over ``block_range_read_stream_cb`` hands out most buffers in counted runs that move the
queue position, the statistics, the range and the pending read only when the run is settled. A
stream that never counts a run takes the general path at every step, so each test drives the same
scan twice, on two fresh instances, once each way, and compares everything observable after every
buffer: the block handed out, the range's fields, the statistics, the pins, the clock, and at the
end the whole pool. The consumer also reads and changes the range's fields in the middle of runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from reference_impl import (
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Instance,
    Settings,
    block_range_read_stream_cb,
)
from reference_impl.read_stream import ReadStream
from reference_impl.storage.relation import InvalidBlockNumber


class _GeneralPathOnly(ReadStream):
    """Never counts simple steps: every buffer goes through the general path, which calls the
    look-ahead loop itself (not the cases _next_buffer writes out); and the loop takes the block
    range's blocks one by one, as the loop in C does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inline_step = False

    def _open_window(self, oldest: int) -> None:
        return None

    def _take_range_blocks(self, rng: BlockRangeReadStreamPrivate, pending_n: int, room: int) -> bool:
        return False


Poke = Callable[[int, ReadStream, BlockRangeReadStreamPrivate], None]


def _listed_blocks_cb(stream: Any, private: list[int]) -> int:
    """A callback other than block_range_read_stream_cb: the blocks of a list, then the end."""
    return private.pop() if private else InvalidBlockNumber


def _run(
    stepped: bool,
    poke: Poke | None,
    settings: dict[str, Any],
    nblocks: int = 3000,
    blocks: list[int] | None = None,
    cached: list[int] | None = None,
) -> list[Any]:
    inst = Instance(Settings.from_mapping({"debug_io_direct": "data", **settings}), device="nvme")
    rel = inst.create_relation("t", nblocks)
    if cached is not None:
        inst.prewarm(rel, cached)
    be = inst.backend()
    priv = BlockRangeReadStreamPrivate(0, nblocks)
    cls = ReadStream if stepped else _GeneralPathOnly
    if blocks is None:
        stream = cls(be, rel, block_range_read_stream_cb, priv)
    else:
        stream = cls(be, rel, _listed_blocks_cb, blocks[::-1])
    seen: list[Any] = []
    i = 0
    while True:
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        seen.append((be.buffer_block(buf), be.clock.now, sorted(be.pinned_buffers().items())))
        be.release_buffer(buf)
        if poke is not None:
            poke(i, stream, priv)
        i += 1
    seen.append(stream.stats.as_dict())
    seen.append(list(stream.stats.distance_history or []))
    stream.end()
    pool = inst.pool
    seen.append((list(pool.tag), bytes(pool.flags), list(pool.usage), pool.next_victim, be.clock.now))
    return seen


def _same(
    poke: Poke | None,
    settings: dict[str, Any] | None = None,
    nblocks: int = 3000,
    blocks: list[int] | None = None,
    cached: list[int] | None = None,
) -> list[Any]:
    general = _run(False, poke, settings or {}, nblocks, None if blocks is None else list(blocks), cached)
    stepped = _run(True, poke, settings or {}, nblocks, None if blocks is None else list(blocks), cached)
    assert len(stepped) == len(general)
    for k, (a, b) in enumerate(zip(general, stepped, strict=True)):
        assert a == b, f"item {k}: general path {a!r}, with simple steps {b!r}"
    return stepped


@pytest.mark.parametrize("method", ["worker", "sync", "io_uring"])
def test_a_plain_range_scan_is_the_same(method: str) -> None:
    seen = _same(None, {"io_method": method})
    assert len(seen) == 3000 + 3


def test_statistics_and_range_read_in_the_middle_of_runs() -> None:
    record: list[Any] = []

    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        record.append((stream.stats.buffers_returned, priv.current_blocknum, priv.last_exclusive, repr(priv)))

    _same(poke)
    # Each read saw the value the general path has at that moment (compared in _same through
    # the same pokes; here: the counts move by one per buffer, the range ahead of the consumer).
    returned = [r[0] for r in record]
    assert returned[:2000:1000] == [1, 1001] and all(r[1] > r[0] for r in record[:2900])


def test_range_shortened_in_the_middle_of_a_run() -> None:
    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i == 1205:
            priv.last_exclusive = priv.current_blocknum + 3

    seen = _same(poke)
    assert 1205 < len(seen) - 3 < 1400


def test_range_moved_in_the_middle_of_a_run() -> None:
    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i in (700, 1503):
            priv.current_blocknum = priv.current_blocknum + 50

    seen = _same(poke)
    assert len(seen) - 3 == 3000 - 100


def test_next_block_and_reset_in_the_middle_of_a_run() -> None:
    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i == 911:
            stream.next_block()
        if i == 1777:
            stream.reset()

    seen = _same(poke)
    assert len(seen) - 3 > 1777


def test_small_pool_and_short_combine_limit() -> None:
    _same(None, {"shared_buffers": 300, "io_combine_limit": 4})


def test_runs_are_taken() -> None:
    """The benchmark's scan does take simple steps (else the comparisons above prove nothing)."""
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="nvme")
    rel = inst.create_relation("t", 2000)
    be = inst.backend()
    stream = ReadStream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 2000))
    stepped = 0
    fills = 0
    starts = 0
    while True:
        if stream._run_buffers:
            stepped += 1
        if stream._fill_next:
            fills += 1
        if stream._start_next:
            starts += 1
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        be.release_buffer(buf)
    stream.end()
    assert stepped > 1500
    # One fill step per 16-block read: the step that fills the pending read (and whose start is
    # refused, as the consumer's pin leaves the budget one block short).
    assert 2000 // 16 - 10 < fills <= 2000 // 16
    # And the step after it, which starts the full read.
    assert fills - 2 <= starts <= fills


def _gappy_blocks(nblocks: int) -> list[int]:
    """Ascending blocks with a gap now and then (each gap leaves a run of simple steps)."""
    return [b for b in range(nblocks) if b % 397 not in (5, 6, 7) and b % 1009 != 300]


@pytest.mark.parametrize("method", ["worker", "io_uring"])
def test_any_other_callback_is_the_same(method: str) -> None:
    """Runs over a callback that is not the inlined block range call it at each step, and leave
    the run when its block does not extend the pending read."""
    blocks = _gappy_blocks(3000)
    seen = _same(None, {"io_method": method}, blocks=blocks)
    assert len(seen) == len(blocks) + 3


def test_any_other_callback_with_pokes() -> None:
    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i == 911:
            stream.next_block()
        if i == 1777:
            stream.reset()

    seen = _same(poke, blocks=_gappy_blocks(3000))
    assert len(seen) - 3 > 1777


def test_range_blocks_taken_at_once_near_the_end_and_after_a_move() -> None:
    """The look-ahead takes the range's blocks at once (_take_range_blocks); near the range's
    end and when the range no longer extends the pending read it takes them one by one."""

    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i in (40, 333, 1001):
            priv.current_blocknum = priv.current_blocknum + 7
        if i == 2500:
            priv.last_exclusive = priv.current_blocknum + 17

    seen = _same(poke, {"shared_buffers": 400})
    assert 2500 < len(seen) - 3 < 2700


def test_callback_runs_are_taken() -> None:
    """The gappy callback's scan does take simple steps of its own kind."""
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="nvme")
    rel = inst.create_relation("t", 2000)
    be = inst.backend()
    stream = ReadStream(be, rel, _listed_blocks_cb, _gappy_blocks(2000)[::-1])
    stepped = 0
    while True:
        if stream._callback_steps:
            stepped += 1
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        be.release_buffer(buf)
    stream.end()
    assert stepped > 1000


@pytest.mark.parametrize("eic", [1, 2])
def test_few_io_slots(eic: int) -> None:
    """With one or two I/O slots the end of the range often finds them all busy, so the pending
    read is started by a later step's final test (distance 0)."""
    _same(None, {"effective_io_concurrency": eic}, nblocks=1000)
    _same(None, {"effective_io_concurrency": eic}, nblocks=1000, blocks=_gappy_blocks(1000))


def _armed_steps(nblocks: int = 3000, flag: str = "_fill_next") -> list[int]:
    """The steps after which the benchmark's scan has a fill step (_fill_step) or a start step
    (_start_step) armed."""
    armed: list[int] = []

    def probe(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if getattr(stream, flag):
            armed.append(i)

    _run(True, probe, {}, nblocks)
    return armed


@pytest.mark.parametrize("change", ["move", "end", "same", "end after the next block"])
def test_range_changed_or_read_between_the_arming_and_the_fill(change: str) -> None:
    """Right after a step that armed a fill step, the consumer reads the range and the
    statistics and changes the range: the general path sees the change at the next step."""
    armed = [i for i in _armed_steps() if i > 1000]
    assert len(armed) > 50

    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i in (armed[0], armed[7], armed[30]):
            first = priv.current_blocknum
            assert stream.stats.buffers_returned == i + 1 and priv.last_exclusive == 3000
            if change == "move":
                priv.current_blocknum = first + 3
            elif change == "end":
                priv.last_exclusive = first
            elif change == "same":
                priv.current_blocknum = first  # the same value, set: the step is not armed
            else:
                priv.last_exclusive = first + 1

    _same(poke)


def _two_streams(stepped: bool) -> list[Any]:
    """Two streams over one BlockRangeReadStreamPrivate, consumed alternately."""
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="nvme")
    rel = inst.create_relation("t", 4000)
    be = inst.backend()
    priv = BlockRangeReadStreamPrivate(0, 4000)
    cls = ReadStream if stepped else _GeneralPathOnly
    streams = [cls(be, rel, block_range_read_stream_cb, priv) for _ in range(2)]
    seen: list[Any] = []
    ended = [False, False]
    i = 0
    while not all(ended):
        k = i % 2 if i < 1500 else (i // 7) % 2  # alternate, then in turns of seven
        i += 1
        if ended[k]:
            continue
        buf = streams[k].next_buffer()
        if buf == INVALID_BUFFER:
            ended[k] = True
            continue
        seen.append((k, be.buffer_block(buf), be.clock.now, priv.current_blocknum))
        be.release_buffer(buf)
    for stream in streams:
        seen.append(stream.stats.as_dict())
        seen.append(list(stream.stats.distance_history or []))
        stream.end()
    return seen


def test_two_streams_share_one_range() -> None:
    general = _two_streams(False)
    stepped = _two_streams(True)
    assert len(general) == len(stepped) == 4000 + 4
    for k, (a, b) in enumerate(zip(general, stepped, strict=True)):
        assert a == b, f"item {k}: general path {a!r}, with simple steps {b!r}"


@pytest.mark.parametrize("pattern", ["every third", "runs", "random"])
def test_partly_cached_relation(pattern: str) -> None:
    """Hits split reads into short I/Os, so that the buffer after a step is often the head of
    the next I/O, and the distance decays and grows again."""
    rnd = random.Random(16)
    cached = {
        "every third": [b for b in range(3000) if b % 3 == 1],
        "runs": [b for b in range(3000) if b % 40 in (17, 19, 20, 33)],
        "random": [b for b in range(3000) if rnd.random() < 0.2],
    }[pattern]
    _same(None, cached=cached)
    _same(None, {"io_method": "sync"}, cached=cached)
    _same(None, {"io_combine_limit": 2}, cached=cached)
    _same(None, {"io_combine_limit": 3, "effective_io_concurrency": 2}, cached=cached)


def test_range_ends_at_each_point_of_a_read() -> None:
    """Sixteen lengths: the range's end meets every point of the 16-block cycle of reads, so
    that some general step takes the range's last blocks and leaves the pending read one block
    short of full (no fill step may follow: the callback has ended)."""
    for nblocks in range(1990, 2006):
        _same(None, nblocks=nblocks)


@pytest.mark.parametrize("action", ["next_block", "reset", "pins", "range"])
def test_consumer_acts_between_the_arming_and_the_start(action: str) -> None:
    """Right after a fill step whose start was refused armed a start step (_start_step), the
    consumer takes the next block number, resets the stream, pins two more buffers (the start
    is refused again: the general path's next step sees the same), or reads and moves the range
    (which the start step does not use)."""
    armed = [i for i in _armed_steps(flag="_start_next") if i > 1000]
    assert len(armed) > 50
    held: list[int] = []

    def poke(i: int, stream: ReadStream, priv: BlockRangeReadStreamPrivate) -> None:
        if i in (armed[0], armed[9], armed[31]):
            if action == "next_block":
                stream.next_block()
            elif action == "reset":
                stream.reset()
            elif action == "pins":
                be = stream.backend
                held.extend(be.read_buffer(stream.rel, b) for b in (i % 7, 2990 - i % 5))
            else:
                priv.current_blocknum = priv.current_blocknum + 2
        elif held and i % 5 == 0:
            stream.backend.release_buffer(held.pop())

    _same(poke)
