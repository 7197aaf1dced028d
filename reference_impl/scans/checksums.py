"""Online data-checksum enabling: the worker that rewrites every page of a database.

``pg_enable_data_checksums(cost_delay, cost_limit)`` (master, ``datachecksum_state.c``; not in
PostgreSQL 18) starts a launcher, which starts one worker per database. The worker
(``DataChecksumsWorkerMain``) lists the database's relations with storage (plus the shared
catalogs, in the first database only), creates one VACUUM ring (``GetAccessStrategy(BAS_VACUUM)``,
2 MB = 256 buffers, independent of ``vacuum_buffer_usage_limit``) and, for each relation and each
fork that exists, calls ``ProcessSingleRelationFork``:

* ``numblocks`` is read **once**, when the fork is started: blocks appended later are written
  with checksums by whoever appends them (the cluster is in ``inprogress-on``), so the loop is
  ``for blknum in 0 .. numblocks-1``;
* each block is read with ``ReadBufferExtended(RBM_NORMAL, ring)``, locked exclusively, marked
  dirty and, for WAL-logged relations (and every init fork), logged as a full-page image
  (``log_newpage_buffer``), then released;
* then the abort check: if ``pg_disable_data_checksums()`` was called meanwhile the function
  returns at once (the block just processed is the last one);
* then the progress row (``pg_stat_progress_data_checksums``: ``blocks_total`` / ``blocks_done``
  of the current fork) and ``vacuum_delay_point``: the worker reuses VACUUM's cost-based delay,
  with ``cost_delay`` / ``cost_limit`` taken from the SQL call. Every hit, miss and newly dirtied
  page adds ``vacuum_cost_page_hit`` / ``_miss`` / ``_dirty`` to the balance; once the balance
  reaches the limit the worker sleeps ``cost_delay × balance / limit`` ms (at most 4 × cost_delay)
  and the balance restarts from 0. Here the sleep moves the virtual clock.

The **unstreamed** variant is exactly that (master). The **streamed** variant is the seed
thread's v2 patch (CommitFest 6841, aimed at v20): a ``BlockRangeReadStreamPrivate`` over
``[0, numblocks)`` with the same ring, flags ``MAINTENANCE | USE_BATCHING`` plus ``FULL`` (the
patch text is not in the thread; ``full=False`` gives the ramp-up form). Three behaviours the
thread discusses are modelled and tested:

* **numblocks fixed at start** still holds: the callback's range ends at the ``numblocks`` read
  when the fork was started, so a relation that grows meanwhile is never read past it.
* **Abort drains**: on abort the streamed loop calls ``read_stream_end``, which waits for and
  releases what the stream had queued (and, in PostgreSQL 18's stream, still reads the pending
  read). Those read-ahead blocks are read although the worker will not process them, and one of
  them can fail: the I/O error surfaces from ``end()`` after the abort was requested. It can only
  be an error of a real block of the fork, never a read at or past ``numblocks``.
* **Empty forks**: v2 creates a stream for every existing fork, even one of 0 blocks. The default
  here skips the stream when ``numblocks == 0`` (the fast path the thread suggests);
  ``empty_fork_stream=True`` restores v2's behaviour. A stream costs no I/O for an empty fork,
  only CPU: ``stream_begin_us`` of virtual time per ``read_stream_begin_relation`` +
  ``read_stream_end`` pair (an estimate: allocating and initialising the queue and the
  ``ReadBuffersOperation`` array, one callback call, freeing), charged for every stream the
  streamed variant creates. ``ChecksumsRun.streams_created`` counts them.

``fresh_cluster`` builds the "other relations" of a cluster: the system catalogs of a freshly
initialised PostgreSQL 18.6 cluster (three databases plus the shared catalogs, fork sizes
measured on a real server), optionally with the pages a relation-opening pass leaves in shared
buffers, which is what ``docs/scans/utility.md`` uses to put the model beside the thread's
958,482 → 60,248 reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..buffers.strategy import BAS_VACUUM, BufferAccessStrategy, get_access_strategy
from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import FORK_NAMES, ForkNumber, Relation
from ._pg18_catalog import CATALOG_LINES
from .base import ScanContext, ScanParam, register_scan

if TYPE_CHECKING:
    from ..buffers.bufmgr import Backend, BufferManagerHost

__all__ = [
    "ProgressSample",
    "ChecksumsRun",
    "enable_data_checksums",
    "data_checksums",
    "fresh_cluster",
    "CLUSTER_DATABASES",
    "checksums_stream_flags",
]

CLUSTER_DATABASES = ("template1", "template0", "postgres")
"""The databases of a fresh cluster, in ``pg_database`` order (the order the launcher uses)."""

_DEFAULT_STREAM_BEGIN_US = 1.0
_DEFAULT_PROGRESS_EVERY = 1024


def checksums_stream_flags(full: bool = True) -> int:
    """The stream flags the streamed variant uses (``full``: ``READ_STREAM_FULL`` too)."""
    flags = READ_STREAM_MAINTENANCE | READ_STREAM_USE_BATCHING
    return flags | READ_STREAM_FULL if full else flags


@dataclass(frozen=True, slots=True)
class ProgressSample:
    """One reading of the worker's ``pg_stat_progress_data_checksums`` row."""

    time_us: int
    relation: str
    fork: str
    blocks_total: int
    blocks_done: int
    relations_done: int
    relations_total: int


@dataclass
class ChecksumsRun:
    """What one ``DataChecksumsWorkerMain`` pass over a list of relations did.

    ``answer`` is the same for both variants (given a block-count abort); the rest describes how
    the variant got there: the progress timeline, streams created, cost-based sleeps, and what
    the stream still did after an abort (``drained_buffers``: buffers ``read_stream_end``
    released without the worker processing them).
    """

    answer: dict[str, Any]
    progress: list[ProgressSample] = field(default_factory=list)
    streams_created: int = 0
    stream_cpu_us: float = 0.0
    sleeps: int = 0
    slept_us: int = 0
    drained_buffers: int = 0
    aborted_at: tuple[str, str, int] | None = None


def _needs_wal(rel: Relation, fork: ForkNumber) -> bool:
    """``RelationNeedsWAL(reln) || forkNum == INIT_FORKNUM`` (wal_level above minimal)."""
    return rel.persistence == "p" or fork == ForkNumber.INIT


class _Worker:
    """``DataChecksumsWorkerMain`` + ``ProcessSingleRelationByOid`` + ``ProcessSingleRelationFork``."""

    def __init__(
        self,
        ctx: ScanContext,
        relations: list[Relation],
        *,
        streamed: bool,
        cost_delay: int,
        cost_limit: int,
        abort_after_blocks: int | None,
        abort_at_us: int | None,
        empty_fork_stream: bool,
        full: bool,
        grow_during: int,
        progress_every: int,
        stream_begin_us: float,
    ) -> None:
        self.ctx = ctx
        self.be: Backend = ctx.backend
        self.relations = relations
        self.streamed = streamed
        self.cost_delay = cost_delay
        self.cost_limit = cost_limit
        self.abort_after_blocks = abort_after_blocks
        self.abort_at_us = abort_at_us
        self.empty_fork_stream = empty_fork_stream
        self.flags = checksums_stream_flags(full)
        self.grow_during = grow_during
        self.progress_every = progress_every
        self.stream_begin_us = stream_begin_us
        self.strategy: BufferAccessStrategy | None = get_access_strategy(BAS_VACUUM, self.be.settings)
        self.run = ChecksumsRun(answer={})
        self.t0 = self.be.clock.now
        self.pages = 0
        self.wal_pages = 0
        self.forks = 0
        self.empty_forks = 0
        self.blocks_total = 0
        self.relations_done = 0
        self.grown = False
        self.digest = 0
        self.aborted = False

    # ------------------------------------------------------------------------------ helpers
    def _abort_requested(self) -> bool:
        """``CHECK_FOR_WORKER_ABORT_REQUEST``: has ``pg_disable_data_checksums()`` been called?"""
        if self.abort_after_blocks is not None and self.pages >= self.abort_after_blocks:
            return True
        return self.abort_at_us is not None and self.be.clock.now - self.t0 >= self.abort_at_us

    def _progress(self, rel: Relation, fork: ForkNumber, total: int, done: int) -> None:
        self.run.progress.append(
            ProgressSample(
                self.be.clock.now,
                rel.name,
                FORK_NAMES[fork],
                total,
                done,
                self.relations_done,
                len(self.relations),
            )
        )

    def _vacuum_delay_point(self) -> None:
        """``vacuum_delay_point(false)``: sleep once the cost balance reaches the limit."""
        be = self.be
        be.check_for_interrupts()
        if self.cost_delay <= 0:
            return
        st = be.stats
        balance = st.vacuum_cost_balance
        if balance >= self.cost_limit:
            msec = self.cost_delay * balance / self.cost_limit
            msec = min(msec, self.cost_delay * 4)
            us = int(msec * 1000)
            be.clock.advance(us)
            self.run.sleeps += 1
            self.run.slept_us += us
            st.vacuum_cost_balance = 0

    def _grow(self, rel: Relation, fork: ForkNumber) -> None:
        """Concurrent inserts: the fork being processed grows after its first block."""
        if self.grow_during and not self.grown:
            rel.extend(fork, self.grow_during)
            self.grown = True

    # ------------------------------------------------------------------------------ one fork
    def process_fork(self, rel: Relation, fork: ForkNumber) -> bool:
        """``ProcessSingleRelationFork``: False if aborted."""
        be = self.be
        ctx = self.ctx
        numblocks = rel.nblocks(fork)
        self.forks += 1
        self.blocks_total += numblocks
        if numblocks == 0:
            self.empty_forks += 1
        self._progress(rel, fork, numblocks, 0)
        stream = None
        if self.streamed and (numblocks > 0 or self.empty_fork_stream):
            from .. import begin_stream

            stream = begin_stream(
                be,
                rel,
                block_range_read_stream_cb,
                BlockRangeReadStreamPrivate(0, numblocks),
                fork=fork,
                flags=self.flags,
                strategy=self.strategy,
            )
            ctx.track_stream(stream)
            self.run.streams_created += 1
            self.run.stream_cpu_us += self.stream_begin_us
            be.cpu(self.stream_begin_us)
        # Hot loop: one iteration per page of the database, so the per-fork constants are local.
        strategy = self.strategy
        wal = _needs_wal(rel, fork)
        every = self.progress_every
        abort_blocks = self.abort_after_blocks
        abort_us = None if self.abort_at_us is None else self.t0 + self.abort_at_us
        clock = be.clock
        read_buffer = be.read_buffer
        mark_dirty = be.mark_buffer_dirty
        release = be.release_buffer
        visit = ctx.visit
        process_page = ctx.process_page
        delay = self._vacuum_delay_point if self.cost_delay > 0 else None
        key = rel.relid * 8191 + int(fork) * 131
        digest = self.digest
        pages = self.pages
        for blknum in range(numblocks):
            buf = stream.next_buffer() if stream is not None else read_buffer(rel, blknum, fork, strategy)
            # Exclusive lock, MarkBufferDirty, log_newpage_buffer (an FPI: the page gets an LSN
            # not yet flushed, so the ring must flush WAL before it can reuse the buffer).
            mark_dirty(buf, wal_logged=wal)
            process_page(0)  # XLogInsert of an 8 kB image: the same CPU in both variants
            release(buf)
            visit(blknum)
            pages += 1
            digest = (digest * 1000003 + key + blknum) & 0xFFFFFFFFFFFF
            if blknum == 0 and self.grow_during:
                self._grow(rel, fork)
            if (abort_blocks is not None and pages >= abort_blocks) or (
                abort_us is not None and clock.now >= abort_us
            ):
                self._account(pages, digest, wal, blknum + 1)
                self.aborted = True
                self.run.aborted_at = (rel.name, FORK_NAMES[fork], blknum)
                self._progress(rel, fork, numblocks, blknum + 1)
                if stream is not None:
                    consumed = stream.stats.buffers_returned
                    # v2: read_stream_end() drains what the stream queued; an I/O error of a
                    # read-ahead block is raised here, after the abort was requested.
                    stream.end()
                    self.run.drained_buffers += stream.stats.buffers_returned - consumed
                return False
            done = blknum + 1
            if done % every == 0 or done == numblocks:
                self._progress(rel, fork, numblocks, done)
            if delay is not None:
                delay()
            elif be.cancel_pending:
                be.check_for_interrupts()
        self._account(pages, digest, wal, numblocks)
        if stream is not None:
            stream.end()
        return True

    def _account(self, pages: int, digest: int, wal: bool, processed: int) -> None:
        self.pages = pages
        self.digest = digest
        if wal:
            self.wal_pages += processed

    # ------------------------------------------------------------------------------ database
    def process(self) -> ChecksumsRun:
        """``DataChecksumsWorkerMain``'s relation loop."""
        be = self.be
        saved_active = be.vacuum_cost_active
        be.vacuum_cost_active = self.cost_delay > 0
        be.stats.vacuum_cost_balance = 0
        try:
            for rel in self.relations:
                ok = True
                for fork in rel.forks():
                    if not self.process_fork(rel, fork):
                        ok = False
                        break
                if not ok:
                    break
                self.relations_done += 1
                be.check_for_interrupts()
                if self._abort_requested():
                    self.aborted = True
                    break
        finally:
            be.vacuum_cost_active = saved_active
        self.run.answer = {
            "relations": len(self.relations),
            "relations_done": self.relations_done,
            "forks": self.forks,
            "empty_forks": self.empty_forks,
            "blocks_total": self.blocks_total,
            "pages_checksummed": self.pages,
            "pages_wal_logged": self.wal_pages,
            "aborted": self.aborted,
            "digest": self.digest,
        }
        return self.run


def enable_data_checksums(
    ctx: ScanContext | Backend,
    relations: list[Relation],
    *,
    streamed: bool,
    cost_delay: int = 0,
    cost_limit: int = 100,
    abort_after_blocks: int | None = None,
    abort_at_us: int | None = None,
    empty_fork_stream: bool = False,
    full: bool = True,
    grow_during: int = 0,
    progress_every: int = _DEFAULT_PROGRESS_EVERY,
    stream_begin_us: float = _DEFAULT_STREAM_BEGIN_US,
) -> ChecksumsRun:
    """Process every fork of every relation as one data-checksums worker would.

    ``relations`` is the database, in the order the worker lists them. ``cost_delay`` (ms) and
    ``cost_limit`` are ``pg_enable_data_checksums``' arguments. ``abort_after_blocks`` /
    ``abort_at_us`` make ``pg_disable_data_checksums()`` arrive after that many processed blocks
    / that much virtual time since the start. ``grow_during`` appends blocks to the fork being
    processed once its first block is done. Progress is sampled at the start of every fork,
    every ``progress_every`` blocks, at its end and at an abort.
    """
    if not isinstance(ctx, ScanContext):
        ctx = ScanContext(ctx, keep_blocks=False)
    if cost_delay < 0:
        raise ModelUsageError(f"cost_delay {cost_delay} is invalid: cost delay cannot be a negative value")
    if cost_limit <= 0:
        raise ModelUsageError(f"cost_limit {cost_limit} is invalid: cost limit must be greater than zero")
    if progress_every < 1:
        raise ModelUsageError(f"progress_every {progress_every} is invalid: allowed >= 1")
    if stream_begin_us < 0:
        raise ModelUsageError(f"stream_begin_us {stream_begin_us} is invalid: allowed >= 0")
    for rel in relations:
        if rel.persistence == "t":
            raise ModelUsageError(
                f"relation {rel.name!r} is temporary: the worker cannot reach other sessions' temporary "
                "tables (it waits for them to go away instead)"
            )
    worker = _Worker(
        ctx,
        relations,
        streamed=streamed,
        cost_delay=cost_delay,
        cost_limit=cost_limit,
        abort_after_blocks=abort_after_blocks,
        abort_at_us=abort_at_us,
        empty_fork_stream=empty_fork_stream,
        full=full,
        grow_during=grow_during,
        progress_every=progress_every,
        stream_begin_us=stream_begin_us,
    )
    return worker.process()


# ---------------------------------------------------------------------------------- cluster
def _parse_ranges(text: str) -> list[int]:
    if text == ".":
        return []
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _catalog_rows() -> list[tuple[str, bool, list[int | None], list[int]]]:
    rows = []
    for line in CATALOG_LINES.splitlines():
        name, scope, main, fsm, vm, init, resident = line.split()
        sizes = [None if s == "-" else int(s) for s in (main, fsm, vm, init)]
        rows.append((name, scope == "S", sizes, _parse_ranges(resident)))
    return rows


def fresh_cluster(
    instance: BufferManagerHost,
    *,
    databases: tuple[str, ...] = CLUSTER_DATABASES,
    resident: bool = False,
) -> list[Relation]:
    """The catalogs of a freshly initialised PostgreSQL 18.6 cluster, in the worker's order.

    Creates (or reuses, if they exist) ``"<db>/<catalog>"`` relations for each database and
    ``"global/<catalog>"`` for the shared catalogs, with the fork sizes measured on a real
    server (see ``_pg18_catalog``). The list is in processing order: database by database, each
    in ``pg_class`` order, the shared catalogs inside the first database's list (the launcher has
    the first worker process them). With ``resident`` the pages a relation-opening pass leaves in
    shared buffers are made resident (the back door, nothing counted).
    """
    if not databases:
        raise ModelUsageError("fresh_cluster needs at least one database (e.g. 'postgres')")
    if len(set(databases)) != len(databases):
        raise ModelUsageError(f"database names {databases!r} repeat: allowed distinct names")
    storage = instance.storage
    out: list[Relation] = []
    for i, db in enumerate(databases):
        for name, shared, sizes, res in _catalog_rows():
            if shared and i > 0:
                continue
            full = f"global/{name}" if shared else f"{db}/{name}"
            try:
                rel = storage.relation(full)
            except ModelUsageError:
                forks = {ForkNumber(f): n for f, n in enumerate(sizes) if n is not None}
                rel = storage.create_relation(full, forks=forks, is_catalog=True)
            if resident and res:
                instance.prewarm(rel, res, ForkNumber.MAIN)
            out.append(rel)
    return out


def _database_of(
    ctx: ScanContext, rel: Relation, others: str, cluster: bool, resident: bool
) -> list[Relation]:
    relations: list[Relation] = []
    if cluster:
        relations.extend(fresh_cluster(ctx.instance, resident=resident))
    elif resident:
        raise ModelUsageError("cluster_resident needs cluster=True (it prewarms the cluster's catalogs)")
    relations.append(rel)
    if others:
        storage = ctx.instance.storage
        if others == "*":
            seen = {r.relid for r in relations}
            extra = sorted((r for r in storage.relations() if r.relid not in seen), key=lambda r: r.relid)
            relations.extend(r for r in extra if r.persistence != "t")
        else:
            for name in (n.strip() for n in others.split(",")):
                if name:
                    relations.append(storage.relation(name))
    return relations


@register_scan(
    "data_checksums",
    models="ProcessSingleRelationFork (master, src/backend/postmaster/datachecksum_state.c)",
    description=(
        "online data-checksum enabling over a database: every fork of every relation, VACUUM ring, "
        "mark dirty + full-page image, cost-based delay; unstreamed = master, streamed = the seed "
        "thread's v2 patch (block-range stream per fork, empty forks skipped unless asked)"
    ),
    params=(
        ScanParam("cost_delay", int, 0, "pg_enable_data_checksums cost_delay (ms)", minimum=0),
        ScanParam("cost_limit", int, 100, "pg_enable_data_checksums cost_limit", minimum=1),
        ScanParam(
            "abort_after_blocks", int, None, "pg_disable_data_checksums() after this many blocks", minimum=0
        ),
        ScanParam(
            "abort_at_us", int, None, "pg_disable_data_checksums() at this virtual time (µs)", minimum=0
        ),
        ScanParam("empty_fork_stream", bool, False, "streamed: create a stream for empty forks too (v2)"),
        ScanParam("full", bool, True, "streamed: READ_STREAM_FULL (no ramp-up)"),
        ScanParam(
            "grow_during",
            int,
            0,
            "blocks appended to the fork being processed after its first block",
            minimum=0,
        ),
        ScanParam(
            "progress_every", int, _DEFAULT_PROGRESS_EVERY, "progress sample interval (blocks)", minimum=1
        ),
        ScanParam(
            "stream_begin_us", float, _DEFAULT_STREAM_BEGIN_US, "CPU per stream begin+end (µs)", minimum=0
        ),
        ScanParam("others", str, "", "further relations: comma-separated names, or * for all"),
        ScanParam("cluster", bool, False, "process a fresh PostgreSQL 18.6 cluster's catalogs first"),
        ScanParam("cluster_resident", bool, False, "with cluster: relcache-touched catalog pages resident"),
    ),
)
def data_checksums(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    cost_delay: int = 0,
    cost_limit: int = 100,
    abort_after_blocks: int | None = None,
    abort_at_us: int | None = None,
    empty_fork_stream: bool = False,
    full: bool = True,
    grow_during: int = 0,
    progress_every: int = _DEFAULT_PROGRESS_EVERY,
    stream_begin_us: float = _DEFAULT_STREAM_BEGIN_US,
    others: str = "",
    cluster: bool = False,
    cluster_resident: bool = False,
) -> dict[str, Any]:
    relations = _database_of(ctx, rel, others, cluster, cluster_resident)
    run = enable_data_checksums(
        ctx,
        relations,
        streamed=streamed,
        cost_delay=cost_delay,
        cost_limit=cost_limit,
        abort_after_blocks=abort_after_blocks,
        abort_at_us=abort_at_us,
        empty_fork_stream=empty_fork_stream,
        full=full,
        grow_during=grow_during,
        progress_every=progress_every,
        stream_begin_us=stream_begin_us,
    )
    ctx.notes["checksums"] = run
    return run.answer
