"""Bitmap heap scan over a btree range (``nodeBitmapHeapscan.c``, ``nodeBitmapIndexscan.c``).

``SELECT ... WHERE key >= a AND key < b`` planned as a bitmap scan runs in two steps:

1. **Bitmap index scan** (``MultiExecBitmapIndexScan`` → ``btgetbitmap``): the whole TID bitmap
   is built before the heap is touched. The btree is descended from the root to the leaf holding
   the first key, then walked right while leaves hold keys of the range; every page is one
   ``ReadBuffer`` without strategy (context ``normal``), one page per read. The metapage is read
   only if the backend has not cached it (``metapage_cached=False``). The TIDs go into a
   ``TIDBitmap`` limited by ``work_mem``; beyond it pages become lossy (``_tidbitmap.py``).
2. **Bitmap heap scan**: the bitmap is iterated in ascending block order, blocks at or past the
   heap's size at scan start are skipped, and every remaining block is read and examined: an
   exact page's listed offsets, or every tuple of a lossy page (rechecked against the range).
   PostgreSQL 18 reads the heap through a read stream (``bitmapheap_stream_read_next``): flags
   ``DEFAULT | USE_BATCHING``, no strategy whatever the table size, the iterator result as
   per-buffer data (so no fast path). Runs of consecutive blocks are combined with the usual ramp;
   a gap always starts a new read. The consumer releases its scan buffer before asking for the
   next page and the executor's slot pins the page of the last returned row (``scans.md`` §2.4,
   §2.8). No "skip fetch" of all-visible pages in PostgreSQL 18.

The unstreamed variant is PostgreSQL 17's loop: one ``ReadBuffer`` per bitmap page, with
``PrefetchBuffer`` advice issued by a second iterator running ahead by a prefetch target that
grows 0 → 1 → 2 → 4 … up to ``effective_io_concurrency`` (``BitmapAdjustPrefetchTarget``). Advice is
not a read and does nothing with direct I/O; it only changes timing under buffered I/O.

Answer (equal for both variants): ``rows``, ``tid_digest``, ``heap_pages`` (blocks visited),
``exact_pages``/``lossy_pages``, ``index_pages`` (index blocks read, in order), ``blocks``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..relations.btree import BTreeContent
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._heapfetch import (
    ReturnedRows,
    begin_heap_fetch_stream,
    btree_key_range,
    btree_range_leaves,
    btree_range_params,
)
from ._prune import OnAccessPruning
from ._tidbitmap import TBMIterateResult, TIDBitmap
from .base import EXPLAIN_IO_PARAM, ScanContext, ScanParam, register_scan

__all__ = ["bitmapscan", "build_bitmap"]


def build_bitmap(
    ctx: ScanContext,
    index: Relation,
    lo: int,
    hi: int,
    *,
    work_mem_kb: int,
    metapage_cached: bool,
    index_pages: list[int],
) -> tuple[TIDBitmap, dict[int, np.ndarray]]:
    """``MultiExecBitmapIndexScan``: read the index range, fill a TID bitmap.

    Also returns, per heap block, the offsets of the range's TIDs: what a recheck of the index
    condition accepts on a lossy page.
    """
    bt = index.content
    assert isinstance(bt, BTreeContent)
    tbm = TIDBitmap(work_mem_kb * 1024)
    matches: dict[int, list[np.ndarray]] = {}
    for ranks in btree_range_leaves(
        ctx.backend, index, lo, hi, metapage_cached=metapage_cached, pages_read=index_pages
    ):
        blocks, offsets = bt.entries.tids_of_ranks(ranks)
        tbm.add_tuples(blocks, offsets)
        for b in np.unique(blocks).tolist():
            matches.setdefault(b, []).append(offsets[blocks == b])
    return tbm, {b: np.unique(np.concatenate(v)) for b, v in matches.items()}


class _PrefetchState:
    """PostgreSQL 17's bitmap prefetching (``BitmapAdjustPrefetchIterator/Target``, ``BitmapPrefetch``)."""

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.target = -1
        self.pages = 0
        self.next = 0  # position of the prefetch iterator in the block list

    def after_main_advance(self) -> None:
        if self.pages > 0:
            self.pages -= 1
        else:
            self.next += 1
        t = self.target
        if t >= self.maximum:
            return
        if t >= self.maximum // 2:
            self.target = self.maximum
        elif t > 0:
            self.target = t * 2
        else:
            self.target = t + 1

    def prefetch(self, ctx: ScanContext, rel: Relation, blocks: list[int]) -> None:
        while self.pages < self.target and self.next < len(blocks):
            b = blocks[self.next]
            self.next += 1
            self.pages += 1
            ctx.backend.prefetch_buffer(rel, ForkNumber.MAIN, b)


@register_scan(
    "bitmapscan",
    streamed_since="18",
    models="BitmapHeapNext (nodeBitmapHeapscan.c) → bitmapheap_stream_read_next / BitmapHeapScanNextBlock "
    "(heapam_handler.c), after MultiExecBitmapIndexScan → btgetbitmap (nbtree.c)",
    description="bitmap heap scan of a btree key range: streamed = PostgreSQL 18 (heap read stream, "
    "iterator result as per-buffer data); unstreamed = PostgreSQL 17 (ReadBuffer per page + prefetch advice)",
    params=btree_range_params(
        ScanParam(
            "work_mem_kb", int, 4096, "work_mem for the TID bitmap (kB)", minimum=64, maximum=2147483647
        ),
        EXPLAIN_IO_PARAM,
    ),
)
def bitmapscan(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    index: str | None = None,
    key_start: float = 0.0,
    selectivity: float = 0.01,
    work_mem_kb: int = 4096,
    metapage_cached: bool = True,
    limit: int | None = None,
    explain_io: bool = False,
) -> dict[str, Any]:
    be = ctx.backend
    instrument = ctx.check_explain_io("bitmapscan", explain_io)
    irel, _, lo, hi = btree_key_range(ctx, rel, index, key_start, selectivity)
    index_pages: list[int] = []
    tbm, matches = build_bitmap(
        ctx, irel, lo, hi, work_mem_kb=work_mem_kb, metapage_cached=metapage_cached, index_pages=index_pages
    )
    nblocks = rel.nblocks(ForkNumber.MAIN)  # rs_nblocks at heap scan start
    results = [r for r in tbm.iterate() if r.blockno < nblocks]
    it = iter(results)
    content = rel.content

    def callback(stream: Any, private: Any) -> Any:
        r = next(it, None)
        return InvalidBlockNumber if r is None else (r.blockno, r)

    stream = None
    prefetch: _PrefetchState | None = None
    block_list = [r.blockno for r in results]
    if streamed:
        stream = begin_heap_fetch_stream(ctx, rel, callback, instrument=instrument)
    else:
        eic = rel.tablespace_eic if rel.tablespace_eic is not None else be.settings.effective_io_concurrency
        if eic > 0:
            prefetch = _PrefetchState(eic)
    returned = ReturnedRows(be, limit)
    exact = lossy = 0
    visited: list[int] = []
    # heapam_scan_bitmap_next_block prunes each page (19+: rs_vmbuffer; nodeBitmapHeapscan
    # marks a relation the query does not modify, SO_HINT_REL_READ_ONLY).
    pruner = OnAccessPruning.for_scan(ctx, rel, read_only=True)
    cbuf = -1
    pos = 0
    while True:
        if cbuf >= 0:
            be.release_buffer(cbuf)
            cbuf = -1
        be.check_for_interrupts()
        res: TBMIterateResult | None
        if stream is not None:
            buf, res = stream.next_buffer_with_data()
            if buf < 0:
                break
        else:
            if pos >= len(results):
                break
            res = results[pos]
            pos += 1
            if prefetch is not None:
                prefetch.after_main_advance()
            buf = be.read_buffer(rel, res.blockno, ForkNumber.MAIN, None)
            if prefetch is not None:
                prefetch.prefetch(ctx, rel, block_list)
        assert res is not None
        cbuf = buf
        block = res.blockno
        if pruner is not None:
            pruner.prune_opt(buf, block)
        # heapam_scan_bitmap_next_block tests the tuples under LockBuffer(buffer, SHARE).
        be.lock_buffer(buf)
        ctx.visit(block)
        visited.append(block)
        page = content.page(ForkNumber.MAIN, block) if content is not None else None
        live = page.live_offsets if page is not None else np.ones(1, dtype=np.uint16)
        if res.lossy:
            lossy += 1
            ctx.process_page(page.max_offset if page is not None else 1)
            cand = matches.get(block, np.empty(0, dtype=np.int64))
        else:
            exact += 1
            cand = np.asarray(res.offsets, dtype=np.int64)
            ctx.process_page(len(cand))
        if returned.take(cbuf, block, cand, live):
            break
    # heap_endscan: the scan buffer, then the stream (drain); the slot is cleared afterwards.
    returned.end_scan(cbuf, stream)
    if pruner is not None:
        pruner.release()
    return {
        "rows": returned.rows,
        "tid_digest": returned.digest.value,
        "heap_pages": len(visited),
        "exact_pages": exact,
        "lossy_pages": lossy,
        "index_pages": index_pages,
        "blocks": visited,
        "key_range": [lo, hi],
        "limited": returned.limited,
    }
