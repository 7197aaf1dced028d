"""Observing what a PostgreSQL 18 server read: statistics diffs, resident pages, eviction.

How a measurement stays exact
-----------------------------
``pg_stat_io`` aggregates per *backend type*, so any other client backend -- including the
harness's own bookkeeping queries -- would pollute a before/after diff. The harness avoids that:

1. The **measured session** is one backend. Its own I/O is read with PostgreSQL 18's
   per-backend view ``pg_stat_get_backend_io(pid)`` (``pgstat_backend.c``), which nothing else
   can touch. Backends publish their pending counters only when they go idle, at most once a
   second; ``pg_stat_force_next_flush()`` run by the session just before and just after the
   measured statements makes both publications happen at once.
2. Snapshots are taken by a second connection, the **observer**, with
   ``stats_fetch_consistency = none`` (fresh shared values on every call). Its snapshot query only
   calls statistics functions -- per-relation counters are read by OID with
   ``pg_stat_get_blocks_fetched/hit`` rather than through the ``pg_statio_*`` views, whose
   catalog joins would pin catalog pages -- and it forces its own flush, so the observer's own
   I/O (normally none) is itself measured and reported.
3. Each snapshot also reads the cluster-wide ``pg_stat_io`` rows of client backends. The
   difference *cluster − measured − observer* is the **foreign** I/O of any other client; a
   measurement with zero foreign I/O (``Measurement.quiet``) was alone on the server.
   A no-op statement measures exactly zero reads and zero hits (tested).

What the diff still contains: everything the measured statements themselves did, including
catalog reads of a first execution. Run a statement once and evict before measuring it
(:func:`warm_up`) to keep only the data reads.

Resident pages come from ``pg_buffercache`` (valid buffers only), matched to relations through
``pg_relation_filenode`` -- after the measured statements, so a ``TRUNCATE`` or ``VACUUM FULL``
inside them is followed.

Mapped-but-invalid buffers
--------------------------
With ``io_method=sync`` a read stream abandoned by an error or cancel leaves buffers mapped to
blocks but never read (``read_stream.md`` §7.1). ``pg_buffercache`` does not show them and
``pg_buffercache_evict_relation`` skips them, yet the next scan reads into them outside any ring
(spec README §4). :func:`evict` therefore *repairs* a relation on a sync server after a statement
failed: it reads every fork once through shared buffers (``pg_prewarm(..., 'buffer')``), which
makes those buffers valid, and evicts again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from ..errors import PgEvictionError, PgHarnessError, PgServerDied
from ._contracts import DatabaseHandle
from .session import PgSession

__all__ = [
    "EvictionResult",
    "IoCounts",
    "IoStats",
    "MeasureHandle",
    "Measurement",
    "RelationIo",
    "ResidentBuffer",
    "evict",
    "measure",
    "measure_statement",
    "pinned_buffers",
    "resident_buffers",
    "warm_up",
]

FORK_NAMES = ("main", "fsm", "vm", "init")

#: Settings recorded with every measurement (read from the measured session). A name the
#: server's version lacks is simply not recorded (``io_workers`` is 18's, ``io_min_workers`` and
#: ``io_max_workers`` are 19's and later).
RECORDED_SETTINGS = (
    "server_version",
    "server_version_num",
    "io_method",
    "io_workers",
    "io_min_workers",
    "io_max_workers",
    "shared_buffers",
    "io_max_combine_limit",
    "io_combine_limit",
    "effective_io_concurrency",
    "maintenance_io_concurrency",
    "synchronize_seqscans",
    "debug_io_direct",
    "max_parallel_workers_per_gather",
    "vacuum_buffer_usage_limit",
    "max_connections",
    "block_size",
    "data_checksums",
)

_IO_COLUMNS = (
    "reads",
    "read_bytes",
    "hits",
    "evictions",
    "reuses",
    "writes",
    "write_bytes",
    "extends",
    "extend_bytes",
)


@dataclass(frozen=True)
class IoCounts:
    """One row of ``pg_stat_io`` (``pgstat_io.c``): counters for one object and context.

    ``reads`` counts I/O requests, ``read_bytes`` their size (8192 × blocks); a ``NULL`` in the
    view (an operation impossible in that context) is 0 here.
    """

    reads: int = 0
    read_bytes: int = 0
    hits: int = 0
    evictions: int = 0
    reuses: int = 0
    writes: int = 0
    write_bytes: int = 0
    extends: int = 0
    extend_bytes: int = 0

    def __add__(self, other: IoCounts) -> IoCounts:
        return IoCounts(*(getattr(self, c) + getattr(other, c) for c in _IO_COLUMNS))

    def __sub__(self, other: IoCounts) -> IoCounts:
        return IoCounts(*(getattr(self, c) - getattr(other, c) for c in _IO_COLUMNS))

    def is_zero(self) -> bool:
        return all(getattr(self, c) == 0 for c in _IO_COLUMNS)

    def read_blocks(self, block_size: int = 8192) -> int:
        return self.read_bytes // block_size

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class IoStats:
    """``pg_stat_io`` rows keyed by (object, context), e.g. ``("relation", "bulkread")``."""

    rows: Mapping[tuple[str, str], IoCounts] = field(default_factory=dict)

    def get(self, context: str, obj: str = "relation") -> IoCounts:
        return self.rows.get((obj, context), IoCounts())

    def __getitem__(self, context: str) -> IoCounts:
        return self.get(context)

    def total(self, obj: str = "relation") -> IoCounts:
        out = IoCounts()
        for (o, _c), counts in self.rows.items():
            if o == obj:
                out = out + counts
        return out

    def contexts(self, obj: str = "relation") -> tuple[str, ...]:
        """Contexts with any non-zero counter, sorted."""
        return tuple(sorted(c for (o, c), v in self.rows.items() if o == obj and not v.is_zero()))

    def __sub__(self, other: IoStats) -> IoStats:
        keys = set(self.rows) | set(other.rows)
        diff = {k: self.rows.get(k, IoCounts()) - other.rows.get(k, IoCounts()) for k in keys}
        return IoStats({k: v for k, v in sorted(diff.items()) if not v.is_zero()})

    def is_zero(self) -> bool:
        return all(v.is_zero() for v in self.rows.values())

    def to_dict(self) -> dict[str, dict[str, dict[str, int]]]:
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (obj, ctx), counts in sorted(self.rows.items()):
            if not counts.is_zero():
                out.setdefault(obj, {})[ctx] = counts.to_dict()
        return out


@dataclass(frozen=True)
class RelationIo:
    """Per-relation buffer counters (``pg_statio_user_tables``: ``blks_fetched``/``blks_hit``).

    Every pin attempt is a fetch; ``blks_read`` = fetched − hit = misses pinned.
    """

    blks_fetched: int
    blks_hit: int

    @property
    def blks_read(self) -> int:
        return self.blks_fetched - self.blks_hit


@dataclass(frozen=True)
class ResidentBuffer:
    """One valid shared buffer holding a page of a relation (a ``pg_buffercache`` row)."""

    relation: str
    fork: str
    block: int
    bufferid: int
    isdirty: bool
    usagecount: int
    pinning_backends: int


@dataclass(frozen=True)
class Measurement:
    """What the server did during one :func:`measure` block.

    ``io`` is the measured backend's own I/O (exact); ``cluster_io`` all client backends;
    ``observer_io`` the harness's snapshot connection; ``foreign_io`` the rest (zero when the
    measurement was alone on the server, see ``quiet``). ``relations`` has per-relation
    counters, ``resident`` the valid buffers of each relation after the block.
    """

    io: IoStats
    cluster_io: IoStats
    observer_io: IoStats
    relations: Mapping[str, RelationIo]
    resident: Mapping[str, tuple[ResidentBuffer, ...]]
    settings: Mapping[str, str]
    backend_pid: int
    elapsed_s: float

    @property
    def foreign_io(self) -> IoStats:
        return self.cluster_io - self.io - self.observer_io

    @property
    def quiet(self) -> bool:
        return self.foreign_io.is_zero()

    def resident_blocks(self, relation: str, fork: str = "main") -> frozenset[int]:
        return frozenset(b.block for b in self.resident.get(relation, ()) if b.fork == fork)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (resident pages as sorted block lists per fork)."""
        resident: dict[str, dict[str, list[int]]] = {}
        for rel, bufs in self.resident.items():
            per_fork: dict[str, list[int]] = {}
            for b in bufs:
                per_fork.setdefault(b.fork, []).append(b.block)
            resident[rel] = {f: sorted(v) for f, v in sorted(per_fork.items())}
        return {
            "io": self.io.to_dict(),
            "relations": {
                k: {"blks_read": v.blks_read, "blks_hit": v.blks_hit}
                for k, v in sorted(self.relations.items())
            },
            "resident": resident,
            "settings": dict(self.settings),
            "quiet": self.quiet,
        }


@dataclass
class MeasureHandle:
    """Yielded by :func:`measure`; ``result`` is set when the block exits."""

    relations: tuple[str, ...]
    result: Measurement | None = None

    @property
    def measurement(self) -> Measurement:
        if self.result is None:
            raise PgHarnessError("the measurement is available only after the with-block")
        return self.result


@dataclass(frozen=True)
class EvictionResult:
    """What :func:`evict` did (``pg_buffercache_evict_relation`` counters, summed)."""

    relation: str
    evicted: int
    flushed: int
    skipped: int
    repaired: bool


@dataclass(frozen=True)
class _Snapshot:
    measured: IoStats
    observer: IoStats
    cluster: IoStats
    relations: dict[int, RelationIo]


_SNAPSHOT_SQL = """
SELECT 'measured', object, context, reads, read_bytes, hits, evictions, reuses,
       writes, write_bytes, extends, extend_bytes
  FROM pg_stat_get_backend_io({pid})
UNION ALL
SELECT 'observer', object, context, reads, read_bytes, hits, evictions, reuses,
       writes, write_bytes, extends, extend_bytes
  FROM pg_stat_get_backend_io(pg_backend_pid())
UNION ALL
SELECT 'cluster', object, context, reads, read_bytes, hits, evictions, reuses,
       writes, write_bytes, extends, extend_bytes
  FROM pg_stat_get_io() WHERE backend_type = 'client backend'
UNION ALL
SELECT 'relation', r::text, '', pg_stat_get_blocks_fetched(r), 0, pg_stat_get_blocks_hit(r),
       0, 0, 0, 0, 0, 0
  FROM unnest('{{{oids}}}'::oid[]) AS r
{index_part}UNION ALL
SELECT 'flush', '', '', 0, 0, 0, 0, 0, 0, 0, 0, 0 FROM pg_stat_force_next_flush()
"""

_RESIDENT_SQL = """
SELECT r.name, b.relforknumber, b.relblocknumber, b.bufferid, b.isdirty, b.usagecount,
       b.pinning_backends
  FROM unnest(%(names)s::text[], %(oids)s::text::oid[]) AS r(name, oid)
  JOIN pg_class c ON c.oid = r.oid
  JOIN pg_database d ON d.datname = current_database()
  JOIN pg_buffercache b
    ON b.relfilenode = pg_relation_filenode(r.oid)
   AND b.reldatabase = d.oid
   AND b.reltablespace = CASE WHEN c.reltablespace = 0 THEN d.dattablespace
                              ELSE c.reltablespace END
 ORDER BY 1, 2, 3
"""


#: Index counters of servers that keep them apart (master, 20devel: ``pg_stat_get_idx_blocks_*``,
#: which ``pg_statio_all_indexes`` reads; there ``pg_stat_get_blocks_fetched`` of an index is 0).
_INDEX_SNAPSHOT_SQL = """UNION ALL
SELECT 'relation', r::text, '', pg_stat_get_idx_blocks_fetched(r), 0, pg_stat_get_idx_blocks_hit(r),
       0, 0, 0, 0, 0, 0
  FROM unnest('{{{oids}}}'::oid[]) AS r
"""


def _index_oids(observer: psycopg.Connection[Any], oids: Sequence[int]) -> frozenset[int]:
    """The indexes among ``oids`` whose block counters live apart from the tables' (asked of the
    server: ``pg_stat_get_idx_blocks_fetched`` exists), so the snapshot reads them there."""
    row = observer.execute(
        "SELECT to_regproc('pg_catalog.pg_stat_get_idx_blocks_fetched') IS NOT NULL"
    ).fetchone()
    if not oids or row is None or not row[0]:
        return frozenset()
    return frozenset(
        int(r[0])
        for r in observer.execute(
            "SELECT oid FROM pg_class WHERE oid = ANY(%s::oid[]) AND relkind IN ('i', 'I')", (list(oids),)
        )
    )


def _take_snapshot(
    observer: psycopg.Connection[Any], pid: int, oids: Sequence[int], index_oids: frozenset[int] = frozenset()
) -> _Snapshot:
    buckets: dict[str, dict[tuple[str, str], IoCounts]] = {
        "measured": {},
        "observer": {},
        "cluster": {},
    }
    relations: dict[int, RelationIo] = {}
    # Values are spelled into the text, not bound: a bound int's type (int2/int4/int8 by
    # magnitude) would change the catalog lookups, and a warm observer must make none.
    plain = [int(o) for o in oids if int(o) not in index_oids]
    index_part = (
        _INDEX_SNAPSHOT_SQL.format(oids=",".join(str(o) for o in sorted(index_oids))) if index_oids else ""
    )
    query = _SNAPSHOT_SQL.format(pid=int(pid), oids=",".join(str(o) for o in plain), index_part=index_part)
    for row in observer.execute(query):
        src, obj, ctx, *nums = row
        values = [int(v) if v is not None else 0 for v in nums]
        if src == "relation":
            relations[int(obj)] = RelationIo(blks_fetched=values[0], blks_hit=values[2])
        elif src in buckets:
            buckets[src][(obj, ctx)] = IoCounts(*values)
    return _Snapshot(
        measured=IoStats(buckets["measured"]),
        observer=IoStats(buckets["observer"]),
        cluster=IoStats(buckets["cluster"]),
        relations=relations,
    )


def _warm_observer(observer: psycopg.Connection[Any]) -> None:
    """Run the observer's queries once so later runs find every catalog entry cached."""
    me = observer.execute("SELECT pg_backend_pid()").fetchone()
    assert me is not None
    for _ in range(2):
        oids = _relation_oids(observer, ["pg_class"])
        _take_snapshot(observer, int(me[0]), oids)
        # The index counters' functions too (catalog lookups of their own), where they exist.
        indexes = _index_oids(observer, _relation_oids(observer, ["pg_class_oid_index"]))
        if indexes:
            _take_snapshot(observer, int(me[0]), sorted(indexes), indexes)
        _resident(observer, ["pg_class"], oids)
        observer.execute("SELECT pg_relation_size(%s::regclass, %s)", ("pg_class", "main"))
    observer.execute("SELECT pg_stat_force_next_flush()")


def _relation_oids(conn: psycopg.Connection[Any], names: Sequence[str]) -> list[int]:
    oids: list[int] = []
    for name in names:
        row = conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
        if row is None or row[0] is None:
            raise PgHarnessError(f"relation {name!r} does not exist in this scratch database")
        oids.append(int(row[0]))
    return oids


def _resident(
    observer: psycopg.Connection[Any], names: Sequence[str], oids: Sequence[int]
) -> dict[str, tuple[ResidentBuffer, ...]]:
    found: dict[str, list[ResidentBuffer]] = {n: [] for n in names}
    if names:
        for name, fork, block, bufid, dirty, usage, pins in observer.execute(
            _RESIDENT_SQL,
            {
                "names": list(names),
                "oids": "{" + ",".join(str(int(o)) for o in oids) + "}",
            },
        ):
            found[name].append(
                ResidentBuffer(
                    relation=name,
                    fork=FORK_NAMES[int(fork)],
                    block=int(block),
                    bufferid=int(bufid),
                    isdirty=bool(dirty),
                    usagecount=int(usage),
                    pinning_backends=int(pins),
                )
            )
    return {n: tuple(v) for n, v in found.items()}


def _recorded_settings(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return {
        name: value
        for name, value in conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
            (list(RECORDED_SETTINGS),),
        )
    }


@contextmanager
def measure(session: PgSession, relations: Sequence[str] = ()) -> Iterator[MeasureHandle]:
    """Measure what ``session`` reads inside the ``with`` block.

    Run the statements with ``session.execute``. On exit ``handle.result`` holds a
    :class:`Measurement` -- also when the block raised a SQL error (a cancelled statement is a
    measurement too); the error is then re-raised. The session must not leave a transaction
    open (statistics are published only by an idle backend).
    """
    names = tuple(relations)
    server = session.server
    server.ensure_alive("measure")
    conn = session.conn
    pid = session.pid
    observer = session.database.observer()
    generation = server.generation
    with server._guard("measure (before the block)"):
        oids = _relation_oids(observer, names)
        index_oids = _index_oids(observer, oids)
        settings = _recorded_settings(conn)
        # Publish what both backends did before the block, so the window holds only the block.
        observer.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_force_next_flush()")
        before = _take_snapshot(observer, pid, oids, index_oids)
    handle = MeasureHandle(relations=names)
    t0 = time.perf_counter()
    failure: Exception | None = None
    try:
        yield handle
    except PgServerDied:
        raise
    except Exception as err:
        # Kept until the measurement is taken (a cancelled statement is a measurement too);
        # KeyboardInterrupt and the like propagate at once.
        failure = err
    elapsed = time.perf_counter() - t0
    if server.generation != generation:
        problem = PgHarnessError("the server restarted inside a measure() block; nothing to compare")
        if failure is not None:
            raise problem from failure
        raise problem
    with server._guard("measure (after the block)"):
        status = conn.info.transaction_status
        if status != psycopg.pq.TransactionStatus.IDLE:
            problem = PgHarnessError(
                f"measure() needs the session idle at the end of the block, but it is "
                f"{status.name}; COMMIT or ROLLBACK inside the block"
            )
            if failure is not None:
                raise problem from failure
            raise problem
        conn.execute("SELECT pg_stat_force_next_flush()")
        after = _take_snapshot(observer, pid, oids, index_oids)
        resident = _resident(observer, names, oids)
    handle.result = Measurement(
        io=after.measured - before.measured,
        cluster_io=after.cluster - before.cluster,
        observer_io=after.observer - before.observer,
        relations={
            name: RelationIo(
                blks_fetched=after.relations[oid].blks_fetched - before.relations[oid].blks_fetched,
                blks_hit=after.relations[oid].blks_hit - before.relations[oid].blks_hit,
            )
            for name, oid in zip(names, oids, strict=True)
        },
        resident=resident,
        settings=settings,
        backend_pid=pid,
        elapsed_s=elapsed,
    )
    if failure is not None:
        raise failure


def measure_statement(
    session: PgSession,
    query: str,
    relations: Sequence[str] = (),
    *,
    params: Any = None,
    warm: bool = True,
) -> Measurement:
    """Measure one statement; with ``warm`` run it once first and evict ``relations``."""
    if warm:
        warm_up(session, query, relations, params=params)
    with measure(session, relations) as handle:
        session.execute(query, params)
    return handle.measurement


def warm_up(session: PgSession, query: str, relations: Sequence[str] = (), *, params: Any = None) -> None:
    """Run ``query`` once (loading the catalog entries it needs), then evict ``relations``."""
    session.execute(query, params)
    for rel in relations:
        evict(session, rel)


def _target_db(target: PgSession | DatabaseHandle) -> DatabaseHandle:
    return target.database if isinstance(target, PgSession) else target


def resident_buffers(target: PgSession | DatabaseHandle, relation: str) -> tuple[ResidentBuffer, ...]:
    """Valid buffers of ``relation`` (all forks), read through the observer connection."""
    db = _target_db(target)
    observer = db.observer()
    with db.server._guard(f"reading resident pages of {relation}"):
        oids = _relation_oids(observer, [relation])
        return _resident(observer, [relation], oids)[relation]


def pinned_buffers(target: PgSession | DatabaseHandle, relation: str) -> tuple[ResidentBuffer, ...]:
    """Buffers of ``relation`` some backend pins now (``pinning_backends > 0``).

    Read through the observer, so it works while the session runs a statement. With
    ``io_method=sync`` buffers whose read is staged but not executed are not valid and so not
    shown (spec README §4).
    """
    return tuple(b for b in resident_buffers(target, relation) if b.pinning_backends > 0)


def _needs_repair(session: PgSession, relation: str) -> bool:
    server = session.server
    if server._abort_epoch == 0:
        return False
    method = session.execute("SHOW io_method")[0][0]
    if method != "sync":
        return False
    return session.database._repaired.get(relation) != server._abort_epoch


def evict(session: PgSession, relation: str, *, repair: bool | None = None) -> EvictionResult:
    """Evict every page of ``relation`` from shared buffers and check none stays resident.

    Uses ``pg_buffercache_evict_relation`` (PostgreSQL 18). ``repair`` reads the relation
    once through shared buffers and evicts again, turning mapped-but-invalid buffers left by an
    aborted ``io_method=sync`` stream into valid ones that can be evicted; ``None`` repairs
    exactly when a statement failed on a sync server since this relation was last repaired.
    Raises :class:`PgEvictionError` if pages stay resident (pinned by some backend).
    """
    db = session.database
    server = session.server
    do_repair = _needs_repair(session, relation) if repair is None else repair
    evicted = flushed = skipped = 0

    def _evict_once() -> None:
        nonlocal evicted, flushed, skipped
        row = session.execute(
            "SELECT buffers_evicted, buffers_flushed, buffers_skipped "
            "FROM pg_buffercache_evict_relation(%s::regclass)",
            (relation,),
        )[0]
        evicted += int(row[0])
        flushed += int(row[1])
        skipped += int(row[2])

    _evict_once()
    if do_repair:
        for fork in FORK_NAMES:
            size = session.execute("SELECT pg_relation_size(%s::regclass, %s)", (relation, fork))[0][0]
            if int(size) > 0:
                session.execute("SELECT pg_prewarm(%s::regclass, 'buffer', %s)", (relation, fork))
        _evict_once()
        db._repaired[relation] = server._abort_epoch
    for _attempt in range(3):
        left = resident_buffers(db, relation)
        if not left:
            return EvictionResult(relation, evicted, flushed, skipped, do_repair)
        time.sleep(0.05)
        _evict_once()
    shown = ", ".join(f"{b.fork}:{b.block}(pins={b.pinning_backends})" for b in left[:10]) + (
        " ..." if len(left) > 10 else ""
    )
    raise PgEvictionError(
        f"{len(left)} page(s) of {relation} stay resident after eviction: {shown}; "
        "some backend still pins them"
    )
