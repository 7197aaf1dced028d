"""Index bulk delete and cleanup: what VACUUM's phase II reads in a btree, a hash and a GiST index.

Each index access method removes the entries pointing to the heap TIDs in the dead-TID store
(``ambulkdelete``) and then tidies up (``amvacuumcleanup``). They read very differently:

* **btree** (``btbulkdelete`` → ``btvacuumscan``): every block but the metapage, in physical
  order. PostgreSQL 18 reads them through a block-range stream (``MAINTENANCE | FULL |
  USE_BATCHING``, the VACUUM ring: full ``io_combine_limit`` reads from the first one); when the
  stream ends the index size is checked again, and the stream is reset and continued if the
  index grew. The unstreamed form (PostgreSQL 16/17) reads each block with
  ``ReadBufferExtended``. ``btvacuumcleanup`` reads the metapage *without* strategy (after a bulk
  delete to record the cleanup information, otherwise to decide that no cleanup scan is needed).
  Leaf pages that become empty are not deleted by the model (``_bt_pagedel``'s extra reads are
  not modelled, ``scans.md`` §6.4); they are counted in ``pages_emptied``.
* **hash** (``hashbulkdelete`` → ``hashbucketcleanup``): the metapage first (no strategy; read
  only at the end instead when the backend has it cached), then for each bucket its primary page
  and, one page at a time, its overflow chain, all with the ring. A bucket that lost entries is
  squeezed (``_hash_squeezebucket``): the chain is walked again to its end and tuples move from
  the last pages to the first; every overflow page that empties is freed, which reads the
  metapage and the bitmap page without strategy. The metapage is finally dirtied with the new
  tuple count. PostgreSQL 18 reads everything one page at a time; PostgreSQL 19 streams the
  *primary bucket pages* (``MAINTENANCE | USE_BATCHING``, the ring; callback bucket →
  ``BUCKET_TO_BLKNO``), begun after the metapage is read, while overflow pages stay single
  reads; the development branch begins that stream before reading the metapage.
* **GiST** (``gistbulkdelete``/``gistvacuumcleanup`` → ``gistvacuumscan``): every block from
  the root (block 0), streamed like btree in PostgreSQL 18; the cleanup call scans the whole
  index again when no bulk delete ran. Empty leaves are then unlinked
  (``gistvacuum_delete_empty_pages``): each inner page is read again (ring) and the empty leaves
  it points to are read and marked deleted, keeping at least one downlink per parent.

Pages with removed entries are dirtied with WAL, so the VACUUM ring writes them when it comes
back to their buffers. The answer of a bulk delete (entries removed and kept, pages) is the same
streamed and unstreamed.

Registered scans run one AM's bulk delete and cleanup on an index, with the dead-TID store that
VACUUM's phase I would collect from the heap the index is built on: ``btvacuumscan``,
``hashbulkdelete`` and ``gistvacuumscan``; each follows the instance's version.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..buffers.strategy import BufferAccessStrategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._maint import (
    DeadItems,
    IndexBulkDeleteResult,
    begin_vacuum_cost,
    encode_tids,
    end_vacuum_cost,
    vacuum_delay_point,
    vacuum_strategy,
)
from .base import ScanContext, ScanParam, register_scan

__all__ = [
    "IndexVacuumOptions",
    "index_kind",
    "table_indexes",
    "heap_dead_items",
    "index_bulkdelete",
    "index_vacuumcleanup",
    "HASH_ITEMS_PER_PAGE",
    "btvacuumscan",
    "hashbulkdelete",
    "gistvacuumscan",
]

# A hash index tuple is an 8-byte header plus the 4-byte hash code, MAXALIGNed, plus its line
# pointer: (8192 - 24 page header - 16 special) // 20.
HASH_ITEMS_PER_PAGE = (8192 - 24 - 16) // 20
_INDEX_KINDS = ("btree", "hash", "gist", "spgist", "gin", "brin", "bloom")
#: The access methods whose VACUUM passes PostgreSQL 19 streams and 18 reads block by block
#: (hash bulk delete has its own switch, ``hash_stream``).
AMS_STREAMED_FROM_19 = ("gin", "brin", "bloom")
#: The modules of the other access methods' ambulkdelete/amvacuumcleanup.
_AM_MODULES = {"spgist": "spgvacuum", "gin": "ginvacuum", "brin": "brinvacuum", "bloom": "blvacuum"}


@dataclass(frozen=True)
class IndexVacuumOptions:
    """Choices that are not part of ``IndexVacuumInfo`` but change what is read."""

    #: Stream the hash bucket pages: PostgreSQL 19's ``hashbulkdelete`` (18 reads them one by one).
    hash_stream: bool = False
    hash_metapage_cached: bool = False
    #: Run the GIN, BRIN and bloom passes PostgreSQL 19 streams as 19 does (18 reads them one
    #: block at a time): VACUUM sets it from the version, the standalone scans when streamed.
    streams_of_19: bool = False


def index_kind(index: Relation) -> str:
    """The access method of a synthetic index relation (``btree``, ``hash``, ``gist``, ``spgist``,
    ``gin``, ``brin`` or ``bloom``)."""
    kind = getattr(index.content, "kind", None)
    if kind not in _INDEX_KINDS:
        raise ModelUsageError(
            f"relation {index.name!r} is not a synthetic index of {', '.join(_INDEX_KINDS)} "
            f"(content kind {kind!r})"
        )
    return str(kind)


def table_indexes(instance: Any, rel: Relation) -> list[Relation]:
    """``vac_open_indexes``: the table's synthetic indexes that exist in storage, in spec order."""
    spec = getattr(rel.content, "spec", None)
    names = spec.index_names() if spec is not None and hasattr(spec, "index_names") else []
    out = []
    for name in names:
        try:
            idx = instance.relation(name)
        except ModelUsageError:
            continue
        out.append(idx)
    return out


def heap_dead_items(heap_content: Any, nblocks: int) -> DeadItems:
    """The dead-TID store VACUUM's phase I would fill from a synthetic heap (every dead tuple
    pruning leaves LP_DEAD: HOT-updated ones become redirects and need no index vacuuming)."""
    dead = DeadItems()
    for b in range(nblocks):
        page = heap_content.heap_page(b)
        if page.ndead - page.nhot:
            dead.add(b, page.lpdead_offsets)
    return dead


def _content(rel: Relation) -> Any:
    """The synthetic content of an index relation (a ``BTreeContent``/``HashContent``/``GistContent``)."""
    return rel.content


def _dead_entries(page: Any, dead: DeadItems) -> int:
    """How many of the page's entries point to reaped heap TIDs (``vac_tid_reaped``)."""
    if page.nentries == 0 or dead.num_items == 0:
        return 0
    blocks, offsets = page.heap_tids()
    return int(np.count_nonzero(dead.contains(encode_tids(blocks, offsets))))


def _visit(ctx: ScanContext, block: int, ntuples: int) -> None:
    ctx.visit(block)
    ctx.process_page(ntuples)


# ---------------------------------------------------------------------------------------- btree
def _btvacuumpage(
    ctx: ScanContext, index: Relation, buf: int, dead: DeadItems | None, stats: IndexBulkDeleteResult
) -> int:
    """``btvacuumpage``: delete the reaped entries of a leaf; returns 1 if the leaf emptied."""
    be = ctx.backend
    block = be.buffer_block(buf)
    page = _content(index).page(ForkNumber.MAIN, block)
    _visit(ctx, block, page.nentries)
    emptied = 0
    if page.is_leaf:
        ndel = _dead_entries(page, dead) if dead is not None else 0
        if ndel:
            be.mark_buffer_dirty(buf, wal_logged=True)
            stats.tuples_removed += ndel
            if ndel == page.nentries:
                emptied = 1
        stats.num_index_tuples += page.nentries - ndel
    be.release_buffer(buf)
    return emptied


def _block_range_scan(
    ctx: ScanContext,
    index: Relation,
    first: int,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    page_fn: Any,
) -> int:
    """The outer loop of ``btvacuumscan``/``gistvacuumscan``: blocks ``first..`` with size
    re-checks. Streamed: one block-range stream, reset and continued when the index grew.
    Returns the final ``num_pages``."""
    from .. import begin_stream

    be = ctx.backend
    private = BlockRangeReadStreamPrivate(first, first)
    stream = None
    if streamed:
        stream = begin_stream(
            be,
            index,
            block_range_read_stream_cb,
            private,
            flags=READ_STREAM_MAINTENANCE | READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
            strategy=strategy,
        )
        ctx.track_stream(stream)
    scanblkno = first
    while True:
        num_pages = index.nblocks(ForkNumber.MAIN)
        if stream is not None:
            if private.current_blocknum >= num_pages:
                break
            private.last_exclusive = num_pages
            while True:
                vacuum_delay_point(be)
                buf = stream.next_buffer()
                if buf < 0:
                    break
                page_fn(buf)
            stream.reset()
        else:
            if scanblkno >= num_pages:
                break
            while scanblkno < num_pages:
                vacuum_delay_point(be)
                buf = be.read_buffer(index, scanblkno, ForkNumber.MAIN, strategy)
                page_fn(buf)
                scanblkno += 1
    if stream is not None:
        stream.end()
    return num_pages


def _btvacuumscan(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems | None,
    stats: IndexBulkDeleteResult,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
) -> None:
    stats.num_pages = 0
    stats.num_index_tuples = 0
    stats.pages_deleted = 0
    stats.pages_free = 0
    emptied = [0]

    def page_fn(buf: int) -> None:
        emptied[0] += _btvacuumpage(ctx, index, buf, dead, stats)

    stats.num_pages = _block_range_scan(ctx, index, 1, strategy, streamed, page_fn)
    ctx.notes["pages_emptied"] = ctx.notes.get("pages_emptied", 0) + emptied[0]


def _read_metapage(ctx: ScanContext, index: Relation, dirty: bool = False) -> None:
    """A metapage access without strategy (``_bt_getbuf``/``_hash_getbuf`` on block 0)."""
    be = ctx.backend
    buf = be.read_buffer(index, 0, ForkNumber.MAIN, None)
    if dirty:
        be.mark_buffer_dirty(buf, wal_logged=True)
    be.release_buffer(buf)


# ---------------------------------------------------------------------------------------- hash
class _HashState:
    """``hashbulkdelete``'s locals: the metapage pin and the counts."""

    def __init__(self, ctx: ScanContext, index: Relation, strategy: BufferAccessStrategy | None) -> None:
        self.ctx = ctx
        self.be = ctx.backend
        self.index = index
        self.content = _content(index)
        self.strategy = strategy
        self.metabuf = -1
        self.tuples_removed = 0
        self.num_index_tuples = 0
        self.freed = 0

    def getbuf(self, block: int) -> int:
        """``_hash_getbuf_with_strategy``."""
        return self.be.read_buffer(self.index, block, ForkNumber.MAIN, self.strategy)

    def getbuf_nostrategy(self, block: int) -> int:
        """``_hash_getbuf``: metapage and bitmap page, deliberately outside the ring."""
        return self.be.read_buffer(self.index, block, ForkNumber.MAIN, None)


def _hash_freeovflpage(
    st: _HashState, chain: list[int], counts: list[int], r: int, rbuf: int, w: int, wbuf: int, moved: int
) -> None:
    """``_hash_freeovflpage``: unlink overflow page ``r`` (the last of the chain) and free it."""
    be = st.be
    prev = r - 1
    prevbuf = wbuf if prev == w else st.getbuf(chain[prev])
    metabuf = st.getbuf_nostrategy(0)
    mapbuf = st.getbuf_nostrategy(st.content.bitmap_block)
    if moved:
        counts[w] += moved
        be.mark_buffer_dirty(wbuf, wal_logged=True)
    counts[r] = 0
    be.mark_buffer_dirty(rbuf, wal_logged=True)
    be.mark_buffer_dirty(prevbuf, wal_logged=True)
    be.mark_buffer_dirty(mapbuf, wal_logged=True)
    if prev != w:
        be.release_buffer(prevbuf)
    be.release_buffer(rbuf)
    be.release_buffer(mapbuf)
    be.release_buffer(metabuf)
    st.freed += 1


def _hash_squeezebucket(st: _HashState, chain: list[int], counts: list[int], bucket_buf: int) -> None:
    """``_hash_squeezebucket`` on tuple counts: move tuples from the chain's end to its front.

    Every index tuple of a hash index has the same size, so "does the write page have room for
    the tuples gathered so far plus one" is a count comparison against ``HASH_ITEMS_PER_PAGE``.
    """
    be = st.be
    cap = HASH_ITEMS_PER_PAGE
    k = len(chain) - 1
    if k == 0:
        return
    rbuf = -1
    for pos in range(1, k + 1):  # find the last page of the chain
        if rbuf >= 0:
            be.release_buffer(rbuf)
        rbuf = st.getbuf(chain[pos])
    r, w, wbuf = k, 0, bucket_buf
    while True:
        acc = 0
        i = 0
        while i < counts[r]:
            if cap - counts[w] < acc + 1:
                wnext = w + 1
                next_wbuf = st.getbuf(chain[wnext]) if wnext != r else -1
                moved = acc > 0
                if moved:
                    counts[w] += acc
                    counts[r] -= acc
                    be.mark_buffer_dirty(wbuf, wal_logged=True)
                    be.mark_buffer_dirty(rbuf, wal_logged=True)
                if w != 0:
                    be.release_buffer(wbuf)
                if wnext == r:
                    be.release_buffer(rbuf)
                    return
                w, wbuf = wnext, next_wbuf
                if moved:
                    acc = 0
                    i = 0
                continue
            acc += 1
            i += 1
        prev = r - 1
        _hash_freeovflpage(st, chain, counts, r, rbuf, w, wbuf, acc)
        if prev == w:
            if w != 0:
                be.release_buffer(wbuf)
            return
        rbuf = st.getbuf(chain[prev])
        r = prev


def _hashbucketcleanup(st: _HashState, bucket: int, bucket_buf: int, dead: DeadItems) -> None:
    """``hashbucketcleanup``: the primary page (already pinned) and its overflow chain."""
    be = st.be
    ctx = st.ctx
    content = st.content
    chain = content.chain(bucket)
    counts: list[int] = []
    buf = bucket_buf
    bucket_dirty = False
    for pos, block in enumerate(chain):
        vacuum_delay_point(be)
        page = content.page(ForkNumber.MAIN, block)
        _visit(ctx, block, page.nentries)
        ndel = _dead_entries(page, dead)
        st.tuples_removed += ndel
        st.num_index_tuples += page.nentries - ndel
        counts.append(page.nentries - ndel)
        if ndel:
            bucket_dirty = True
            be.mark_buffer_dirty(buf, wal_logged=True)
        if pos + 1 < len(chain):
            next_buf = st.getbuf(chain[pos + 1])
            if pos > 0:
                be.release_buffer(buf)
            buf = next_buf
    if buf != bucket_buf:
        be.release_buffer(buf)
    if bucket_dirty:
        _hash_squeezebucket(st, chain, counts, bucket_buf)


def _hashbulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    stream_buckets: bool,
    metapage_cached: bool,
) -> IndexBulkDeleteResult:
    """``hashbulkdelete``: PostgreSQL 18's one page at a time, or (``stream_buckets``) 19's.

    PostgreSQL 19 streams the primary bucket pages (``hash_bulkdelete_read_stream_cb``:
    ``BUCKET_TO_BLKNO`` of the cached metapage for ``next_bucket .. max_bucket``;
    ``READ_STREAM_MAINTENANCE | USE_BATCHING``, ``info->strategy``, no per-buffer data). It
    begins the stream after ``_hash_getcachedmetap``; the development branch begins it before
    (stream set-up may process relcache invalidations that would free the cached copy). A bucket
    split while VACUUM runs resets the stream; synthetic indexes do not split.
    """
    from .. import begin_stream

    be = ctx.backend
    st = _HashState(ctx, index, strategy)
    content = _content(index)
    maxbucket = content.nbuckets - 1
    stream = None
    # HashBulkDeleteStreamPrivate: next_bucket .. max_bucket
    stream_private = {"next_bucket": 0, "max_bucket": maxbucket}

    def hash_bulkdelete_read_stream_cb(stream: Any, private: Any) -> int:
        """``hash_bulkdelete_read_stream_cb``: the next bucket's primary page."""
        if private["next_bucket"] > private["max_bucket"]:
            return InvalidBlockNumber
        bucket = private["next_bucket"]
        private["next_bucket"] = bucket + 1
        return int(content.bucket_block(bucket))

    def begin() -> Any:
        s = begin_stream(
            be,
            index,
            hash_bulkdelete_read_stream_cb,
            stream_private,
            flags=READ_STREAM_MAINTENANCE | READ_STREAM_USE_BATCHING,
            strategy=strategy,
        )
        return ctx.track_stream(s)

    if stream_buckets and ctx.version_at_least("20devel"):
        stream = begin()  # before _hash_getcachedmetap (20devel)
    if not metapage_cached:
        st.metabuf = st.getbuf_nostrategy(0)  # _hash_getcachedmetap keeps the pin
    if stream_buckets and stream is None:
        stream = begin()  # after _hash_getcachedmetap (19)
    for bucket in range(maxbucket + 1):
        if stream is not None:
            buf = stream.next_buffer()
            if buf < 0:
                raise ModelUsageError(f"bucket stream of {index.name!r} ended at bucket {bucket}")
        else:
            buf = st.getbuf(content.bucket_block(bucket))
        _hashbucketcleanup(st, bucket, buf, dead)
        be.release_buffer(buf)
    if st.metabuf < 0:
        st.metabuf = st.getbuf_nostrategy(0)
    # No split since the start (cur_maxbucket == hashm_maxbucket).
    if stream is not None:
        # Assert(read_stream_next_buffer(stream, NULL) == InvalidBuffer), then read_stream_end.
        if stream.next_buffer() >= 0:
            raise ModelUsageError(f"bucket stream of {index.name!r} went past bucket {maxbucket}")
        stream.end()
    # The tuple count is written back to the metapage (XLOG_HASH_UPDATE_META_PAGE).
    be.mark_buffer_dirty(st.metabuf, wal_logged=True)
    be.release_buffer(st.metabuf)
    if stats is None:
        stats = IndexBulkDeleteResult()
    stats.estimated_count = False
    stats.num_index_tuples = st.num_index_tuples
    stats.tuples_removed += st.tuples_removed
    ctx.notes["hash_overflow_pages_freed"] = ctx.notes.get("hash_overflow_pages_freed", 0) + st.freed
    return stats


# ---------------------------------------------------------------------------------------- GiST
def _gistvacuumscan(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems | None,
    stats: IndexBulkDeleteResult,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
) -> None:
    be = ctx.backend
    content = _content(index)
    stats.num_pages = 0
    stats.estimated_count = False
    stats.num_index_tuples = 0
    stats.pages_deleted = 0
    stats.pages_free = 0
    internal: list[int] = []
    empty: set[int] = set()

    def page_fn(buf: int) -> None:
        block = be.buffer_block(buf)
        page = content.page(ForkNumber.MAIN, block)
        _visit(ctx, block, page.nentries)
        if page.is_leaf:
            ndel = _dead_entries(page, dead) if dead is not None else 0
            if ndel:
                be.mark_buffer_dirty(buf, wal_logged=True)
                stats.tuples_removed += ndel
            remain = page.nentries - ndel
            if remain == 0:
                empty.add(block)
            else:
                stats.num_index_tuples += remain
        else:
            internal.append(block)
        be.release_buffer(buf)

    num_pages = _block_range_scan(ctx, index, 0, strategy, streamed, page_fn)
    stats.num_pages = num_pages
    _gistvacuum_delete_empty_pages(ctx, index, internal, empty, stats, strategy)


def _gistvacuum_delete_empty_pages(
    ctx: ScanContext,
    index: Relation,
    internal: list[int],
    empty: set[int],
    stats: IndexBulkDeleteResult,
    strategy: BufferAccessStrategy | None,
) -> None:
    """``gistvacuum_delete_empty_pages``: unlink empty leaves from their parents."""
    be = ctx.backend
    content = _content(index)
    remaining = len(empty)
    for block in sorted(internal):
        if remaining <= 0:
            break
        buf = be.read_buffer(index, block, ForkNumber.MAIN, strategy)
        page = content.page(ForkNumber.MAIN, block)
        children = [int(c) for c in (page.children if page.children is not None else ())]
        maxoff = len(children)
        todelete: list[int] = []
        for c in children:
            if len(todelete) >= maxoff - 1:
                break
            if c in empty:
                todelete.append(c)
        left = maxoff
        for leaf in todelete:
            if left <= 1:
                break
            leafbuf = be.read_buffer(index, leaf, ForkNumber.MAIN, strategy)
            be.mark_buffer_dirty(leafbuf, wal_logged=True)
            be.mark_buffer_dirty(buf, wal_logged=True)
            stats.pages_newly_deleted += 1
            stats.pages_deleted += 1
            left -= 1
            be.release_buffer(leafbuf)
        be.release_buffer(buf)
        remaining -= len(todelete)


# ---------------------------------------------------------------------------------------- dispatch
def index_bulkdelete(
    ctx: ScanContext,
    index: Relation,
    dead: DeadItems,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult:
    """``index_bulk_delete`` → the AM's ``ambulkdelete``."""
    kind = index_kind(index)
    if kind == "hash":
        return _hashbulkdelete(
            ctx, index, dead, stats, strategy, streamed and opts.hash_stream, opts.hash_metapage_cached
        )
    if kind in _AM_MODULES:
        am = importlib.import_module(f".{_AM_MODULES[kind]}", __package__)
        return am.ambulkdelete(ctx, index, dead, stats, strategy, streamed, opts)  # type: ignore[no-any-return]
    if stats is None:
        stats = IndexBulkDeleteResult()
    if kind == "btree":
        _btvacuumscan(ctx, index, dead, stats, strategy, streamed)
    else:
        _gistvacuumscan(ctx, index, dead, stats, strategy, streamed)
    return stats


def index_vacuumcleanup(
    ctx: ScanContext,
    index: Relation,
    stats: IndexBulkDeleteResult | None,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    opts: IndexVacuumOptions,
) -> IndexBulkDeleteResult | None:
    """``index_vacuum_cleanup`` → the AM's ``amvacuumcleanup``."""
    kind = index_kind(index)
    if kind in _AM_MODULES:
        am = importlib.import_module(f".{_AM_MODULES[kind]}", __package__)
        return am.amvacuumcleanup(ctx, index, stats, strategy, streamed, opts)  # type: ignore[no-any-return]
    if kind == "hash":
        if stats is None:
            return None
        stats.num_pages = index.nblocks(ForkNumber.MAIN)
        return stats
    if kind == "btree":
        # _bt_vacuum_needs_cleanup (no bulk delete) or _bt_set_cleanup_info: the metapage,
        # without strategy. No deleted pages await recycling, so no cleanup-only scan.
        _read_metapage(ctx, index)
        return stats
    if stats is None:
        stats = IndexBulkDeleteResult()
        _gistvacuumscan(ctx, index, None, stats, strategy, streamed)
    return stats


# ---------------------------------------------------------------------------------------- scans
_COMMON_PARAMS = (
    ScanParam(
        "buffer_usage_limit",
        int,
        None,
        "VACUUM ring in kB (0 = no ring; default vacuum_buffer_usage_limit)",
        minimum=0,
        maximum=16 * 1024 * 1024,
    ),
)


def _standalone(ctx: ScanContext, index: Relation, kind: str, buffer_usage_limit: int | None) -> Any:
    if index_kind(index) != kind:
        raise ModelUsageError(f"relation {index.name!r} is a {index_kind(index)} index, not a {kind} index")
    heap = _content(index).heap
    rel = heap.rel
    nblocks = rel.nblocks(ForkNumber.MAIN) if rel is not None else heap.spec.nblocks
    return heap_dead_items(heap, nblocks), vacuum_strategy(ctx.backend, buffer_usage_limit)


def _answer(stats: IndexBulkDeleteResult | None) -> dict[str, Any]:
    return stats.as_dict() if stats is not None else {}


def _bulkdelete_then_cleanup(
    ctx: ScanContext,
    index: Relation,
    kind: str,
    *,
    streamed: bool,
    buffer_usage_limit: int | None,
    opts: IndexVacuumOptions,
) -> dict[str, Any]:
    """One index's part of a VACUUM, run alone: ``ambulkdelete`` then ``amvacuumcleanup``.

    The dead TIDs are those phase I would collect from the heap ``index`` (which must be a
    ``kind`` index) is built on; both calls use the VACUUM ring and one cost-based-delay session,
    as VACUUM's index vacuuming and final index cleanup do (``lazy_vacuum_one_index``,
    ``lazy_cleanup_one_index``). The registered scans differ only in ``kind`` and ``opts``.
    """
    dead, strategy = _standalone(ctx, index, kind, buffer_usage_limit)
    begin_vacuum_cost(ctx.backend)
    bulk = index_bulkdelete(ctx, index, dead, None, strategy, streamed, opts)
    stats = index_vacuumcleanup(ctx, index, bulk, strategy, streamed, opts)
    end_vacuum_cost(ctx.backend)
    return _answer(stats)


@register_scan(
    "btvacuumscan",
    streamed_since="18",
    models="btbulkdelete → btvacuumscan → btvacuumpage, then btvacuumcleanup (nbtree.c)",
    description="btree bulk delete of the heap's dead TIDs with the VACUUM ring (streamed = PostgreSQL 18 "
    "block-range stream, MAINTENANCE|FULL|USE_BATCHING; unstreamed = PostgreSQL 16/17)",
    params=_COMMON_PARAMS,
)
def btvacuumscan(
    ctx: ScanContext, rel: Relation, *, streamed: bool, buffer_usage_limit: int | None = None
) -> dict[str, Any]:
    return _bulkdelete_then_cleanup(
        ctx, rel, "btree", streamed=streamed, buffer_usage_limit=buffer_usage_limit, opts=IndexVacuumOptions()
    )


@register_scan(
    "hashbulkdelete",
    streamed_since="19",
    models="hashbulkdelete → hashbucketcleanup → _hash_squeezebucket / _hash_freeovflpage "
    "(hash.c, hashovfl.c), then hashvacuumcleanup",
    description="hash bulk delete of the heap's dead TIDs with the VACUUM ring (unstreamed = PostgreSQL 18, "
    "one page at a time; streamed = PostgreSQL 19: the primary bucket pages streamed, the stream begun "
    "before the metapage read in 20devel)",
    params=(
        *_COMMON_PARAMS,
        ScanParam(
            "hash_metapage_cached", bool, False, "the backend has the metapage cached (read at the end)"
        ),
    ),
)
def hashbulkdelete(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    buffer_usage_limit: int | None = None,
    hash_metapage_cached: bool = False,
) -> dict[str, Any]:
    # Run alone, streamed means 19's code; inside VACUUM it is the hash_stream option.
    opts = IndexVacuumOptions(hash_stream=True, hash_metapage_cached=hash_metapage_cached)
    return _bulkdelete_then_cleanup(
        ctx, rel, "hash", streamed=streamed, buffer_usage_limit=buffer_usage_limit, opts=opts
    )


@register_scan(
    "gistvacuumscan",
    streamed_since="18",
    models="gistbulkdelete / gistvacuumcleanup → gistvacuumscan → gistvacuumpage, "
    "gistvacuum_delete_empty_pages (gistvacuum.c)",
    description="GiST bulk delete of the heap's dead TIDs with the VACUUM ring (streamed = PostgreSQL 18 "
    "block-range stream from the root; unstreamed = PostgreSQL 16/17)",
    params=_COMMON_PARAMS,
)
def gistvacuumscan(
    ctx: ScanContext, rel: Relation, *, streamed: bool, buffer_usage_limit: int | None = None
) -> dict[str, Any]:
    return _bulkdelete_then_cleanup(
        ctx, rel, "gist", streamed=streamed, buffer_usage_limit=buffer_usage_limit, opts=IndexVacuumOptions()
    )


# ---------------------------------------------------------------------------------------- shared
def block_range_pass(
    ctx: ScanContext,
    index: Relation,
    start: int,
    nblocks: int,
    strategy: BufferAccessStrategy | None,
    streamed: bool,
    page_fn: Any,
    *,
    flags: int = READ_STREAM_MAINTENANCE | READ_STREAM_FULL | READ_STREAM_USE_BATCHING,
) -> None:
    """The ``for (blkno = start; blkno < nblocks; blkno++)`` loop of the index passes PostgreSQL 19
    streams (``blbulkdelete``, ``blvacuumcleanup``, ``ginvacuumcleanup`` ...).

    Each block: ``vacuum_delay_point``, then the buffer (``read_stream_next_buffer`` of a
    block-range stream over ``start .. nblocks - 1``, or 18's ``ReadBufferExtended`` with
    ``strategy``), then ``page_fn(buf, blkno)``, which releases it. Streamed, the loop ends with
    ``Assert(read_stream_next_buffer(stream, NULL) == InvalidBuffer)`` and ``read_stream_end``.
    """
    from .. import begin_stream

    be = ctx.backend
    stream = None
    if streamed:
        stream = begin_stream(
            be,
            index,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(start, nblocks),
            flags=flags,
            strategy=strategy,
        )
        ctx.track_stream(stream)
    for blkno in range(start, nblocks):
        vacuum_delay_point(be)
        if stream is not None:
            buf = stream.next_buffer()
        else:
            buf = be.read_buffer(index, blkno, ForkNumber.MAIN, strategy)
        page_fn(buf, blkno)
    if stream is not None:
        if stream.next_buffer() >= 0:
            raise ModelUsageError(f"the block-range stream of {index.name!r} went past block {nblocks - 1}")
        stream.end()


def read_metapage_once(ctx: ScanContext, index: Relation, block: int = 0) -> None:
    """An AM's ``init*State`` filling ``rd_amcache`` from the metapage (``ReadBuffer``, no strategy):
    read only the first time this backend needs it (``ScanContext.amcache``)."""
    if index.name in ctx.amcache:
        return
    be = ctx.backend
    be.release_buffer(be.read_buffer(index, block, ForkNumber.MAIN, None))
    ctx.amcache.add(index.name)


def index_fsm_vacuum(ctx: ScanContext, index: Relation) -> None:
    """``IndexFreeSpaceMapVacuum`` / ``FreeSpaceMapVacuum``: the whole index FSM (nothing without
    one: a freshly built index has none, except BRIN)."""
    from ._forkmaps import fsm_vacuum_range

    fsm_vacuum_range(ctx.backend, index, 0, InvalidBlockNumber)


def record_free_index_page(ctx: ScanContext, index: Relation, blkno: int) -> None:
    """``RecordFreeIndexPage``: the page's FSM leaf, the fork extended if it does not reach it."""
    from ._forkmaps import record_free_space

    record_free_space(ctx.backend, index, blkno)
