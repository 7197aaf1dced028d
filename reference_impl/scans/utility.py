"""Utility copies of whole relations: ``log_newpage_range`` and CREATE DATABASE ... STRATEGY WAL_LOG.

Both read every block of a fork in order and do something per page that the stream does not
care about, which makes them the textbook case for a block-range stream.

**log_newpage_range** (``xloginsert.c``) WAL-logs a range ``[start, end)`` of a fork as full-page
images, for example after an index build that wrote its pages outside shared buffers. It works in
batches of up to ``XLR_MAX_BLOCK_ID`` = 32 pages: each block is read with
``ReadBufferExtended(RBM_NORMAL, no strategy)`` and locked exclusively; an all-zero ("new") page is
released at once and not logged, and does not count towards the batch, so a batch keeps reading
until it holds 32 pages to log or the range ends; the batch's pages are marked dirty, written as
one ``XLOG_FPI`` record and released. Up to 32 buffers therefore stay pinned while a batch is
collected, which the stream's pin budget feels. PostgreSQL 18 and master read one block at a time
(the unstreamed variant). The streamed variant is a prototype: a ``block_range_read_stream_cb``
stream over ``[start, end)``, flags ``MAINTENANCE | FULL | USE_BATCHING`` (maintenance work, the
whole range is wanted), no strategy, consumed in the same batches. Every block of the range is
consumed in both variants, so the prototype reads exactly the same blocks.

**CREATE DATABASE ... STRATEGY = WAL_LOG** (``dbcommands.c`` ``CreateDatabaseUsingWalLog``,
``bufmgr.c`` ``CreateAndCopyRelationData`` / ``RelationCopyStorageUsingBuffer``) first reads the
source database's ``pg_class`` one block at a time through a BULKREAD ring
(``ScanSourceDatabasePgClass``, not streamed in any version), then copies each relation: the
destination's storage is created (the main fork always, every other fork the source has), and
for each fork with blocks the destination is extended to full size with one ``smgrextend`` write
of the last block, then every source block is read through a BULKREAD ring and copied into a
destination buffer taken with ``RBM_ZERO_AND_LOCK`` (no read) from a BULKWRITE ring (16 MB),
marked dirty and WAL-logged (permanent relations and init forks). PostgreSQL 17 and 18 read the
source through a stream (``READ_STREAM_FULL | READ_STREAM_USE_BATCHING``, the BULKREAD ring); the
unstreamed variant is PostgreSQL 16's ``ReadBufferWithoutRelcache`` per block. Both rings are
created per fork and freed after it. The destination relations are created in the instance's
storage as ``"<dest>/<source name>"``.
"""

from __future__ import annotations

from typing import Any

from ..buffers.bufmgr import RBM_ZERO_AND_LOCK, Backend
from ..buffers.strategy import BAS_BULKREAD, BAS_BULKWRITE, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import FORK_NAMES, ForkNumber, Relation, fork_from_name
from .base import ScanContext, ScanParam, register_scan
from .checksums import fresh_cluster

__all__ = [
    "log_newpage_range",
    "createdb_wal_log",
    "XLR_MAX_BLOCK_ID",
    "LOG_NEWPAGE_STREAM_FLAGS",
    "COPY_STREAM_FLAGS",
]

XLR_MAX_BLOCK_ID = 32
LOG_NEWPAGE_STREAM_FLAGS = READ_STREAM_MAINTENANCE | READ_STREAM_FULL | READ_STREAM_USE_BATCHING
COPY_STREAM_FLAGS = READ_STREAM_FULL | READ_STREAM_USE_BATCHING


# ---------------------------------------------------------------------------------- log_newpage_range
def _page_is_new(rel: Relation, fork: ForkNumber, block: int, zero_from: int | None) -> bool:
    """``PageIsNew``: an all-zero page (past ``zero_from``, or as the content says)."""
    if zero_from is not None and block >= zero_from:
        return True
    content = rel.content
    if content is None:
        return False
    page = content.page(fork, block)
    return bool(getattr(page, "is_new", False))


@register_scan(
    "log_newpage_range",
    models="log_newpage_range (src/backend/access/transam/xloginsert.c)",
    description=(
        "WAL-log a block range as full-page images in batches of 32; unstreamed = PostgreSQL 18 and "
        "master (ReadBufferExtended per block, no strategy), streamed = a block-range-stream prototype"
    ),
    params=(
        ScanParam("fork", str, "main", "relation fork", choices=tuple(FORK_NAMES.values())),
        ScanParam("start_block", int, 0, "first block", minimum=0),
        ScanParam("end_block", int, None, "end of the range, exclusive (default the fork's size)", minimum=0),
        ScanParam("zero_from", int, None, "blocks from here on are all-zero (new) pages", minimum=0),
    ),
)
def log_newpage_range(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    fork: str = "main",
    start_block: int = 0,
    end_block: int | None = None,
    zero_from: int | None = None,
) -> dict[str, Any]:
    forknum = fork_from_name(fork)
    if not rel.exists(forknum):
        raise ModelUsageError(f"fork {fork!r} of relation {rel.name!r} does not exist")
    nblocks = rel.nblocks(forknum)
    end = nblocks if end_block is None else end_block
    if end > nblocks or start_block > end:
        raise ModelUsageError(
            f"range [{start_block}, {end}) is invalid: allowed 0 <= start_block <= end_block <= {nblocks} "
            f"(fork {FORK_NAMES[forknum]} of {rel.name!r})"
        )
    be = ctx.backend
    stream = None
    if streamed:
        from .. import begin_stream

        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(start_block, end),
            fork=forknum,
            flags=LOG_NEWPAGE_STREAM_FLAGS,
            strategy=None,
        )
        ctx.track_stream(stream)
    logged = 0
    records = 0
    new_pages = 0
    blkno = start_block
    while blkno < end:
        be.check_for_interrupts()
        batch: list[int] = []
        while len(batch) < XLR_MAX_BLOCK_ID and blkno < end:
            if stream is not None:
                buf = stream.next_buffer()
            else:
                buf = be.read_buffer(rel, blkno, forknum, None)
            ctx.visit(blkno)
            if _page_is_new(rel, forknum, blkno, zero_from):
                new_pages += 1
                be.release_buffer(buf)
            else:
                batch.append(buf)
            blkno += 1
        if not batch:
            # Only new pages were left: the inner loop reached the end of the range.
            break
        for buf in batch:
            be.mark_buffer_dirty(buf, wal_logged=True)
        # One XLOG_FPI record with up to 32 images.
        ctx.process_page(len(batch))
        records += 1
        for buf in batch:
            be.release_buffer(buf)
        logged += len(batch)
    if stream is not None:
        stream.end()
    return {
        "pages_logged": logged,
        "wal_records": records,
        "new_pages": new_pages,
        "fork": FORK_NAMES[forknum],
    }


# ---------------------------------------------------------------------------------- CREATE DATABASE
def _copy_fork(
    ctx: ScanContext, src: Relation, dst: Relation, fork: ForkNumber, *, streamed: bool
) -> tuple[int, int]:
    """``RelationCopyStorageUsingBuffer``: (pages copied, pages WAL-logged)."""
    be: Backend = ctx.backend
    nblocks = src.nblocks(fork)
    if nblocks == 0:
        return 0, 0
    use_wal = src.persistence == "p" or fork == ForkNumber.INIT
    # smgrextend of the last block: the destination file gets its full size in one write.
    dst.set_nblocks(fork, nblocks)
    done = be.storage.write(dst, fork, nblocks - 1, be.clock.now)
    be.clock.wait_until(done)
    src_strategy = get_access_strategy(BAS_BULKREAD, be.settings)
    dst_strategy = get_access_strategy(BAS_BULKWRITE, be.settings)
    stream = None
    if streamed:
        from .. import begin_stream

        stream = begin_stream(
            be,
            src,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(0, nblocks),
            fork=fork,
            flags=COPY_STREAM_FLAGS,
            strategy=src_strategy,
        )
        ctx.track_stream(stream)
    for blkno in range(nblocks):
        be.check_for_interrupts()
        if stream is not None:
            src_buf = stream.next_buffer()
        else:
            src_buf = be.read_buffer(src, blkno, fork, src_strategy)
        dst_buf = be.read_buffer(dst, be.buffer_block(src_buf), fork, dst_strategy, RBM_ZERO_AND_LOCK)
        be.mark_buffer_dirty(dst_buf, wal_logged=use_wal)
        ctx.process_page(0)  # memcpy of the page and, with WAL, the image into the WAL buffers
        be.release_buffer(dst_buf)
        be.release_buffer(src_buf)
        ctx.visit(blkno)
    if stream is not None:
        stream.end()
    if src_strategy is not None:
        src_strategy.free()
    if dst_strategy is not None:
        dst_strategy.free()
    return nblocks, nblocks if use_wal else 0


def _scan_source_pg_class(ctx: ScanContext, pg_class: Relation) -> int:
    """``ScanSourceDatabasePgClass``: every block of the source ``pg_class``, one at a time."""
    be = ctx.backend
    strategy = get_access_strategy(BAS_BULKREAD, be.settings)
    n = pg_class.nblocks(ForkNumber.MAIN)
    for blkno in range(n):
        be.check_for_interrupts()
        buf = be.read_buffer(pg_class, blkno, ForkNumber.MAIN, strategy)
        ctx.process_page(1)
        be.release_buffer(buf)
    if strategy is not None:
        strategy.free()
    return n


def _unique_dest(ctx: ScanContext, dest: str | None) -> str:
    storage = ctx.instance.storage
    names = {r.name for r in storage.relations()}
    if dest is not None:
        if any(n.startswith(f"{dest}/") for n in names):
            raise ModelUsageError(f"database {dest!r} already exists: choose another dest name")
        return dest
    k = 1
    while any(n.startswith(f"newdb{k}/") for n in names):
        k += 1
    return f"newdb{k}"


@register_scan(
    "createdb_wal_log",
    streamed_since="18",
    models=(
        "CREATE DATABASE ... STRATEGY = WAL_LOG (dbcommands.c CreateDatabaseUsingWalLog; bufmgr.c "
        "CreateAndCopyRelationData / RelationCopyStorageUsingBuffer)"
    ),
    description=(
        "copy every fork of the source relations block by block into new relations; streamed = "
        "PostgreSQL 17/18 (FULL|USE_BATCHING stream, BULKREAD source ring, BULKWRITE destination ring), "
        "unstreamed = PostgreSQL 16 (one ReadBuffer per source block)"
    ),
    params=(
        ScanParam("others", str, "", "further source relations: comma-separated names"),
        ScanParam("cluster", bool, False, "also copy a fresh PostgreSQL 18.6 template1's catalogs"),
        ScanParam("dest", str, None, "destination database name (default newdbN)"),
    ),
)
def createdb_wal_log(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    others: str = "",
    cluster: bool = False,
    dest: str | None = None,
) -> dict[str, Any]:
    storage = ctx.instance.storage
    sources: list[Relation] = []
    pg_class_blocks = 0
    if cluster:
        catalogs = fresh_cluster(ctx.instance, databases=("template1",))
        # The shared catalogs live in global/ and are not copied.
        sources.extend(r for r in catalogs if r.name.startswith("template1/"))
        pg_class_blocks = _scan_source_pg_class(ctx, storage.relation("template1/pg_class"))
    sources.append(rel)
    for name in (n.strip() for n in others.split(",")):
        if name:
            sources.append(storage.relation(name))
    for src in sources:
        if src.persistence == "t":
            raise ModelUsageError(f"relation {src.name!r} is temporary: CREATE DATABASE does not copy those")
    dbname = _unique_dest(ctx, dest)
    copied = 0
    wal = 0
    forks = 0
    mismatched = 0
    for src in sources:
        # RelationCreateStorage: the destination's main fork exists from the start.
        dst = storage.create_relation(
            f"{dbname}/{src.name}", forks={ForkNumber.MAIN: 0}, persistence=src.persistence
        )
        for fork in src.forks():
            if fork != ForkNumber.MAIN:
                dst.set_nblocks(fork, 0)  # smgrcreate of an extra fork
            n, w = _copy_fork(ctx, src, dst, fork, streamed=streamed)
            if dst.nblocks(fork) != src.nblocks(fork):
                mismatched += 1
            forks += 1
            copied += n
            wal += w
    ctx.notes["dest"] = dbname
    return {
        "relations": len(sources),
        "forks_copied": forks,
        "pages_copied": copied,
        "pages_wal_logged": wal,
        "pg_class_blocks_scanned": pg_class_blocks,
        "forks_mismatched": mismatched,
    }
