"""bloom (``contrib/bloom``): ``blgetbitmap`` and ``blbulkdelete`` / ``blvacuumcleanup``.

A bloom index is read whole by every scan and every VACUUM (``blscan.c``, ``blvacuum.c``):

* ``initBloomState`` (``blbeginscan``, ``blbulkdelete``) reads the metapage into the relcache
  the first time this backend needs it (``ReadBuffer``, no strategy).
* ``blgetbitmap``: every block from ``BLOOM_HEAD_BLKNO`` (1) to the end with a BULKREAD ring,
  each page's signatures compared with the search signature, ``CHECK_FOR_INTERRUPTS`` after
  each page. PostgreSQL 19 reads them through a block-range stream (``READ_STREAM_FULL |
  USE_BATCHING``), 18 one ``ReadBufferExtended`` each. The heap pages of the matches are the
  bitmap heap scan's (``bitmapscan``); which signatures match, false positives included,
  depends on the opclass's hash and is not modelled: the answer counts the pages and
  signatures examined.
* ``blbulkdelete``: the same pages with the VACUUM ring (19: ``MAINTENANCE | FULL |
  USE_BATCHING``), ``vacuum_delay_point`` before each; a page that lost signatures is WAL-logged
  (``GenericXLogFinish``), one that lost them all is marked deleted; then the metapage's list
  of not-full pages is rewritten (``ReadBuffer``, no strategy, WAL-logged).
* ``blvacuumcleanup`` (always, not only without a bulk delete): the same pass again; deleted
  pages go to the FSM (``RecordFreeIndexPage``), and ``IndexFreeSpaceMapVacuum`` walks it.
"""

from __future__ import annotations

from typing import Any

from ..buffers.strategy import BAS_BULKREAD, BufferAccessStrategy, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import READ_STREAM_FULL, READ_STREAM_USE_BATCHING
from ..storage.relation import ForkNumber, Relation
from ._maint import DeadItems, IndexBulkDeleteResult
from .base import ScanContext, ScanParam, register_scan
from .index_vacuum import (
    _COMMON_PARAMS,
    IndexVacuumOptions,
    _bulkdelete_then_cleanup,
    _content,
    _dead_entries,
    _visit,
    block_range_pass,
    index_fsm_vacuum,
    index_kind,
    read_metapage_once,
    record_free_index_page,
)

__all__ = ["blgetbitmap", "blbulkdelete", "ambulkdelete", "amvacuumcleanup"]

BLOOM_METAPAGE_BLKNO = 0
BLOOM_HEAD_BLKNO = 1


def _removed(ctx: ScanContext, index: Relation) -> dict[int, int]:
    """Signatures this command's bulk deletes removed, per page (a page that lost them all is
    marked deleted, ``BloomPageSetDeleted``)."""
    state: dict[int, int] = ctx.amstate.setdefault(f"bloom_removed:{index.name}", {})
    return state


def ambulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult:
    """``blbulkdelete``."""
    be = ctx.backend
    content = _content(index)
    if stats is None:
        stats = IndexBulkDeleteResult()
    read_metapage_once(ctx, index, BLOOM_METAPAGE_BLKNO)  # initBloomState
    npages = index.nblocks(ForkNumber.MAIN)
    removed = _removed(ctx, index)

    def page_fn(buf: int, blkno: int) -> None:
        page = content.page(ForkNumber.MAIN, blkno)
        _visit(ctx, blkno, page.nentries)
        if removed.get(blkno, 0) == page.nentries:  # ignore deleted pages until blvacuumcleanup()
            be.release_buffer(buf)
            return
        ndel = _dead_entries(page, dead)
        stats.tuples_removed += ndel
        if ndel:
            removed[blkno] = removed.get(blkno, 0) + ndel  # all gone: BloomPageSetDeleted
            be.mark_buffer_dirty(buf, wal_logged=True)  # GenericXLogFinish
        be.release_buffer(buf)

    block_range_pass(ctx, index, BLOOM_HEAD_BLKNO, npages, strategy, streamed and opts.streams_of_19, page_fn)
    # The metapage's notFullPage list, rewritten with generic WAL.
    buf = be.read_buffer(index, BLOOM_METAPAGE_BLKNO, ForkNumber.MAIN, None)
    be.mark_buffer_dirty(buf, wal_logged=True)
    be.release_buffer(buf)
    return stats


def amvacuumcleanup(
    ctx: ScanContext,
    index: Relation,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult | None:
    """``blvacuumcleanup``: every page again; deleted ones go to the FSM."""
    be = ctx.backend
    content = _content(index)
    if stats is None:
        stats = IndexBulkDeleteResult()
    npages = index.nblocks(ForkNumber.MAIN)
    stats.num_pages = npages
    stats.pages_free = 0
    stats.num_index_tuples = 0
    removed = _removed(ctx, index)

    def page_fn(buf: int, blkno: int) -> None:
        page = content.page(ForkNumber.MAIN, blkno)
        _visit(ctx, blkno, page.nentries)
        left = page.nentries - removed.get(blkno, 0)  # BloomPageGetMaxOffset
        if left == 0 and page.nentries:  # BloomPageIsDeleted
            record_free_index_page(ctx, index, blkno)
            stats.pages_free += 1
        else:
            stats.num_index_tuples += left
        be.release_buffer(buf)

    block_range_pass(ctx, index, BLOOM_HEAD_BLKNO, npages, strategy, streamed and opts.streams_of_19, page_fn)
    index_fsm_vacuum(ctx, index)
    return stats


@register_scan(
    "blbulkdelete",
    streamed_since="19",
    models="blbulkdelete, then blvacuumcleanup (contrib/bloom/blvacuum.c)",
    description="bloom's part of a VACUUM: every page twice with the VACUUM ring (streamed = PostgreSQL 19: "
    "MAINTENANCE|FULL|USE_BATCHING block-range streams from block 1; unstreamed = PostgreSQL 18)",
    params=(
        *_COMMON_PARAMS,
        ScanParam("metapage_cached", bool, False, "the backend has the metapage in its relcache"),
    ),
)
def blbulkdelete(
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
        "bloom",
        streamed=streamed,
        buffer_usage_limit=buffer_usage_limit,
        opts=IndexVacuumOptions(streams_of_19=True),
    )


@register_scan(
    "blgetbitmap",
    streamed_since="19",
    models="blbeginscan → initBloomState, blgetbitmap (contrib/bloom/blscan.c)",
    description="a bloom index scan: every page with a BULKREAD ring (streamed = PostgreSQL 19: FULL|"
    "USE_BATCHING block-range stream from block 1; unstreamed = PostgreSQL 18)",
    params=(ScanParam("metapage_cached", bool, False, "the backend has the metapage in its relcache"),),
)
def blgetbitmap(
    ctx: ScanContext, rel: Relation, *, streamed: bool, metapage_cached: bool = False
) -> dict[str, Any]:
    from .. import begin_stream
    from ..read_stream import BlockRangeReadStreamPrivate, block_range_read_stream_cb

    be = ctx.backend
    if index_kind(rel) != "bloom":
        raise ModelUsageError(
            f"blgetbitmap: relation {rel.name!r} is a {index_kind(rel)} index: allowed a bloom index"
        )
    content = _content(rel)
    if metapage_cached:
        ctx.amcache.add(rel.name)
    read_metapage_once(ctx, rel, BLOOM_METAPAGE_BLKNO)  # blbeginscan -> initBloomState
    bas = get_access_strategy(BAS_BULKREAD, ctx.settings)
    npages = rel.nblocks(ForkNumber.MAIN)
    stream = None
    if streamed:
        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(BLOOM_HEAD_BLKNO, npages),
            flags=READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=bas,
        )
        ctx.track_stream(stream)
    signatures = 0
    for blkno in range(BLOOM_HEAD_BLKNO, npages):
        if stream is not None:
            buf = stream.next_buffer()
        else:
            buf = be.read_buffer(rel, blkno, ForkNumber.MAIN, bas)
        page = content.page(ForkNumber.MAIN, blkno)
        _visit(ctx, blkno, page.nentries)
        signatures += page.nentries
        be.release_buffer(buf)
        be.check_for_interrupts()
    if stream is not None:
        if stream.next_buffer() >= 0:  # Assert(... == InvalidBuffer)
            raise ModelUsageError(f"the block-range stream of {rel.name!r} went past block {npages - 1}")
        stream.end()
    if bas is not None:
        bas.free()  # FreeAccessStrategy
    return {"pages": max(npages - BLOOM_HEAD_BLKNO, 0), "signatures": signatures}
