"""GIN bulk delete and cleanup (``ginvacuum.c``): ``ginbulkdelete`` / ``ginvacuumcleanup``.

* ``ginbulkdelete``: ``ginInsertCleanup`` first empties the pending list (one metapage read,
  ``ReadBuffer`` without strategy, when the list is empty): on the first call of a VACUUM in 18
  and 19, on every call in 20devel (the pending list may hold TIDs VACUUM now removes). Then the
  entry tree is walked: from the root (block 1) down the leftmost downlinks to the leftmost leaf,
  and along the leaves by their right links, one ``ReadBufferExtended(..., gvs->strategy)``
  each, with ``vacuum_delay_point`` between leaves. ``ginVacuumEntryPage`` drops the dead TIDs
  of each posting list; a page that lost any is WAL-logged (``xlogVacuumPage``). No posting
  trees in the model's GIN indexes (one TID per key), so ``ginVacuumPostingTree`` and the
  18/19 differences inside it never run. This walk is one block at a time in every version.
* ``ginvacuumcleanup``: when no bulk delete ran, ``ginInsertCleanup`` as above; then every block
  from the root to the end: PostgreSQL 19 through a block-range stream (``MAINTENANCE | FULL |
  USE_BATCHING``, ``info->strategy``), 18 one ``ReadBufferExtended`` each; free pages would go
  to the FSM (a built index has none); ``ginUpdateStats`` reads, dirties and WAL-logs the
  metapage; ``IndexFreeSpaceMapVacuum`` (no FSM fork: nothing read).
"""

from __future__ import annotations

from typing import Any

from ..buffers.strategy import BufferAccessStrategy
from ..relations.gin import GIN_ROOT_BLKNO
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._maint import DeadItems, IndexBulkDeleteResult, vacuum_delay_point
from .base import ScanContext, register_scan
from .index_vacuum import (
    _COMMON_PARAMS,
    IndexVacuumOptions,
    _bulkdelete_then_cleanup,
    _content,
    _dead_entries,
    _visit,
    block_range_pass,
    heap_dead_items,
    index_fsm_vacuum,
)

__all__ = ["ginvacuum", "ambulkdelete", "amvacuumcleanup"]

GIN_METAPAGE_BLKNO = 0


def _gin_insert_cleanup(ctx: ScanContext, index: Relation) -> None:
    """``ginInsertCleanup`` with an empty pending list: the metapage, read and released."""
    be = ctx.backend
    be.release_buffer(be.read_buffer(index, GIN_METAPAGE_BLKNO, ForkNumber.MAIN, None))


def ambulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult:
    """``ginbulkdelete``: the entry tree's leaves, left to right, one page at a time."""
    be = ctx.backend
    content = _content(index)
    if stats is None:
        stats = IndexBulkDeleteResult()
        if not ctx.version_at_least("20devel"):
            _gin_insert_cleanup(ctx, index)  # first time through (18, 19)
    if ctx.version_at_least("20devel"):
        _gin_insert_cleanup(ctx, index)  # every call, before vacuuming proper (20devel)
    stats.num_index_tuples = 0
    blkno = GIN_ROOT_BLKNO
    buf = be.read_buffer(index, blkno, ForkNumber.MAIN, strategy)
    page = content.page(ForkNumber.MAIN, blkno)
    while not page.is_leaf:  # find the leftmost leaf
        blkno = int(page.children[0])
        be.release_buffer(buf)
        buf = be.read_buffer(index, blkno, ForkNumber.MAIN, strategy)
        page = content.page(ForkNumber.MAIN, blkno)
    while True:
        _visit(ctx, blkno, page.nentries)
        ndel = _dead_entries(page, dead)  # ginVacuumEntryPage
        if ndel:
            be.mark_buffer_dirty(buf, wal_logged=True)  # xlogVacuumPage
            stats.tuples_removed += ndel
        stats.num_index_tuples += page.nentries - ndel
        blkno = page.right
        be.release_buffer(buf)
        vacuum_delay_point(be)
        if blkno == InvalidBlockNumber:
            break
        buf = be.read_buffer(index, blkno, ForkNumber.MAIN, strategy)
        page = content.page(ForkNumber.MAIN, blkno)
    return stats


def amvacuumcleanup(
    ctx: ScanContext,
    index: Relation,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult | None:
    """``ginvacuumcleanup``: every page from the root (streamed from 19), then the metapage."""
    be = ctx.backend
    content = _content(index)
    if stats is None:
        stats = IndexBulkDeleteResult()
        _gin_insert_cleanup(ctx, index)
    # num_index_tuples = info->num_heap_tuples: the heap's live tuples, i.e. the entries that
    # do not point to dead tuples.
    heap = content.heap
    nheap = heap.rel.nblocks(ForkNumber.MAIN) if heap.rel is not None else heap.spec.nblocks
    stats.num_index_tuples = heap.total_entries() - heap_dead_items(heap, nheap).num_items
    npages = index.nblocks(ForkNumber.MAIN)
    counts = {"entry_pages": 0, "entries": 0}

    def page_fn(buf: int, blkno: int) -> None:
        page = content.page(ForkNumber.MAIN, blkno)
        _visit(ctx, blkno, page.nentries)
        counts["entry_pages"] += 1
        if page.is_leaf:
            counts["entries"] += page.nentries
        be.release_buffer(buf)

    block_range_pass(ctx, index, GIN_ROOT_BLKNO, npages, strategy, streamed and opts.streams_of_19, page_fn)
    # ginUpdateStats: the metapage, exclusively locked, updated and WAL-logged.
    buf = be.read_buffer(index, GIN_METAPAGE_BLKNO, ForkNumber.MAIN, None)
    be.mark_buffer_dirty(buf, wal_logged=True)
    be.release_buffer(buf)
    index_fsm_vacuum(ctx, index)
    stats.pages_free = 0
    stats.num_pages = index.nblocks(ForkNumber.MAIN)
    ctx.notes["gin_entry_pages"] = counts["entry_pages"]
    return stats


@register_scan(
    "ginvacuum",
    streamed_since="19",
    models="ginbulkdelete → ginVacuumEntryPage, then ginvacuumcleanup → ginUpdateStats (ginvacuum.c)",
    description="GIN bulk delete of the heap's dead TIDs along the entry tree's leaves (one page at a time "
    "in every version), then the cleanup pass over every page (streamed = PostgreSQL 19: MAINTENANCE|FULL|"
    "USE_BATCHING block-range stream; unstreamed = PostgreSQL 18)",
    params=_COMMON_PARAMS,
)
def ginvacuum(
    ctx: ScanContext, rel: Relation, *, streamed: bool, buffer_usage_limit: int | None = None
) -> dict[str, Any]:
    return _bulkdelete_then_cleanup(
        ctx,
        rel,
        "gin",
        streamed=streamed,
        buffer_usage_limit=buffer_usage_limit,
        opts=IndexVacuumOptions(streams_of_19=True),
    )
