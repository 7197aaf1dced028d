"""amcheck: ``verify_heapam`` (streamed in PostgreSQL 18) and ``bt_index_check`` (not streamed).

Two checkers from ``contrib/amcheck`` with very different read patterns.

**verify_heapam** (``verify_heapam.c``) checks every tuple of ``[first_block, last_block]`` of a
table (default the whole main fork). It always creates its own BULKREAD ring
(``GetAccessStrategy(BAS_BULKREAD)``), whatever the table's size, so even a small table is read
in context ``bulkread`` and only the ring's pages stay resident. An empty table returns before
any of that. PostgreSQL 18 reads through a stream: with the default ``skip => 'none'`` a
``block_range_read_stream_cb`` stream flagged ``SEQUENTIAL | FULL | USE_BATCHING`` (full-size
reads from the first I/O, no advice); with ``'all-visible'`` / ``'all-frozen'`` a callback that
looks up each block's visibility-map bits (``visibilitymap_get_status``, the VM page kept pinned
in ``vmbuffer`` and read without a strategy, in context ``normal``) and skips the matching
blocks, flags ``DEFAULT``. Each buffer is share-locked, checked and released before the next is
asked for. The unstreamed variant is PostgreSQL 16's loop: the same VM test per block, then
``ReadBufferExtended(RBM_NORMAL, ring)``. Checks here are the structural ones a synthetic page can
fail (line-pointer count and placement, dead items inside the line-pointer array); the answer
counts pages checked, tuples examined and corruption rows (none for a well-formed relation).

**bt_index_check** (``verify_nbtree.c``) walks a btree in *logical* order, one page per read:

1. ``_bt_metaversion`` needs the metapage contents. If this backend's relcache has not cached
   them yet (``rd_amcache``: no earlier index scan planning, ``bt_index_check``, ... on this index
   in the session) block 0 is read **without** a strategy (context ``normal``, it stays in the
   pool); if cached, nothing is read. That is session state, so it is a parameter
   (``metapage_cached``).
2. ``bt_check_every_level`` creates an explicit BULKREAD ring (any index size) and reads the
   metapage again through it (a hit if step 1 just read it).
3. From the true root, level by level, each level from its leftmost page along the right links
   (``bt_check_level_from_leftmost``): every page is read through the ring, copied and released
   (``palloc_btree_page``); checking a page's last item reads its right sibling too
   (``bt_right_page_check_scankey``), which then is a hit when the walk moves to it.
4. With ``heapallindexed`` the table is then read by ``table_index_build_scan`` through an
   ordinary sequential scan (strategy and sync scan allowed, no tuple slot): PostgreSQL 18's
   streamed heap scan.

Only the unstreamed form exists in PostgreSQL 18 and master, and a streamed prototype of the
index walk is not offered: a read stream needs its block numbers *before* the consumer reaches
them, while this walk learns the next page of a level (the right link) and the first page of the
next level (the first downlink) only by reading the current page. The callback would have to read
pages itself, or be paused at each page (master's ``read_stream_pause``), which leaves one block
of look-ahead: the same one-block reads. The scan is therefore registered with the
``unstreamed`` variant only; its heap part (``heapallindexed``) is streamed as in PostgreSQL 18.
"""

from __future__ import annotations

from typing import Any

from ..buffers.bufmgr import Backend
from ..buffers.strategy import BAS_BULKREAD, BufferAccessStrategy, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_DEFAULT,
    READ_STREAM_FULL,
    READ_STREAM_SEQUENTIAL,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import BLCKSZ, ForkNumber, InvalidBlockNumber, Relation
from ._forkmaps import VM_ALL_FROZEN, VM_ALL_VISIBLE, VMBuffer
from ._pageview import HeapView
from .base import ScanContext, ScanParam, register_scan
from .heapscan import HeapScan

__all__ = ["verify_heapam", "bt_index_check", "VERIFY_HEAPAM_FLAGS", "SKIP_OPTIONS"]

VERIFY_HEAPAM_FLAGS = READ_STREAM_SEQUENTIAL | READ_STREAM_FULL | READ_STREAM_USE_BATCHING
SKIP_OPTIONS = ("none", "all-visible", "all-frozen")

_MAX_HEAP_TUPLES_PER_PAGE = 291  # MaxHeapTuplesPerPage for 8 kB pages
_PAGE_HEADER = 24  # SizeOfPageHeaderData
_ITEM_ID = 4  # sizeof(ItemIdData)


def _maxalign(n: int) -> int:
    return (n + 7) & ~7


# ---------------------------------------------------------------------------------- verify_heapam
class _HeapChecker:
    """The per-page part of ``verify_heapam``: structural checks of one page's line pointers."""

    def __init__(self, rel: Relation) -> None:
        self.content: Any = rel.content
        self.view = HeapView(rel)
        self.tuples = 0
        self.corruption: list[tuple[int, str]] = []

    def check(self, block: int) -> int:
        """Check page ``block``; returns the number of line pointers examined."""
        content = self.content
        if content is None:
            return 1
        page = content.page(ForkNumber.MAIN, block)
        maxoff = int(page.max_offset)
        ndead = int(page.ndead)
        tuple_len = int(getattr(page, "tuple_len", self.view.tuple_len))
        report = self.corruption.append
        if maxoff > _MAX_HEAP_TUPLES_PER_PAGE:
            report((block, f"line pointer count {maxoff} exceeds MaxHeapTuplesPerPage"))
        if not 0 <= ndead <= maxoff:
            report((block, f"{ndead} dead items on a page of {maxoff} line pointers"))
        live = maxoff - ndead
        # Tuple data grows down from the end of the page, line pointers up from its header.
        if _PAGE_HEADER + _ITEM_ID * maxoff + live * _maxalign(tuple_len) > BLCKSZ:
            report((block, "line pointer to tuple data ends beyond maximum page offset"))
        if ndead:
            dead = page.dead_offsets
            if len(dead) != ndead or (len(dead) and (int(dead.min()) < 1 or int(dead.max()) > maxoff)):
                report((block, "dead line pointer outside the line pointer array"))
        self.tuples += live
        return maxoff


def _vm_flags(rel: Relation) -> Any:
    view = HeapView(rel)
    return view.vm_flags


def _skip_bit(skip: str) -> int:
    if skip == "all-visible":
        return VM_ALL_VISIBLE
    if skip == "all-frozen":
        return VM_ALL_FROZEN
    return 0


@register_scan(
    "verify_heapam",
    streamed_since="18",
    models="verify_heapam (contrib/amcheck/verify_heapam.c)",
    description=(
        "amcheck heap verification; streamed = PostgreSQL 18 (SEQUENTIAL|FULL|USE_BATCHING, or a "
        "VM-skipping callback with DEFAULT flags), unstreamed = PostgreSQL 16 (one ReadBuffer per block); "
        "BULKREAD ring always"
    ),
    params=(
        ScanParam("skip", str, "none", "skip all-visible or all-frozen blocks", choices=SKIP_OPTIONS),
        ScanParam("first_block", int, None, "first block (default 0)", minimum=0),
        ScanParam("last_block", int, None, "last block, inclusive (default the last one)", minimum=0),
    ),
)
def verify_heapam(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    skip: str = "none",
    first_block: int | None = None,
    last_block: int | None = None,
) -> dict[str, Any]:
    be = ctx.backend
    nblocks = rel.nblocks(ForkNumber.MAIN)
    if nblocks == 0:
        # Early exit before the strategy and the stream are created.
        return {"pages_checked": 0, "tuples": 0, "corruption": 0, "skipped": 0}
    first = 0 if first_block is None else first_block
    last = nblocks - 1 if last_block is None else last_block
    for what, value in (("first_block", first), ("last_block", last)):
        if not 0 <= value < nblocks:
            raise ModelUsageError(
                f"{what} {value} is invalid: block numbers must be between 0 and {nblocks - 1} "
                f"({rel.name!r} has {nblocks} blocks)"
            )
    strategy = get_access_strategy(BAS_BULKREAD, be.settings)
    checker = _HeapChecker(rel)
    skip_bit = _skip_bit(skip)
    vmbuf = VMBuffer(be, rel, _vm_flags(rel)) if skip_bit else None
    skipped = 0
    pages = 0

    def next_unskippable(stream: Any, private: BlockRangeReadStreamPrivate) -> int:
        """``heapcheck_read_stream_next_unskippable`` (the VM read happens at look-ahead time)."""
        nonlocal skipped
        assert vmbuf is not None
        while True:
            b = private.current_blocknum
            if b >= private.last_exclusive:
                return InvalidBlockNumber
            private.current_blocknum = b + 1
            if vmbuf.status(b) & skip_bit:
                skipped += 1
                continue
            return b

    if streamed:
        from .. import begin_stream

        private = BlockRangeReadStreamPrivate(first, last + 1)
        if skip_bit:
            stream = begin_stream(
                be, rel, next_unskippable, private, flags=READ_STREAM_DEFAULT, strategy=strategy
            )
        else:
            stream = begin_stream(
                be, rel, block_range_read_stream_cb, private, flags=VERIFY_HEAPAM_FLAGS, strategy=strategy
            )
        ctx.track_stream(stream)
        while True:
            buf = stream.next_buffer()
            if buf < 0:
                break
            be.check_for_interrupts()
            block = be.buffer_block(buf)
            ctx.process_page(checker.check(block))
            be.release_buffer(buf)
            ctx.visit(block)
            pages += 1
        stream.end()
    else:
        for block in range(first, last + 1):
            be.check_for_interrupts()
            if vmbuf is not None and vmbuf.status(block) & skip_bit:
                skipped += 1
                continue
            buf = be.read_buffer(rel, block, ForkNumber.MAIN, strategy)
            ctx.process_page(checker.check(block))
            be.release_buffer(buf)
            ctx.visit(block)
            pages += 1
    if vmbuf is not None:
        vmbuf.release()
    return {
        "pages_checked": pages,
        "tuples": checker.tuples,
        "corruption": len(checker.corruption),
        "skipped": skipped,
    }


# ---------------------------------------------------------------------------------- bt_index_check
def _find_btree(instance: Any, rel: Relation, index: str | None) -> Relation:
    """The btree to check: ``rel`` itself, the index named ``index``, or ``rel``'s btree."""
    storage = instance.storage
    if index is not None:
        target = storage.relation(index)
    elif getattr(rel.content, "kind", None) == "btree":
        target = rel
    else:
        found = [
            r
            for r in storage.relations()
            if getattr(r.content, "kind", None) == "btree" and getattr(r.content, "heap", None) is rel.content
        ]
        if not found:
            raise ModelUsageError(
                f"relation {rel.name!r} is not a btree index and has no btree index: build it with "
                "IndexSpec('btree') or name one with index=..."
            )
        target = found[0]
    if getattr(target.content, "kind", None) != "btree":
        raise ModelUsageError(f"relation {target.name!r} is not a btree index (bt_index_check needs one)")
    return target


def _read_copy(be: Backend, rel: Relation, block: int, strategy: BufferAccessStrategy | None) -> None:
    """``palloc_btree_page``: read, lock, copy the page out, unlock and release."""
    buf = be.read_buffer(rel, block, ForkNumber.MAIN, strategy)
    be.release_buffer(buf)


@register_scan(
    "bt_index_check",
    models="bt_index_check (contrib/amcheck/verify_nbtree.c: bt_check_every_level)",
    description=(
        "amcheck btree verification in logical order, one page per read through a BULKREAD ring; "
        "PostgreSQL 18 and master read it unstreamed, and the walk cannot know its next block "
        "before reading the current page, so no streamed form is modelled"
    ),
    params=(
        ScanParam("heapallindexed", bool, False, "also scan the table (table_index_build_scan)"),
        ScanParam(
            "metapage_cached", bool, False, "the backend's relcache already holds the metapage (rd_amcache)"
        ),
        ScanParam("index", str, None, "the btree to check (default: rel, or rel's btree)"),
    ),
    variants=("unstreamed",),
)
def bt_index_check(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    heapallindexed: bool = False,
    metapage_cached: bool = False,
    index: str | None = None,
) -> dict[str, Any]:
    be = ctx.backend
    idx = _find_btree(ctx.instance, rel, index)
    content: Any = idx.content
    if not metapage_cached:
        # _bt_metaversion -> _bt_getmeta: the relcache copy is built from a plain ReadBuffer.
        _read_copy(be, idx, 0, None)
    strategy = get_access_strategy(BAS_BULKREAD, be.settings)
    _read_copy(be, idx, 0, strategy)
    ctx.visit(0)
    pages = 1
    corruption: list[tuple[int, str]] = []
    leaf_pages = 0
    index_tuples = 0
    levels = 0
    leftmost = content.root_block if getattr(content, "levels", 0) else InvalidBlockNumber
    expected_level = content.levels - 1 if leftmost != InvalidBlockNumber else -1
    while leftmost != InvalidBlockNumber:
        levels += 1
        current = leftmost
        leftcurrent = InvalidBlockNumber
        next_leftmost = InvalidBlockNumber
        first = True
        while current != InvalidBlockNumber:
            be.check_for_interrupts()
            _read_copy(be, idx, current, strategy)
            page = content.page(ForkNumber.MAIN, current)
            ctx.visit(current)
            pages += 1
            if page.level != expected_level:
                corruption.append((current, f"page level {page.level}, expected {expected_level}"))
            if page.left != leftcurrent:
                corruption.append((current, f"left link {page.left} does not point back to {leftcurrent}"))
            if first:
                if not page.is_leaf:
                    children = page.children
                    next_leftmost = (
                        int(children[0]) if children is not None and len(children) else InvalidBlockNumber
                    )
                    if next_leftmost == InvalidBlockNumber:
                        corruption.append((current, "internal page without downlinks"))
                first = False
            if page.is_leaf:
                leaf_pages += 1
                index_tuples += int(page.nentries)
                nitems = int(page.nentries)
            else:
                nitems = 0 if page.children is None else len(page.children)
            ctx.process_page(nitems)
            if nitems and page.right != InvalidBlockNumber:
                # The last item is checked against the right sibling's first item.
                _read_copy(be, idx, page.right, strategy)
            leftcurrent = current
            current = page.right
        leftmost = next_leftmost
        expected_level -= 1
    heap_tuples = None
    if heapallindexed:
        heap_rel = getattr(getattr(content, "heap", None), "rel", None)
        if heap_rel is None:
            raise ModelUsageError(f"index {idx.name!r} has no table to check (heapallindexed)")
        # table_beginscan_strat(strategy and syncscan allowed) + heap_getnext: PostgreSQL 18's
        # streamed sequential scan, no tuple slot.
        scan = HeapScan(ctx, heap_rel, streamed=True, use_slot=False, pagemode=True)
        heap_tuples = 0
        heap_content = heap_rel.content
        for block in scan.pages():
            n = 1 if heap_content is None else int(heap_content.page(ForkNumber.MAIN, block).nlive)
            ctx.process_page(n)
            heap_tuples += n
        scan.end()
        # Every live heap tuple must have an index entry (the index also keeps the dead ones).
        if heap_content is not None and heap_tuples > index_tuples:
            corruption.append((0, f"heap has {heap_tuples} live tuples, the index {index_tuples} entries"))
    return {
        "index": idx.name,
        "pages_checked": pages,
        "levels": levels,
        "leaf_pages": leaf_pages,
        "index_tuples": index_tuples,
        "heap_tuples": heap_tuples,
        "corruption": len(corruption),
    }
