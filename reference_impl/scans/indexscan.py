"""Plain index scan: heap fetches in index order (``nodeIndexscan.c``, ``heapam_index_fetch_tuple``).

``SELECT ... WHERE key >= a AND key < b`` planned as an index scan reads the btree (root to the
first leaf, then right along the leaves, one ``ReadBuffer`` per page without strategy) and, for
every TID in key order, fetches the heap tuple with ``heapam_index_fetch_tuple``:
``ReleaseAndReadBuffer`` keeps the buffer when the TID is on the block already held, otherwise
releases it and reads the new block with the one-block path — a synchronous single-block read
per miss, no combining, no look-ahead, even when consecutive TIDs point to consecutive blocks
(``scans.md`` §2.9, confirmed on an 18.6 server). The slot pins the heap page of the last row.
That is the unstreamed variant, PostgreSQL 18's behaviour.

The streamed variant is a prototype of index prefetching (discussed in the sample-scan thread,
not in PostgreSQL): the callback walks the index in key order — reading leaf pages as it needs
TIDs, i.e. ahead of the consumer — and returns one heap block per run of TIDs on the same block,
which is exactly when ``ReleaseAndReadBuffer`` would read; the run's offsets are the per-buffer
data. Flags ``DEFAULT | USE_BATCHING``, no strategy. Heap blocks that follow each other in index
order are combined into one read; a correlated index becomes a sequential stream.

Answer (equal for both variants): ``rows``, ``tid_digest``, ``heap_fetches`` (block changes),
``blocks`` (heap blocks fetched, in order); the index pages read are in the result's ``notes``.
"""

from __future__ import annotations

from collections.abc import Iterator
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
from .base import ScanContext, register_scan

__all__ = ["indexscan"]


def _heap_runs(bt: BTreeContent, leaves: Iterator[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
    """(heap block, offsets) for each run of consecutive same-block TIDs, in index order."""
    pending_block = -1
    pending: list[np.ndarray] = []
    for ranks in leaves:
        if ranks.size == 0:
            continue
        blocks, offsets = bt.entries.tids_of_ranks(ranks)
        cuts = np.flatnonzero(np.diff(blocks)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [blocks.size]))
        for s, e in zip(starts.tolist(), ends.tolist()):
            b = int(blocks[s])
            if b == pending_block:
                pending.append(offsets[s:e])
                continue
            if pending:
                yield pending_block, np.concatenate(pending)
            pending_block = b
            pending = [offsets[s:e]]
    if pending:
        yield pending_block, np.concatenate(pending)


@register_scan(
    "indexscan",
    models="IndexNext (nodeIndexscan.c) → index_getnext_slot → heapam_index_fetch_tuple (heapam_handler.c) "
    "with btgettuple (nbtree.c)",
    description="index scan heap fetches: unstreamed = PostgreSQL 18 (ReleaseAndReadBuffer, one-block reads); "
    "streamed = prototype (the index's TID order as the stream callback)",
    params=btree_range_params(),
)
def indexscan(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    index: str | None = None,
    key_start: float = 0.0,
    selectivity: float = 0.01,
    metapage_cached: bool = True,
    limit: int | None = None,
) -> dict[str, Any]:
    be = ctx.backend
    irel, bt, lo, hi = btree_key_range(ctx, rel, index, key_start, selectivity)
    index_pages: list[int] = []
    leaves = btree_range_leaves(be, irel, lo, hi, metapage_cached=metapage_cached, pages_read=index_pages)
    runs = _heap_runs(bt, leaves)
    content = rel.content
    stream = None
    if streamed:

        def callback(stream: Any, private: Any) -> Any:
            run = next(runs, None)
            return InvalidBlockNumber if run is None else run

        stream = begin_heap_fetch_stream(ctx, rel, callback)
    returned = ReturnedRows(be, limit)
    fetched: list[int] = []
    # heapam_index_fetch_tuple prunes a heap page when it pins it (19+: xs_vmbuffer; the
    # executor's scan of a relation the query does not modify, SO_HINT_REL_READ_ONLY).
    pruner = OnAccessPruning.for_scan(ctx, rel, read_only=True)
    cbuf = -1
    while True:
        if stream is not None:
            # The prototype hands each heap block over with its run: the held buffer is released
            # first, as ReleaseAndReadBuffer does when the block changes.
            if cbuf >= 0:
                be.release_buffer(cbuf)
                cbuf = -1
            buf, offsets = stream.next_buffer_with_data()
            if buf < 0:
                break
            block = be.buffer_block(buf)
        else:
            run = next(runs, None)
            if run is None:
                break
            block, offsets = run
            buf = be.release_and_read_buffer(cbuf, rel, block)
        cbuf = buf
        if pruner is not None:
            pruner.prune_opt(buf, block)
        # heap_hot_search_buffer runs under LockBuffer(xs_cbuf, BUFFER_LOCK_SHARE).
        be.lock_buffer(buf)
        be.check_for_interrupts()
        ctx.visit(block)
        fetched.append(block)
        page = content.page(ForkNumber.MAIN, block) if content is not None else None
        live = page.live_offsets if page is not None else np.ones(1, dtype=np.uint16)
        ctx.process_page(len(offsets))
        if returned.take(cbuf, block, offsets, live):
            break
    # index_endscan: the heap fetch's buffer, then (prototype) the stream; then the slot.
    returned.end_scan(cbuf, stream)
    if pruner is not None:
        pruner.release()
    # Index pages read are I/O, not the answer: the streamed prototype consumes the index ahead
    # of the heap fetches, so after a LIMIT it may have read further leaves.
    ctx.notes["index_pages"] = index_pages
    return {
        "rows": returned.rows,
        "tid_digest": returned.digest.value,
        "heap_fetches": len(fetched),
        "blocks": fetched,
        "key_range": [lo, hi],
        "limited": returned.limited,
    }
