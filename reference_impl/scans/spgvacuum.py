"""SP-GiST bulk delete and cleanup (``spgvacuum.c``): ``spgbulkdelete`` / ``spgvacuumcleanup``.

Both run ``spgvacuumscan``: ``initSpGistState`` reads the metapage into the relcache the first
time this backend needs it (``spgGetCache``, ``ReadBuffer``, no strategy); then every block but
the metapage, in physical order, through a block-range stream (PostgreSQL 18 on:
``MAINTENANCE | FULL | USE_BATCHING``, ``info->strategy``) that is reset and continued when the
index grew meanwhile (as ``btvacuumscan``). Unstreamed is PostgreSQL 17's
``ReadBufferExtended(..., info->strategy)`` per block. ``spgvacuumpage``: a leaf page other than
the roots loses its dead entries (``vacuumLeafPage``, then ``vacuumRedirectAndPlaceholder``
removes the placeholders at its end, so a leaf whose entries all died becomes empty: it is
recorded in the FSM, ``RecordFreeIndexPage``, and counted deleted); inner pages and the roots
lose nothing (no redirects in a built index). Then ``SpGistUpdateMetaPage`` reads and dirties
the metapage (``ReadBuffer``, no strategy), and the FSM is vacuumed if any page was deleted.
``spgvacuumcleanup`` scans again only when no bulk delete ran. The same in 18, 19 and 20devel.
"""

from __future__ import annotations

from typing import Any

from ..buffers.strategy import BufferAccessStrategy
from ..relations.spgist import SPGIST_LAST_FIXED_BLKNO
from ..storage.relation import ForkNumber, Relation
from ._maint import DeadItems, IndexBulkDeleteResult
from .base import ScanContext, ScanParam, register_scan
from .index_vacuum import (
    _COMMON_PARAMS,
    IndexVacuumOptions,
    _block_range_scan,
    _bulkdelete_then_cleanup,
    _content,
    _dead_entries,
    _visit,
    index_fsm_vacuum,
    read_metapage_once,
    record_free_index_page,
)

__all__ = ["spgvacuumscan", "ambulkdelete", "amvacuumcleanup"]

SPGIST_METAPAGE_BLKNO = 0


def _spgvacuumscan(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems | None,
    stats: IndexBulkDeleteResult,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
) -> None:
    """``spgvacuumscan`` (``dead`` None: ``spgvacuumcleanup``'s pass that deletes nothing)."""
    be = ctx.backend
    content = _content(index)
    read_metapage_once(ctx, index, SPGIST_METAPAGE_BLKNO)  # initSpGistState -> spgGetCache
    stats.estimated_count = False
    stats.num_index_tuples = 0
    stats.pages_deleted = 0

    def spgvacuumpage(buf: int) -> None:
        blkno = be.buffer_block(buf)
        page = content.page(ForkNumber.MAIN, blkno)
        _visit(ctx, blkno, page.nentries)
        is_root = blkno <= SPGIST_LAST_FIXED_BLKNO  # SpGistBlockIsRoot
        empty = page.nentries == 0
        if page.is_leaf and not empty:
            ndel = _dead_entries(page, dead) if dead is not None else 0
            if ndel:
                be.mark_buffer_dirty(buf, wal_logged=True)  # vacuumLeafPage (or vacuumLeafRoot)
                stats.tuples_removed += ndel
            stats.num_index_tuples += page.nentries - ndel
            empty = ndel == page.nentries and not is_root
        if not is_root and page.is_leaf and empty:
            record_free_index_page(ctx, index, blkno)
            stats.pages_deleted += 1
        be.release_buffer(buf)

    num_pages = _block_range_scan(ctx, index, SPGIST_METAPAGE_BLKNO + 1, strategy, streamed, spgvacuumpage)
    # SpGistUpdateMetaPage: the lastUsedPages cache goes to the metapage (not WAL-logged).
    buf = be.read_buffer(index, SPGIST_METAPAGE_BLKNO, ForkNumber.MAIN, None)
    be.mark_buffer_dirty(buf)
    be.release_buffer(buf)
    if stats.pages_deleted > 0:
        index_fsm_vacuum(ctx, index)
    stats.num_pages = num_pages
    stats.pages_newly_deleted = stats.pages_deleted
    stats.pages_free = stats.pages_deleted


def ambulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult:
    """``spgbulkdelete``."""
    if stats is None:
        stats = IndexBulkDeleteResult()
    _spgvacuumscan(ctx, index, dead, stats, strategy, streamed)
    return stats


def amvacuumcleanup(
    ctx: ScanContext,
    index: Relation,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult | None:
    """``spgvacuumcleanup``: a scan that deletes nothing when no bulk delete ran."""
    if stats is None:
        stats = IndexBulkDeleteResult()
        _spgvacuumscan(ctx, index, None, stats, strategy, streamed)
    return stats


@register_scan(
    "spgvacuumscan",
    streamed_since="18",
    models="spgbulkdelete / spgvacuumcleanup → spgvacuumscan → spgvacuumpage (spgvacuum.c)",
    description="SP-GiST bulk delete of the heap's dead TIDs with the VACUUM ring (streamed = PostgreSQL 18 "
    "on: block-range stream from block 1, reset when the index grew; unstreamed = PostgreSQL 17)",
    params=(
        *_COMMON_PARAMS,
        ScanParam("metapage_cached", bool, False, "the backend has the metapage in its relcache"),
    ),
)
def spgvacuumscan(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    buffer_usage_limit: int | None = None,
    metapage_cached: bool = False,
) -> dict[str, Any]:
    if metapage_cached:
        ctx.amcache.add(rel.name)
    return _bulkdelete_then_cleanup(
        ctx,
        rel,
        "spgist",
        streamed=streamed,
        buffer_usage_limit=buffer_usage_limit,
        opts=IndexVacuumOptions(),
    )
