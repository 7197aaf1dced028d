"""BRIN at VACUUM time (``brin.c``): ``brinbulkdelete`` reads nothing, ``brinvacuumcleanup`` reads all.

* ``brinbulkdelete`` deletes nothing (a summary does not list TIDs) and reads no page.
* ``brinvacuumcleanup`` (unless ``ANALYZE`` only): ``brin_vacuum_scan`` visits every block in
  physical order, from the metapage on — PostgreSQL 19 through a block-range stream
  (``MAINTENANCE | FULL | USE_BATCHING``, ``info->strategy``) with ``CHECK_FOR_INTERRUPTS``
  after each buffer, 18 with one ``ReadBufferExtended`` each — and ``brin_page_cleanup`` records
  each regular page's free space in the FSM (the leaf is read; the value has not changed, so
  nothing is dirtied); then ``FreeSpaceMapVacuum`` walks the FSM. ``brinsummarize`` follows
  (``BRIN_ALL_BLOCKRANGES``, partial range excluded): ``brinRevmapInitialize`` reads the metapage
  and keeps it pinned; for each full range ``brinGetTupleForHeapBlock`` reads the revmap page
  and the regular page its TID points to, each kept pinned while the next range needs the same
  page (``ReadBuffer``, no strategy: normally hits). Every range of a built index is summarized,
  so nothing more is read (no ``summarize_range`` of the heap).
"""

from __future__ import annotations

from typing import Any

from ..buffers.bufmgr import RBM_ZERO_ON_ERROR
from ..buffers.strategy import BufferAccessStrategy
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..relations.brin import REVMAP_PAGE_MAXITEMS
from ..relations.layout import fsm_leaf_block
from ..storage.relation import ForkNumber, Relation
from ._maint import DeadItems, IndexBulkDeleteResult
from .base import ScanContext, register_scan
from .index_vacuum import (
    _COMMON_PARAMS,
    IndexVacuumOptions,
    _bulkdelete_then_cleanup,
    _content,
    _visit,
    index_fsm_vacuum,
)

__all__ = ["brinvacuumcleanup", "ambulkdelete", "amvacuumcleanup"]

BRIN_METAPAGE_BLKNO = 0


def ambulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult:
    """``brinbulkdelete``: nothing to delete, nothing read."""
    return stats if stats is not None else IndexBulkDeleteResult()


def _brin_page_cleanup(ctx: ScanContext, index: Relation, buf: int, blkno: int) -> None:
    """``brin_page_cleanup``: a regular page's free space goes to the FSM (unchanged value)."""
    page = _content(index).page(ForkNumber.MAIN, blkno)
    _visit(ctx, blkno, page.nentries)
    if page.kind != "regular":
        return
    be = ctx.backend
    leaf = fsm_leaf_block(blkno)
    if index.exists(ForkNumber.FSM) and leaf < index.nblocks(ForkNumber.FSM):
        be.release_buffer(be.read_buffer(index, leaf, ForkNumber.FSM, None, RBM_ZERO_ON_ERROR))
    else:
        fsm = be.extend_buffered_rel_to(index, ForkNumber.FSM, leaf + 1)
        be.mark_buffer_dirty(fsm)
        be.release_buffer(fsm)


def _brin_vacuum_scan(
    ctx: ScanContext, index: Relation, strategy: BufferAccessStrategy | None, streamed: bool
) -> None:
    """``brin_vacuum_scan``: every block in physical order, then ``FreeSpaceMapVacuum``."""
    from .. import begin_stream

    be = ctx.backend
    nblocks = index.nblocks(ForkNumber.MAIN)
    if streamed:
        stream = begin_stream(
            be,
            index,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(0, nblocks),
            flags=READ_STREAM_MAINTENANCE | READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=strategy,
        )
        ctx.track_stream(stream)
        while True:
            buf = stream.next_buffer()
            if buf < 0:
                break
            be.check_for_interrupts()
            _brin_page_cleanup(ctx, index, buf, be.buffer_block(buf))
            be.release_buffer(buf)
        stream.end()
    else:
        for blkno in range(nblocks):
            be.check_for_interrupts()
            buf = be.read_buffer(index, blkno, ForkNumber.MAIN, strategy)
            _brin_page_cleanup(ctx, index, buf, blkno)
            be.release_buffer(buf)
    index_fsm_vacuum(ctx, index)


def _brinsummarize(ctx: ScanContext, index: Relation) -> int:
    """``brinsummarize(index, heap, BRIN_ALL_BLOCKRANGES, false, ...)``: the ranges found summarized."""
    be = ctx.backend
    content = _content(index)
    metabuf = be.read_buffer(index, BRIN_METAPAGE_BLKNO, ForkNumber.MAIN, None)  # brinRevmapInitialize
    heap_rel = content.heap.rel
    heap_nblocks = heap_rel.nblocks(ForkNumber.MAIN) if heap_rel is not None else content.heap.spec.nblocks
    ppr = content.pages_per_range
    currbuf = buf = -1
    curr_block = block = -1
    existing = 0
    for start in range(0, heap_nblocks, ppr):
        if start + ppr > heap_nblocks:
            break  # a partial range is left to brin_summarize_new_values
        be.check_for_interrupts()
        rng = start // ppr
        if rng >= content.nranges:
            break  # the heap grew past the build: no revmap entry (summarize_range not modelled)
        map_block = 1 + rng // REVMAP_PAGE_MAXITEMS  # revmap_get_blkno
        if currbuf < 0 or curr_block != map_block:  # revmap_get_buffer
            if currbuf >= 0:
                be.release_buffer(currbuf)
            currbuf = be.read_buffer(index, map_block, ForkNumber.MAIN, None)
            curr_block = map_block
        blk = content.range_block(rng)
        if buf < 0 or block != blk:
            if buf >= 0:
                be.release_buffer(buf)
            buf = be.read_buffer(index, blk, ForkNumber.MAIN, None)
            block = blk
        existing += 1
    if buf >= 0:
        be.release_buffer(buf)
    # brinRevmapTerminate
    be.release_buffer(metabuf)
    if currbuf >= 0:
        be.release_buffer(currbuf)
    return existing


def amvacuumcleanup(
    ctx: ScanContext,
    index: Relation,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult | None:
    """``brinvacuumcleanup``."""
    if stats is None:
        stats = IndexBulkDeleteResult()
    stats.num_pages = index.nblocks(ForkNumber.MAIN)
    _brin_vacuum_scan(ctx, index, strategy, streamed and opts.streams_of_19)
    stats.num_index_tuples = _brinsummarize(ctx, index)
    return stats


@register_scan(
    "brinvacuumcleanup",
    streamed_since="19",
    models="brinbulkdelete, brinvacuumcleanup → brin_vacuum_scan → brin_page_cleanup, brinsummarize (brin.c)",
    description="BRIN's part of a VACUUM: every page with the VACUUM ring and the FSM (streamed = PostgreSQL 19: "
    "MAINTENANCE|FULL|USE_BATCHING block-range stream from block 0; unstreamed = PostgreSQL 18), then the "
    "revmap walk of brinsummarize",
    params=_COMMON_PARAMS,
)
def brinvacuumcleanup(
    ctx: ScanContext, rel: Relation, *, streamed: bool, buffer_usage_limit: int | None = None
) -> dict[str, Any]:
    return _bulkdelete_then_cleanup(
        ctx,
        rel,
        "brin",
        streamed=streamed,
        buffer_usage_limit=buffer_usage_limit,
        opts=IndexVacuumOptions(streams_of_19=True),
    )
