"""``contrib/pg_visibility``: the visibility map of a table, with or without its pages.

Five functions read a table this way (``pg_visibility.c``):

* ``pg_visibility_map_rel(t)`` and ``pg_visibility_rel(t)`` (``collect_visibility_data``): for
  every block ``0 .. nblocks - 1``, ``visibilitymap_get_status`` (the VM page stays pinned in
  ``vmbuffer``; one ``normal`` read per VM page), and, for ``pg_visibility_rel`` only
  (``include_pd``), the heap page itself for its ``PD_ALL_VISIBLE`` flag. PostgreSQL 18, 19 and
  20devel read those pages through a block-range stream (``READ_STREAM_FULL |
  USE_BATCHING``, BULKREAD), one ``read_stream_next_buffer`` per block of the loop, then
  ``Assert(read_stream_next_buffer(stream, NULL) == InvalidBuffer)``; the unstreamed variant is
  PostgreSQL 17's ``ReadBufferExtended(..., bstrategy)`` per block.
* ``pg_visibility_map_summary(t)``: the counts of all-visible and all-frozen blocks. PostgreSQL
  18 asks ``visibilitymap_get_status`` for each block ``0 .. nblocks - 1``; 19 and 20devel call
  ``visibilitymap_count``, which reads every page of the VM fork until it falls off its end
  (and counts the bits of all of them).
* ``pg_check_visible(t)`` and ``pg_check_frozen(t)`` (``collect_corrupt_items``): a stream
  (``READ_STREAM_FULL``, no batching, BULKREAD) whose callback
  (``collect_corrupt_items_read_stream_next_block``) returns only the blocks the VM marks
  all-visible (resp. all-frozen), reading the VM with its own ``vmbuffer``; the consumer checks
  the VM again with a second ``vmbuffer`` (a hit on the same VM page) and examines every tuple:
  ``HeapTupleSatisfiesVacuum`` for the visible check (it sets hint bits, dirtying a page not
  hinted yet), ``heap_tuple_needs_eventual_freeze`` for the frozen one. Unstreamed is the same
  decision made in the loop, one ``ReadBufferExtended`` per chosen block (PostgreSQL 17).

A synthetic table's VM bits agree with its pages (an all-visible page holds only live, hinted
or hintable tuples; an all-frozen one only frozen tuples), so the corrupt-item lists are empty;
what the model computes is which pages are read, in which order, through which ring.
"""

from __future__ import annotations

from typing import Any

from ..buffers.strategy import BAS_BULKREAD, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._forkmaps import VM_ALL_FROZEN, VM_ALL_VISIBLE, VMBuffer, visibilitymap_count
from ._pageview import HeapView, take_hint_bits
from .base import ScanContext, ScanParam, register_scan

__all__ = [
    "pg_visibility_rel",
    "pg_visibility_map_rel",
    "pg_visibility_map_summary",
    "pg_check_visible",
    "pg_check_frozen",
]


def _check_relation_relkind(rel: Relation) -> HeapView:
    """``check_relation_relkind``: only relations with a table AM have a visibility map."""
    if getattr(rel.content, "kind", None) not in (None, "heap"):
        raise ModelUsageError(
            f'relation "{rel.name}" is of wrong relation kind: pg_visibility reads tables only'
        )
    return HeapView(rel)


def _collect_visibility_data(
    ctx: ScanContext, rel: Relation, streamed: bool, include_pd: bool
) -> dict[str, Any]:
    """``collect_visibility_data``: the VM bits of every block, and the page's bit if asked."""
    from .. import begin_stream

    be = ctx.backend
    heap = _check_relation_relkind(rel)
    bstrategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    nblocks = rel.nblocks(ForkNumber.MAIN)
    vm = VMBuffer(be, rel, heap.vm_flags)
    stream = None
    if include_pd and streamed:
        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(0, nblocks),
            flags=READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=bstrategy,
        )
        ctx.track_stream(stream)
    all_visible = all_frozen = pd_all_visible = 0
    for blkno in range(nblocks):
        be.check_for_interrupts()
        mapbits = vm.status(blkno)
        all_visible += bool(mapbits & VM_ALL_VISIBLE)
        all_frozen += bool(mapbits & VM_ALL_FROZEN)
        if include_pd:
            if stream is not None:
                buffer = stream.next_buffer()
            else:
                buffer = be.read_buffer(rel, blkno, ForkNumber.MAIN, bstrategy)
            page = heap.page(blkno)
            ctx.visit(blkno)
            ctx.process_page(0)
            pd_all_visible += page.all_visible  # PageIsAllVisible
            be.release_buffer(buffer)
    if stream is not None:
        if stream.next_buffer() >= 0:  # Assert(... == InvalidBuffer)
            raise ModelUsageError(f"the block-range stream of {rel.name!r} went past block {nblocks - 1}")
        stream.end()
    vm.release()
    out = {"blocks": nblocks, "all_visible": all_visible, "all_frozen": all_frozen}
    if include_pd:
        out["pd_all_visible"] = pd_all_visible
    return out


@register_scan(
    "pg_visibility_rel",
    streamed_since="18",
    models="pg_visibility_rel → collect_visibility_data(include_pd) (contrib/pg_visibility/pg_visibility.c)",
    description="the VM bits and PD_ALL_VISIBLE of every block: streamed = PostgreSQL 18 on "
    "(FULL|USE_BATCHING block-range stream, BULKREAD), unstreamed = PostgreSQL 17 (ReadBufferExtended per block)",
)
def pg_visibility_rel(ctx: ScanContext, rel: Relation, *, streamed: bool) -> dict[str, Any]:
    return _collect_visibility_data(ctx, rel, streamed, include_pd=True)


@register_scan(
    "pg_visibility_map_rel",
    models="pg_visibility_map_rel → collect_visibility_data (contrib/pg_visibility/pg_visibility.c)",
    description="the VM bits of every block (visibilitymap_get_status; no heap page is read, so "
    "no version streams it)",
    variants=("unstreamed",),
)
def pg_visibility_map_rel(ctx: ScanContext, rel: Relation, *, streamed: bool) -> dict[str, Any]:
    return _collect_visibility_data(ctx, rel, streamed, include_pd=False)


@register_scan(
    "pg_visibility_map_summary",
    models="pg_visibility_map_summary (contrib/pg_visibility/pg_visibility.c; 19 on: visibilitymap_count)",
    description="all-visible and all-frozen counts: 18 asks the VM about each block 0..nblocks-1, 19 and "
    "20devel read every VM page with visibilitymap_count",
    variants=("unstreamed",),
)
def pg_visibility_map_summary(ctx: ScanContext, rel: Relation, *, streamed: bool) -> dict[str, Any]:
    be = ctx.backend
    heap = _check_relation_relkind(rel)
    if ctx.version_at_least("19"):
        # visibilitymap_count(rel, &all_visible, &all_frozen): every page of the VM fork (the
        # bits of blocks past the heap's end are zero).
        all_visible, all_frozen = visibilitymap_count(be, rel, heap.vm_counts, rel.nblocks(ForkNumber.MAIN))
        return {"all_visible": all_visible, "all_frozen": all_frozen}
    nblocks = rel.nblocks(ForkNumber.MAIN)
    vm = VMBuffer(be, rel, heap.vm_flags)
    all_visible = all_frozen = 0
    for blkno in range(nblocks):
        be.check_for_interrupts()
        mapbits = vm.status(blkno)
        all_visible += bool(mapbits & VM_ALL_VISIBLE)
        all_frozen += bool(mapbits & VM_ALL_FROZEN)
    vm.release()
    return {"all_visible": all_visible, "all_frozen": all_frozen}


def _collect_corrupt_items(
    ctx: ScanContext, rel: Relation, streamed: bool, all_visible: bool, all_frozen: bool, data_checksums: bool
) -> dict[str, Any]:
    """``collect_corrupt_items``: the pages the VM calls all-visible (or all-frozen), checked."""
    from .. import begin_stream

    be = ctx.backend
    heap = _check_relation_relkind(rel)
    bstrategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    last_exclusive = rel.nblocks(ForkNumber.MAIN)
    cb_vm = VMBuffer(be, rel, heap.vm_flags)  # p.vmbuffer
    vm = VMBuffer(be, rel, heap.vm_flags)  # the consumer's vmbuffer
    current = [0]

    def collect_corrupt_items_read_stream_next_block(stream: Any, private: Any) -> int:
        """The next block the VM marks as the check needs (checking interrupts per block)."""
        while current[0] < last_exclusive:
            blkno = current[0]
            be.check_for_interrupts()
            check_frozen = all_frozen and bool(cb_vm.status(blkno) & VM_ALL_FROZEN)
            check_visible = all_visible and bool(cb_vm.status(blkno) & VM_ALL_VISIBLE)
            current[0] = blkno + 1
            if check_visible or check_frozen:
                return blkno
        return InvalidBlockNumber

    stream = None
    if streamed:
        stream = begin_stream(
            be,
            rel,
            collect_corrupt_items_read_stream_next_block,
            None,
            flags=READ_STREAM_FULL,
            strategy=bstrategy,
        )
        ctx.track_stream(stream)
    checked = 0
    corrupt = 0
    while True:
        if stream is not None:
            buffer = stream.next_buffer()
            if buffer < 0:
                break
            blkno = be.buffer_block(buffer)
        else:
            blkno = collect_corrupt_items_read_stream_next_block(None, None)
            if blkno == InvalidBlockNumber:
                break
            buffer = be.read_buffer(rel, blkno, ForkNumber.MAIN, bstrategy)
        be.check_for_interrupts()
        page = heap.page(blkno)
        ctx.visit(blkno)
        # The VM bits might have changed while the page lock was taken: checked again.
        check_frozen = all_frozen and bool(vm.status(blkno) & VM_ALL_FROZEN)
        check_visible = all_visible and bool(vm.status(blkno) & VM_ALL_VISIBLE)
        if not check_visible and not check_frozen:
            be.release_buffer(buffer)
            continue
        checked += 1
        ntuples = page.nlive + page.ndead
        ctx.process_page(ntuples)
        # Dead line pointers are neither all-visible nor frozen (none on an all-visible page).
        corrupt += page.ndead
        if check_visible and ntuples and take_hint_bits(rel, page):
            # tuple_all_visible -> HeapTupleSatisfiesVacuum -> SetHintBits: MarkBufferDirtyHint
            be.mark_buffer_dirty(buffer, wal_logged=data_checksums)
        be.release_buffer(buffer)
    if stream is not None:
        stream.end()
    vm.release()
    cb_vm.release()
    return {"corrupt_items": corrupt, "checked_pages": checked}


_CHECK_PARAMS = (
    ScanParam("data_checksums", bool, True, "data checksums on: first hint-bit changes are WAL-logged"),
)


@register_scan(
    "pg_check_visible",
    streamed_since="18",
    models="pg_check_visible → collect_corrupt_items(all_visible) (contrib/pg_visibility/pg_visibility.c)",
    description="every page the VM marks all-visible, its tuples checked with HeapTupleSatisfiesVacuum: "
    "streamed = PostgreSQL 18 on (FULL stream, VM-driven callback, BULKREAD), unstreamed = PostgreSQL 17",
    params=_CHECK_PARAMS,
)
def pg_check_visible(
    ctx: ScanContext, rel: Relation, *, streamed: bool, data_checksums: bool = True
) -> dict[str, Any]:
    return _collect_corrupt_items(ctx, rel, streamed, True, False, data_checksums)


@register_scan(
    "pg_check_frozen",
    streamed_since="18",
    models="pg_check_frozen → collect_corrupt_items(all_frozen) (contrib/pg_visibility/pg_visibility.c)",
    description="every page the VM marks all-frozen, its tuples checked for eventual freezing: "
    "streamed = PostgreSQL 18 on (FULL stream, VM-driven callback, BULKREAD), unstreamed = PostgreSQL 17",
    params=_CHECK_PARAMS,
)
def pg_check_frozen(
    ctx: ScanContext, rel: Relation, *, streamed: bool, data_checksums: bool = True
) -> dict[str, Any]:
    return _collect_corrupt_items(ctx, rel, streamed, False, True, data_checksums)
