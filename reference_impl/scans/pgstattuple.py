"""The pgstattuple family (``contrib/pgstattuple``): exact and approximate bloat statistics.

Five functions, all of which read every page they look at through a BULKREAD ring, and three of
which are the subject of streaming work in the seed threads:

* ``pgstattuple(table)`` (``pgstat_heap``): a heap scan with ``SnapshotAny`` (start block 0, no
  synchronized scan, BULKREAD only above ``NBuffers / 4`` blocks), each tuple checked with
  ``SnapshotDirty`` (which sets hint bits: a page whose hint bits were not yet set is dirtied,
  and WAL-logged with data checksums). For free space, every block ``0..nblocks-1`` is pinned
  once more with ``ReadBufferExtended`` as the scan passes it, normally a hit. Streamed = the
  PostgreSQL 18 heap scan; unstreamed = PostgreSQL 16's one block at a time.
* ``pgstattuple(index)`` (``pgstat_index`` with ``pgstat_btree_page``/``_hash_page``/
  ``_gist_page``): blocks from 1 (after the btree/hash metapage, or the GiST root) to the end, one
  ``ReadBufferExtended(BULKREAD)`` each, re-checking the size at the end and continuing if the
  index grew. Unstreamed = PostgreSQL 18, 19 and the development branch; streamed = the
  ``pgstat_index()`` refactor proposed in the sample-scan thread (in no version): a block-range
  stream (``READ_STREAM_FULL | USE_BATCHING``, BULKREAD) reset and continued when the index grew.
* ``pgstatindex(btree)``: the metapage *with* the BULKREAD strategy, then blocks 1.. one read
  each; ``pgstathashindex``: the metapage without strategy (``_hash_getbuf``), then blocks 1..
  with BULKREAD. Unstreamed = PostgreSQL 18; streamed = PostgreSQL 19 (``pgstatindex_impl``,
  ``pgstathashindex``; the October 2025 proposal as it landed): a block-range stream over
  ``1 .. nblocks - 1`` with ``nblocks`` taken once after the metapage, BULKREAD,
  ``READ_STREAM_FULL | USE_BATCHING``, ``CHECK_FOR_INTERRUPTS`` before each
  ``read_stream_next_buffer``, and the metapage read unchanged.
* ``pgstattuple_approx(table)`` (``statapprox_heap``): for each block, the visibility map decides
  (one ``normal`` read per VM page): an all-visible block is not read, its free space comes from
  the FSM leaf (one ``normal`` read per leaf page); any other block is read with BULKREAD and its
  tuples checked with ``HeapTupleSatisfiesVacuum`` (which sets hint bits). Unstreamed =
  PostgreSQL 18 (one block at a time); streamed = PostgreSQL 19 (committed in March 2026 from the
  streamify thread): the same decision inside the stream callback
  (``statapprox_heap_read_stream_next``, which also counts the scanned pages), ``READ_STREAM_FULL``
  without batching (the callback may read VM pages), BULKREAD — the non-all-visible blocks come
  in combined reads, with the VM and FSM reads made at look-ahead time.

``pgstattuple`` of a *table* is streamed in every version (the heap scan); of an *index*,
``pgstat_index`` reads one block at a time in 18, 19 and the development branch alike, and its
streamed variant stays the sample-scan thread's proposal. The variant each version runs is the
registry's ``native_variant``.

Every statistic is the same for both variants of a function. Hint bits matter for residency:
with data checksums a page whose hint bits are set for the first time carries unflushed WAL, and
a BULKREAD ring refuses to reuse such a buffer, so the page escapes the ring
(``buffers_and_strategies.md`` §5.1).

Free space of all-visible pages in ``pgstattuple_approx`` is what the FSM records, i.e.
``PageGetHeapFreeSpace`` rounded down to the FSM's 32-byte categories; the live-tuple count is
extrapolated with ``vac_estimate_reltuples`` from ``pg_class.relpages``/``reltuples``, given as
parameters (default: never vacuumed, so the scanned density is scaled up).
"""

from __future__ import annotations

import math
from typing import Any

from ..buffers.strategy import BAS_BULKREAD, BufferAccessStrategy, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import BLCKSZ, ForkNumber, InvalidBlockNumber, Relation
from ._forkmaps import VM_ALL_VISIBLE, VMBuffer, get_recorded_free_space
from ._pageview import HeapPage, HeapView, IndexView, index_view, take_hint_bits
from .base import ScanContext, ScanParam, register_scan
from .heapscan import HeapScan

__all__ = [
    "pgstattuple",
    "pgstattuple_approx",
    "pgstatindex",
    "pgstathashindex",
    "vac_estimate_reltuples",
]

_FSM_CAT_STEP = 32  # BLCKSZ / FSM_CATEGORIES


def vac_estimate_reltuples(
    relpages: int, reltuples: float, total_pages: int, scanned_pages: int, scanned_tuples: float
) -> float:
    """``vac_estimate_reltuples`` (PostgreSQL 18)."""
    if scanned_pages >= total_pages:
        return scanned_tuples
    if relpages == total_pages and scanned_pages < total_pages * 0.02:
        return reltuples
    if scanned_pages <= 1:
        return reltuples
    if reltuples < 0 or relpages == 0:
        return math.floor(scanned_tuples / scanned_pages * total_pages + 0.5)
    old_density = reltuples / relpages
    unscanned = total_pages - scanned_pages
    return math.floor(old_density * unscanned + scanned_tuples + 0.5)


def _percent(part: float, whole: int) -> float:
    """``100.0 * part / whole`` as the C code computes it (no rounding: the server returns e.g.
    37.333333333333336)."""
    return 100.0 * part / whole if whole else 0.0


def _hint(ctx: ScanContext, rel: Relation, buf: int, page: HeapPage, data_checksums: bool) -> None:
    """``SetHintBits`` → ``MarkBufferDirtyHint`` on a page not hinted yet."""
    if take_hint_bits(rel, page):
        ctx.backend.mark_buffer_dirty(buf, wal_logged=data_checksums)


# ---------------------------------------------------------------------------------------- heap
def _pgstat_heap(ctx: ScanContext, rel: Relation, streamed: bool, data_checksums: bool) -> dict[str, Any]:
    """``pgstat_heap``."""
    be = ctx.backend
    heap = HeapView(rel)
    scan = HeapScan(ctx, rel, streamed=streamed, allow_strat=True, allow_sync=False, use_slot=False)
    nblocks = scan.nblocks
    strategy = scan.strategy
    tuple_count = tuple_len = dead_count = dead_len = free_space = 0
    next_free = 0  # next block to count free space in

    def free_space_upto(last: int) -> None:
        nonlocal next_free, free_space
        while next_free <= last:
            be.check_for_interrupts()
            buf = be.read_buffer(rel, next_free, ForkNumber.MAIN, strategy)
            free_space += heap.page(next_free).exact_free_space
            be.release_buffer(buf)
            next_free += 1

    for block in scan.pages():
        page = heap.page(block)
        ctx.visit(block)
        ntup = page.nlive + page.ndead
        ctx.process_page(ntup)
        if ntup == 0:
            continue
        _hint(ctx, rel, scan.cbuf, page, data_checksums)
        tuple_count += page.nlive
        tuple_len += page.nlive * page.tuple_len
        dead_count += page.ndead
        dead_len += page.ndead * page.tuple_len
        free_space_upto(block)
    free_space_upto(nblocks - 1)
    scan.end()
    table_len = nblocks * BLCKSZ
    return {
        "table_len": table_len,
        "tuple_count": tuple_count,
        "tuple_len": tuple_len,
        "tuple_percent": _percent(tuple_len, table_len),
        "dead_tuple_count": dead_count,
        "dead_tuple_len": dead_len,
        "dead_tuple_percent": _percent(dead_len, table_len),
        "free_space": free_space,
        "free_percent": _percent(free_space, table_len),
    }


# ---------------------------------------------------------------------------------------- index
def _index_range(
    ctx: ScanContext,
    rel: Relation,
    start: int,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    page_fn: Any,
) -> int:
    """Visit blocks ``start..`` to the end, re-checking the size (``pgstat_index``'s loop).

    Unstreamed: one ``ReadBufferExtended`` each. Streamed: a block-range stream, reset and
    continued with the new end when the relation grew. Returns the final size.
    """
    from .. import begin_stream

    be = ctx.backend
    blkno = start
    stream = None
    private = BlockRangeReadStreamPrivate(start, start)
    if streamed:
        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            private,
            flags=READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=strategy,
        )
        ctx.track_stream(stream)
    while True:
        nblocks = rel.nblocks(ForkNumber.MAIN)
        if blkno >= nblocks:
            break
        if stream is not None:
            private.last_exclusive = nblocks
            while True:
                buf = stream.next_buffer()
                if buf < 0:
                    break
                b = be.buffer_block(buf)
                be.check_for_interrupts()
                page_fn(buf, b)
                be.release_buffer(buf)
                blkno = b + 1
            stream.reset()
        else:
            while blkno < nblocks:
                be.check_for_interrupts()
                buf = be.read_buffer(rel, blkno, ForkNumber.MAIN, strategy)
                page_fn(buf, blkno)
                be.release_buffer(buf)
                blkno += 1
    if stream is not None:
        stream.end()
    return nblocks


def _pgstat_index(ctx: ScanContext, rel: Relation, view: IndexView, streamed: bool) -> dict[str, Any]:
    """``pgstat_index``: the generic index pass of ``pgstattuple(index)``."""
    strategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    acc = {"tuple_count": 0, "tuple_len": 0, "dead_tuple_count": 0, "dead_tuple_len": 0, "free_space": 0}

    def page_fn(buf: int, block: int) -> None:
        info = view.page(block)
        ctx.visit(block)
        ctx.process_page(info.nitems)
        if info.is_new or info.ignored:
            acc["free_space"] += BLCKSZ
            return
        if not info.counts_tuples:
            return
        acc["free_space"] += info.exact_free_space
        acc["tuple_count"] += info.nitems - info.ndead
        acc["tuple_len"] += (info.nitems - info.ndead) * info.item_len
        acc["dead_tuple_count"] += info.ndead
        acc["dead_tuple_len"] += info.ndead * info.item_len

    nblocks = _index_range(ctx, rel, view.first_data_block, strategy, streamed, page_fn)
    table_len = nblocks * BLCKSZ
    return {
        "table_len": table_len,
        "tuple_count": acc["tuple_count"],
        "tuple_len": acc["tuple_len"],
        "tuple_percent": _percent(acc["tuple_len"], table_len),
        "dead_tuple_count": acc["dead_tuple_count"],
        "dead_tuple_len": acc["dead_tuple_len"],
        "dead_tuple_percent": _percent(acc["dead_tuple_len"], table_len),
        "free_space": acc["free_space"],
        "free_percent": _percent(acc["free_space"], table_len),
    }


@register_scan(
    "pgstattuple",
    streamed_since="18",
    models="pgstattuple → pgstat_relation → pgstat_heap / pgstat_index (contrib/pgstattuple/pgstattuple.c)",
    description="exact tuple and free-space statistics of a table (streamed = PostgreSQL 18 heap scan, "
    "unstreamed = PostgreSQL 16) or of a btree/hash/GiST index (unstreamed = PostgreSQL 18, 19 and "
    "20devel; streamed = the proposed pgstat_index() read-stream refactor)",
    params=(
        ScanParam("data_checksums", bool, True, "data checksums on: first hint-bit changes are WAL-logged"),
    ),
)
def pgstattuple(
    ctx: ScanContext, rel: Relation, *, streamed: bool, data_checksums: bool = True
) -> dict[str, Any]:
    view = index_view(rel)
    if view is not None:
        return _pgstat_index(ctx, rel, view, streamed)
    return _pgstat_heap(ctx, rel, streamed, data_checksums)


# ---------------------------------------------------------------------------------------- approx
@register_scan(
    "pgstattuple_approx",
    streamed_since="19",
    models="pgstattuple_approx → statapprox_heap (contrib/pgstattuple/pgstatapprox.c)",
    description="approximate table statistics skipping all-visible pages (unstreamed = PostgreSQL 18, "
    "streamed = PostgreSQL 19: READ_STREAM_FULL with the VM/FSM decision in the callback)",
    params=(
        ScanParam("relpages", int, 0, "pg_class.relpages (0: never vacuumed)", minimum=0),
        ScanParam("reltuples", float, -1.0, "pg_class.reltuples (-1: unknown)", minimum=-1.0),
        ScanParam("data_checksums", bool, True, "data checksums on: first hint-bit changes are WAL-logged"),
    ),
)
def pgstattuple_approx(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    relpages: int = 0,
    reltuples: float = -1.0,
    data_checksums: bool = True,
) -> dict[str, Any]:
    from .. import begin_stream

    be = ctx.backend
    heap = HeapView(rel)
    strategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    nblocks = rel.nblocks(ForkNumber.MAIN)
    vm = VMBuffer(be, rel, heap.vm_flags)
    st = {"scanned": 0, "tuple_count": 0, "tuple_len": 0, "dead_count": 0, "dead_len": 0, "free": 0}
    cur = [0]

    def skip_or_take(blkno: int) -> bool:
        """The VM decision; an all-visible block's space comes from the FSM. True = read it."""
        if vm.status(blkno) & VM_ALL_VISIBLE:
            free = 0
            if get_recorded_free_space(be, rel, blkno):
                free = heap.page(blkno).free_space // _FSM_CAT_STEP * _FSM_CAT_STEP
            st["tuple_len"] += BLCKSZ - free
            st["free"] += free
            return False
        return True

    def callback(stream: Any, private: Any) -> int:
        """``statapprox_heap_read_stream_next``."""
        while cur[0] < nblocks:
            b = cur[0]
            cur[0] += 1
            be.check_for_interrupts()
            if skip_or_take(b):
                st["scanned"] += 1
                return b
        return InvalidBlockNumber

    def examine(buf: int, blkno: int) -> None:
        page = heap.page(blkno)
        ctx.visit(blkno)
        ctx.process_page(page.nlive + page.ndead)
        st["free"] += page.exact_free_space
        if page.is_empty:
            return
        if page.nlive + page.ndead:
            _hint(ctx, rel, buf, page, data_checksums)
        st["tuple_len"] += page.nlive * page.tuple_len
        st["tuple_count"] += page.nlive
        st["dead_len"] += page.ndead * page.tuple_len
        st["dead_count"] += page.ndead

    if streamed:
        stream = begin_stream(be, rel, callback, None, flags=READ_STREAM_FULL, strategy=strategy)
        ctx.track_stream(stream)
        while True:
            buf = stream.next_buffer()
            if buf < 0:
                break
            examine(buf, be.buffer_block(buf))
            be.release_buffer(buf)
        stream.end()
    else:
        for blkno in range(nblocks):
            be.check_for_interrupts()
            if not skip_or_take(blkno):
                continue
            buf = be.read_buffer(rel, blkno, ForkNumber.MAIN, strategy)
            st["scanned"] += 1
            examine(buf, blkno)
            be.release_buffer(buf)
    vm.release()
    table_len = nblocks * BLCKSZ
    tuple_count = max(
        vac_estimate_reltuples(relpages, reltuples, nblocks, st["scanned"], st["tuple_count"]), 0
    )
    return {
        "table_len": table_len,
        "scanned_percent": _percent(st["scanned"], nblocks),
        "approx_tuple_count": int(tuple_count),
        "approx_tuple_len": st["tuple_len"],
        "approx_tuple_percent": _percent(st["tuple_len"], table_len),
        "dead_tuple_count": st["dead_count"],
        "dead_tuple_len": st["dead_len"],
        "dead_tuple_percent": _percent(st["dead_len"], table_len),
        "approx_free_space": st["free"],
        "approx_free_percent": _percent(st["free"], table_len),
        "scanned_pages": st["scanned"],
    }


# ---------------------------------------------------------------------------------------- pgstatindex
def _range_once(
    ctx: ScanContext,
    rel: Relation,
    start: int,
    nblocks: int,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    page_fn: Any,
) -> None:
    """The block loop of ``pgstatindex_impl`` / ``pgstathashindex``: ``start .. nblocks - 1`` once.

    Unstreamed (PostgreSQL 18): one ``ReadBufferExtended`` each. Streamed (PostgreSQL 19): a
    block-range stream with ``p.last_exclusive = nblocks``, one ``read_stream_next_buffer`` per
    ``blkno`` of the same ``for`` loop, then ``Assert(read_stream_next_buffer(stream, NULL) ==
    InvalidBuffer)`` (the servers the harness builds have assertions) and ``read_stream_end``.
    """
    from .. import begin_stream

    be = ctx.backend
    if streamed:
        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(start, nblocks),
            flags=READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=strategy,
        )
        ctx.track_stream(stream)
        for blkno in range(start, nblocks):
            be.check_for_interrupts()
            buf = stream.next_buffer()
            page_fn(buf, blkno)
            be.release_buffer(buf)
        if stream.next_buffer() >= 0:
            raise ModelUsageError(f"the block-range stream of {rel.name!r} went past block {nblocks - 1}")
        stream.end()
        return
    for blkno in range(start, nblocks):
        be.check_for_interrupts()
        buf = be.read_buffer(rel, blkno, ForkNumber.MAIN, strategy)
        page_fn(buf, blkno)
        be.release_buffer(buf)


def _require_index(rel: Relation, kind: str, function: str) -> IndexView:
    view = index_view(rel)
    if view is None or view.kind != kind:
        what = "not an index" if view is None else f"a {view.kind} index"
        raise ModelUsageError(f"{function}: relation {rel.name!r} is {what}: allowed a {kind} index")
    return view


@register_scan(
    "pgstatindex",
    streamed_since="19",
    models="pgstatindex → pgstatindex_impl (contrib/pgstattuple/pgstatindex.c)",
    description="btree index statistics: the metapage with the BULKREAD ring, then every block "
    "(unstreamed = PostgreSQL 18; streamed = PostgreSQL 19: a FULL|USE_BATCHING block-range stream)",
)
def pgstatindex(ctx: ScanContext, rel: Relation, *, streamed: bool) -> dict[str, Any]:
    be = ctx.backend
    view = _require_index(rel, "btree", "pgstatindex")
    strategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    buf = be.read_buffer(rel, 0, ForkNumber.MAIN, strategy)
    content = view.content
    be.release_buffer(buf)
    st = {"internal": 0, "leaf": 0, "empty": 0, "deleted": 0, "max_avail": 0, "free": 0, "fragments": 0}
    nblocks = rel.nblocks(ForkNumber.MAIN)

    def page_fn(buf: int, blkno: int) -> None:
        info = view.page(blkno)
        ctx.visit(blkno)
        ctx.process_page(info.nitems)
        if info.kind == "deleted":
            st["deleted"] += 1
        elif info.ignored:
            st["empty"] += 1
        elif info.counts_tuples:
            st["max_avail"] += BLCKSZ - 16 - 24
            st["free"] += info.exact_free_space  # PageGetExactFreeSpace, as pgstatindex_impl
            st["leaf"] += 1
            if info.right != InvalidBlockNumber and info.right < blkno:
                st["fragments"] += 1
        else:
            st["internal"] += 1

    _range_once(ctx, rel, 1, nblocks, strategy, streamed, page_fn)
    pages = 1 + st["leaf"] + st["internal"] + st["deleted"] + st["empty"]
    density = 100.0 - st["free"] / st["max_avail"] * 100.0 if st["max_avail"] else math.nan
    frag = st["fragments"] / st["leaf"] * 100.0 if st["leaf"] else math.nan
    levels = getattr(content, "levels", 1)
    return {
        "version": 4,
        "tree_level": max(levels - 1, 0),
        "index_size": pages * BLCKSZ,
        "root_block_no": int(getattr(content, "root_block", 1)),
        "internal_pages": st["internal"],
        "leaf_pages": st["leaf"],
        "empty_pages": st["empty"],
        "deleted_pages": st["deleted"],
        "avg_leaf_density": round(density, 2),
        "leaf_fragmentation": round(frag, 2),
    }


@register_scan(
    "pgstathashindex",
    streamed_since="19",
    models="pgstathashindex → GetHashPageStats (contrib/pgstattuple/pgstatindex.c)",
    description="hash index statistics: the metapage without strategy, then every block with BULKREAD "
    "(unstreamed = PostgreSQL 18; streamed = PostgreSQL 19: a FULL|USE_BATCHING block-range stream)",
)
def pgstathashindex(ctx: ScanContext, rel: Relation, *, streamed: bool) -> dict[str, Any]:
    be = ctx.backend
    view = _require_index(rel, "hash", "pgstathashindex")
    buf = be.read_buffer(rel, 0, ForkNumber.MAIN, None)  # _hash_getbuf: no strategy
    be.release_buffer(buf)
    nblocks = rel.nblocks(ForkNumber.MAIN)
    strategy = get_access_strategy(BAS_BULKREAD, ctx.settings)
    st = {"bucket": 0, "overflow": 0, "bitmap": 0, "unused": 0, "live": 0, "dead": 0, "free": 0}

    def page_fn(buf: int, blkno: int) -> None:
        info = view.page(blkno)
        ctx.visit(blkno)
        ctx.process_page(info.nitems)
        if info.kind in ("bucket", "overflow"):
            st[info.kind] += 1
            st["live"] += info.nitems - info.ndead
            st["dead"] += info.ndead
            st["free"] += info.exact_free_space
        elif info.kind == "bitmap":
            st["bitmap"] += 1
        else:
            st["unused"] += 1

    _range_once(ctx, rel, 1, nblocks, strategy, streamed, page_fn)
    space_per_page = BLCKSZ - 24 - 16
    free = st["free"] + st["unused"] * space_per_page
    total_space = (nblocks - (st["bitmap"] + 1)) * space_per_page
    return {
        "version": 4,
        "bucket_pages": st["bucket"],
        "overflow_pages": st["overflow"],
        "bitmap_pages": st["bitmap"],
        "unused_pages": st["unused"],
        "live_items": st["live"],
        "dead_items": st["dead"],
        "free_percent": round(100.0 * free / total_space, 6) if total_space else 0.0,
    }
