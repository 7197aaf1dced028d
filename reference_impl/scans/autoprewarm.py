"""autoprewarm: reloading the blocks a dump file lists (``contrib/pg_prewarm/autoprewarm.c``).

At start-up the autoprewarm leader reads ``autoprewarm.blocks`` (``apw_load_buffers``), sorts the
``BlockInfoRecord``\\ s by database, tablespace, relfilenumber, fork and block
(``apw_compare_blockinfo``) and starts one worker per database; ``autoprewarm_database_main``
then walks the records of each relation fork that still exists and reads them through one read
stream per fork (``READ_STREAM_MAINTENANCE | DEFAULT | USE_BATCHING``, no strategy, so the pages
stay in the pool). The stream's callback (``apw_read_stream_next_block``) returns the records'
blocks in order, skipping those at or past the fork's current end, and stops at the next fork.

The model runs the records of one relation (the scan's), as the worker of its database would,
on the scan's backend: ``first_block .. last_block`` of the main fork every ``stride`` blocks
(``last_block`` may lie past the end: a relation that shrank since the dump), and with
``maps=True`` also every page of its FSM and VM forks (a dump of a pool that held them).

Versions differ in when the worker stops:

* **PostgreSQL 18** stops as soon as the buffer pool's free list is empty (``have_free_buffer``):
  before each relation and fork, and in the callback before each block, so a dump larger than
  the free part of the pool loads only as many blocks as there were free buffers (plus the
  blocks the stream had already asked for);
* **PostgreSQL 19 and 20devel** have no free list: ``apw_load_buffers`` caps the records at
  ``NBuffers`` ("autoprewarm capping prewarmed blocks to %d (shared_buffers size)") and every
  record up to there is read, evicting earlier ones by clock sweep when the pool is full.

The unstreamed variant is PostgreSQL 17's loop: one ``ReadBufferExtended(..., RBM_NORMAL, NULL)``
per record, with the same stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..read_stream import READ_STREAM_DEFAULT, READ_STREAM_MAINTENANCE, READ_STREAM_USE_BATCHING
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from .base import ScanContext, ScanParam, register_scan

__all__ = ["autoprewarm", "AUTOPREWARM_FLAGS"]

AUTOPREWARM_FLAGS = READ_STREAM_MAINTENANCE | READ_STREAM_DEFAULT | READ_STREAM_USE_BATCHING


@dataclass
class AutoPrewarmReadStreamData:
    """``AutoPrewarmReadStreamData``: the callback's records, position and fork."""

    ctx: ScanContext
    block_info: list[tuple[int, int]]
    pos: int
    stop_idx: int  # apw_state->prewarm_stop_idx
    forknum: int
    nblocks: int
    free_list: bool  # 18: have_free_buffer() is checked


def have_free_buffer(ctx: ScanContext) -> bool:
    """``have_free_buffer`` (18's ``freelist.c``): the buffer pool's free list is not empty."""
    return bool(ctx.instance.pool.freelist)


def apw_read_stream_next_block(stream: Any, p: AutoPrewarmReadStreamData) -> int:
    """``apw_read_stream_next_block``: the next record's block of this fork, skipping blocks at or
    past its end; ``InvalidBlockNumber`` at the next fork or, in 18, when no buffer is free."""
    p.ctx.backend.check_for_interrupts()
    while p.pos < p.stop_idx:
        forknum, blocknum = p.block_info[p.pos]
        if p.free_list and not have_free_buffer(p.ctx):
            p.pos = p.stop_idx
            return InvalidBlockNumber
        if forknum != p.forknum:
            return InvalidBlockNumber
        p.pos += 1
        if blocknum >= p.nblocks:
            continue
        return blocknum
    return InvalidBlockNumber


def _block_info(
    rel: Relation, first: int, last: int | None, stride: int, maps: bool
) -> list[tuple[int, int]]:
    """The dump's records of ``rel`` as ``(forknum, blocknum)``, in ``apw_compare_blockinfo`` order."""
    main_last = rel.nblocks(ForkNumber.MAIN) - 1 if last is None else last
    records = [(int(ForkNumber.MAIN), b) for b in range(first, main_last + 1, stride)]
    if maps:
        for fork in (ForkNumber.FSM, ForkNumber.VM):
            if rel.exists(fork):
                records.extend((int(fork), b) for b in range(rel.nblocks(fork)))
    return sorted(records)


@register_scan(
    "autoprewarm",
    streamed_since="18",
    models="autoprewarm_database_main → apw_read_stream_next_block (contrib/pg_prewarm/autoprewarm.c)",
    description="reload a dump's blocks of one relation, one stream per fork (MAINTENANCE|DEFAULT|"
    "USE_BATCHING, no strategy); 18 stops when the free list is empty, 19 and 20devel cap the "
    "records at NBuffers; unstreamed = PostgreSQL 17 (ReadBufferExtended per record)",
    params=(
        ScanParam("first_block", int, 0, "first main-fork block the dump lists", minimum=0),
        ScanParam(
            "last_block",
            int,
            None,
            "last main-fork block the dump lists (default the fork's last block; may lie past the end)",
            minimum=0,
        ),
        ScanParam("stride", int, 1, "the dump lists every stride-th block", minimum=1),
        ScanParam("maps", bool, False, "the dump also lists every FSM and VM page of the relation"),
    ),
)
def autoprewarm(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    first_block: int = 0,
    last_block: int | None = None,
    stride: int = 1,
    maps: bool = False,
) -> dict[str, Any]:
    from .. import begin_stream

    be = ctx.backend
    block_info = _block_info(rel, first_block, last_block, stride, maps)
    num_elements = len(block_info)
    free_list = not ctx.version_at_least("19")
    if not free_list and num_elements > ctx.settings.nbuffers:
        num_elements = ctx.settings.nbuffers  # apw_load_buffers (19): don't prewarm more than fits
        ctx.notes["autoprewarm_capped"] = num_elements
    stop_idx = num_elements  # prewarm_stop_idx (one database, one relation)
    prewarmed = 0
    i = 0
    while i < stop_idx and (not free_list or have_free_buffer(ctx)):
        forknum = block_info[i][0]
        if not rel.exists(ForkNumber(forknum)):
            while i < stop_idx and block_info[i][0] == forknum:
                i += 1  # fast-forward to the next fork
            continue
        p = AutoPrewarmReadStreamData(
            ctx, block_info, i, stop_idx, forknum, rel.nblocks(ForkNumber(forknum)), free_list
        )
        if streamed:
            stream = begin_stream(
                be, rel, apw_read_stream_next_block, p, fork=ForkNumber(forknum), flags=AUTOPREWARM_FLAGS
            )
            ctx.track_stream(stream)
            while True:
                buf = stream.next_buffer()
                if buf < 0:
                    break
                ctx.visit(be.buffer_block(buf))
                prewarmed += 1
                be.release_buffer(buf)
            stream.end()
        else:
            while True:
                blocknum = apw_read_stream_next_block(None, p)
                if blocknum == InvalidBlockNumber:
                    break
                buf = be.read_buffer(rel, blocknum, ForkNumber(forknum), None)
                ctx.visit(blocknum)
                prewarmed += 1
                be.release_buffer(buf)
        i = p.pos  # past the blocks just prewarmed
    return {"prewarmed_blocks": prewarmed, "records": len(block_info)}
