"""Small helpers to drive a stream in the model's own tests."""

from __future__ import annotations

from collections.abc import Iterable

from reference_impl import (
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Instance,
    InvalidBlockNumber,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)


def list_callback(blocks: Iterable[int]):
    it = iter(list(blocks))

    def cb(stream, private):
        return next(it, InvalidBlockNumber)

    return cb


def drive(
    blocks: Iterable[int] | None = None,
    *,
    nblocks: int | None = None,
    settings: Settings | None = None,
    flags: int = 0,
    cached: Iterable[int] = (),
    rel_blocks: int | None = None,
    take: int | None = None,
    consumer_us: int = 0,
    device: str = "nvme",
) -> tuple[list[tuple[int, int]], list[int], Instance]:
    """Run a stream to the end (or ``take`` buffers, then end it); (reads, blocks returned, instance)."""
    inst = Instance(settings or Settings(), debug=True, device=device)
    if blocks is None:
        assert nblocks is not None
        size = rel_blocks or nblocks
        cb, priv = block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, nblocks)
    else:
        blocks = list(blocks)
        size = rel_blocks or (max(blocks) + 1 if blocks else 1)
        cb, priv = list_callback(blocks), None
    rel = inst.create_relation("t", size)
    inst.prewarm(rel, list(cached))
    be = inst.backend()
    stream = begin_stream(be, rel, cb, priv, flags=flags)
    out: list[int] = []
    while take is None or len(out) < take:
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        out.append(be.buffer_block(buf))
        if consumer_us:
            be.cpu(consumer_us)
        be.release_buffer(buf)
    stream.end()
    be.check_for_buffer_leaks()
    reads = [(r.start, r.start + r.nblocks - 1) for r in be.stats.read_log]
    return reads, out, inst
