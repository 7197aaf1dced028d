"""The ``stream-api`` of a PostgreSQL server: its own ``read_stream.c`` driven through the probe.

:class:`RemoteStreams` (one per :class:`~pytest_readstream.postgres.impl.implementation.PostgresImplementation`,
so one per pytest-xdist worker) answers ``begin_stream(backend, rel, callback, ...)``. The harness
hands it its model backend and relation; the remote stream mirrors them on the server and runs
the server's ``read_stream_begin_relation`` / ``read_stream_next_buffer`` / ``read_stream_reset`` /
``read_stream_end`` through the probe extension (``probe/rsprobe.c``), one SQL call per step:

* **Settings.** The model's settings are applied (``PostgresImplementation.configure``: server
  level, restarting only on a change) and its session GUCs set in the stream's transaction.
* **Relations.** One server table per relation shape (``nblocks``; one table per relation role
  of a test), made once of all-zero pages (the probe's ``rsp_extend``: ``smgrzeroextend``, so a
  relation of a whole segment costs no more than a small one; a zeroed page passes verification
  and a stream reads it like any other) and reused by every later test of that shape; a table
  that grew is rebuilt.
* **Cache and pins.** When a test's first stream begins, the table is evicted and the blocks
  the model's pool holds are read back (``pg_prewarm``); the model backend's own pins are taken
  on the server by the stream's session, other model backends' pins on the relation by a second
  session. A test is one transaction on each session (streams and pins live across statements);
  the next test rolls it back.
* **The callback.** The probe's callback hands out the harness callback's planned blocks
  (``callback.blocks``, sent again when the test adds some); after every call the harness
  callback is called once for each call the server's callback received, so it sees exactly the
  calls (and ends) the real stream made, and per-buffer data is the harness's own token.
  With ``block_range_read_stream_cb`` the server's own callback hands out the range fixed when
  the stream begins (the harness's is called in step and must agree).

:class:`ServerObservation` is the stream's ``observation``: what the harness's checks read
(pins, buffer tags, page validity, reads), taken from the probe's report of each call. The
stream's own pins come from its queue where the layout of ``struct ReadStream`` was verified at
run time; individual reads are visible only when the probe is built with the traced copy of the
server's ``read_stream.c``, and the observation says so otherwise.

What cannot be mirrored (fault injection, a catalog or tablespace setting, another fork, a
callback that computes its blocks on the fly) is refused with :class:`StreamUnavailable`, which
the implementation turns into a skip naming the reason.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from ..builds.probe_build import ProbeInstall
from ..errors import PgHarnessError
from ..faults.foreign_io import ForeignRead, ForeignReads
from ..faults.stream_faults import StreamFaults, read_error

__all__ = ["RemoteStreams", "RemoteStream", "ServerObservation", "StreamUnavailable", "ProbeReport"]

_INVALID_BUFFER = -1
_INVALID_BLOCK = 0xFFFFFFFF  # InvalidBlockNumber
_PAUSED = -2  # the probe's callback log: read_stream_pause() was called and returned
_INT16_MAX = 32767
_RELSEG_SIZE = 131072  # blocks of a 1 GiB segment
_BLCKSZ_KB = 8
_SESSION_GUCS = (
    "io_combine_limit",
    "effective_io_concurrency",
    "maintenance_io_concurrency",
    # What a page failing verification comes to (bufmgr.c passes the stream's backend's values
    # to the I/O's completion, wherever it runs).
    "zero_damaged_pages",
    "ignore_checksum_failure",
)


class _ServerOwner(Protocol):
    """What the streams need of their implementation (``PostgresImplementation``)."""

    @property
    def server(self) -> Any: ...

    @property
    def database(self) -> Any: ...

    def configure(self, settings: Any) -> str: ...


class StreamUnavailable(Exception):
    """A stream the server cannot run as asked by ``read_stream_begin_relation`` (the message says why)."""


@dataclass
class ProbeReport:
    """One probe call's JSON report (``rsprobe.c``: a ``read_stream.c`` call and what ``bufmgr.c`` shows after it)."""

    raw: dict[str, Any]

    @property
    def stream(self) -> dict[str, Any] | None:
        return self.raw.get("stream")

    @property
    def held(self) -> list[int]:
        return list(self.raw.get("held", []))

    @property
    def callback(self) -> list[int]:
        return list(self.raw.get("callback", []))

    @property
    def trace(self) -> list[list[Any]] | None:
        return self.raw.get("trace")


@dataclass
class _ServerRelation:
    """A server table standing in for model relations of one shape."""

    name: str
    oid: int
    nblocks: int
    spent: bool = False


@dataclass
class _ReadRecord:
    """A read the traced stream started (``reference_impl.stats.ReadRecord``'s fields)."""

    relation: str
    fork: str
    start: int
    nblocks: int
    context: str | None
    backend: int
    error: str | None = None
    submit_us: int = 0
    complete_us: int = 0
    synchronous: bool = False
    ok_blocks: int | None = None


@dataclass
class _Transaction:
    """What one test's transaction holds: relation mapping, pins, other session's pins."""

    backend: Any
    tables: dict[int, _ServerRelation] = field(default_factory=dict)  # model relid -> table
    relids: dict[int, int] = field(default_factory=dict)  # server oid -> model relid
    prepared: set[int] = field(default_factory=set)  # model relids whose cache state is mirrored
    model_to_server: dict[int, int] = field(default_factory=dict)  # consumer pins mirrored
    other_pins: Counter[int] = field(default_factory=Counter)  # server buffer -> other pins
    in_test_pins: list[int] = field(default_factory=list)  # of those, taken by d.other_pin()
    mirrored_others: set[int] = field(default_factory=set)  # model relids whose others' pins are taken
    other_pages: int = 0  # pages of other relations (catalogs) in the pool when the test began
    staged_ios: set[int] = field(default_factory=set)  # model I/Os of other backends staged (foreign_io)


def _main_fork_name() -> str:
    from reference_impl import ForkNumber
    from reference_impl.storage import FORK_NAMES

    return FORK_NAMES[ForkNumber.MAIN]


class RemoteStreams:
    """The server's ``read_stream_begin_relation`` (``read_stream.c``) for one implementation object
    (one xdist worker): its probe sessions, the tables standing in for model relations, and the
    transaction of the current test."""

    def __init__(self, impl: _ServerOwner, probe: ProbeInstall) -> None:
        self.impl = impl
        self.probe = probe
        self._conn: psycopg.Connection[Any] | None = None
        self._other: psycopg.Connection[Any] | None = None
        self._generation = -1
        self._tables: dict[tuple[int, int], _ServerRelation] = {}
        self._txn: _Transaction | None = None
        self._serial = 0
        self.calls = 0
        self.layout_verified: bool | None = None
        #: Why the stream's state is not read (the probe's rsp_info), when it is not.
        self.layout_why: str | None = None
        # The test's storage faults as read-interposer rules on the mirrored tables, and the
        # requests they matched during the last call.
        self.faults = StreamFaults(impl)
        self.last_requests: list[Any] = []
        # Other backends' reads in progress, staged for real and held by the interposer.
        self.foreign = ForeignReads(self)
        self._pid = 0  # the stream session's backend
        self._other_pid = 0  # the other session's
        self._unseen_requests: list[Any] = []
        # While other backends' reads are staged: the rule recording every request of the table.
        self._ledger_rule: int | None = None

    # ------------------------------------------------------------------------------ sessions
    def _connect(self) -> psycopg.Connection[Any]:
        server = self.impl.server
        db = self.impl.database
        with server._guard("opening a probe session"):
            conn = server._connect_raw(db.name)
            for stmt in self.probe.session_sql():
                conn.execute(stmt)
            conn.execute("CREATE EXTENSION IF NOT EXISTS rsprobe")
        return conn

    def _sessions(self) -> tuple[psycopg.Connection[Any], psycopg.Connection[Any]]:
        server = self.impl.server
        if self._conn is None or self._generation != server.generation or self._conn.closed:
            self.close_sessions()
            self._conn = self._connect()
            self._other = self._connect()
            self._generation = server.generation
            row = self._conn.execute("SELECT pg_backend_pid()").fetchone()
            self._pid = int(row[0]) if row is not None else 0
            row = self._other.execute("SELECT pg_backend_pid()").fetchone()
            self._other_pid = int(row[0]) if row is not None else 0
            self._txn = None
        assert self._other is not None
        return self._conn, self._other

    def close_sessions(self) -> None:
        """Close both sessions (their transactions roll back: every pin is dropped)."""
        self.foreign.close()
        for conn in (self._conn, self._other):
            if conn is not None and not conn.closed:
                conn.close()
        self._conn = self._other = None
        self._txn = None

    def call(self, fn: str, *args: Any, other: bool = False) -> ProbeReport:
        """``SELECT fn(args)`` on the stream's (or the other) session; the parsed report."""
        conn, other_conn = self._sessions()
        c = other_conn if other else conn
        placeholders = ", ".join(["%s"] * len(args))
        self.calls += 1

        def run() -> Any:
            return c.execute(f"SELECT {fn}({placeholders})", args, prepare=True).fetchone()

        released: list[Any] = []
        try:
            with self.impl.server._guard(f"probe call {fn}"):
                # While another backend's read is held, a watcher lets it go once the stream waits for it.
                if other:
                    row = run()
                else:
                    row, released = self.foreign.watch(self._pid, run)
        finally:
            self.last_requests = self.faults.sync_ledger()
            self._unseen_requests.extend(self.last_requests)
        assert row is not None
        rep = ProbeReport(json.loads(row[0]))
        if released and fn in ("rsp_next", "rsp_reset", "rsp_end"):
            # The report was made while the released reads' sessions may still have pinned their
            # blocks; they have let go now: the relation's pins and the stream's state again.
            with self.impl.server._guard("probe call rsp_state"):
                again = c.execute("SELECT rsp_state(%s)", (args[0],), prepare=True).fetchone()
            assert again is not None
            fresh = json.loads(again[0])
            for key in ("rel_pins", "stream"):
                if key in fresh:
                    rep.raw[key] = fresh[key]
        return rep

    def session_execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One statement in the stream's session (inside the test's transaction)."""
        conn, _ = self._sessions()
        with self.impl.server._guard("a statement in the stream's session"):
            conn.execute(sql, params)

    def take_requests(self) -> list[Any]:
        """The interposer's ledger entries of every call since the last time they were taken."""
        out, self._unseen_requests = self._unseen_requests, []
        return out

    def rollback(self) -> None:
        """End the current test's transactions (every pin of both sessions is dropped)."""
        self.foreign.finish()
        if self._conn is not None and self._generation != self.impl.server.generation:
            # The sessions belong to a postmaster that has since restarted: they are gone.
            self.close_sessions()
            return
        if self._conn is not None and not self._conn.closed and self._other is not None:
            with self.impl.server._guard("rolling back the probe sessions"):
                self._conn.execute("ROLLBACK")
                self._other.execute("ROLLBACK")
        self._txn = None

    def verify_layout(self) -> bool:
        """Begin a one-block stream and see whether the accessor generated from the source
        tree's ``struct ReadStream`` reads it (its sanity checks hold)."""
        table = self._table(1, 0)
        conn, _ = self._sessions()
        with self.impl.server._guard("verifying the stream layout"):
            conn.execute("ROLLBACK")
            conn.execute("BEGIN")
        try:
            with self.impl.server._guard("probe call rsp_info"):
                row = conn.execute("SELECT rsp_info()").fetchone()
            info = json.loads(row[0]) if row is not None else {}
            rep = self.call("rsp_begin", table.oid, 0, 0, None, None, False, [0])
            self.layout_verified = bool(rep.raw.get("layout_verified"))
            if not self.layout_verified:
                self.layout_why = str(info.get("layout_why") or "") or (
                    "the server's stream fails the sanity check of the accessor generated from its "
                    "source tree's struct ReadStream"
                )
            self.call("rsp_end", int(rep.raw["id"]), [])
        finally:
            self.rollback()
        return self.layout_verified

    # ------------------------------------------------------------------------------ relations
    def _table(self, nblocks: int, role: int) -> _ServerRelation:
        key = (nblocks, role)
        table = self._tables.get(key)
        if table is not None and table.spent:
            with self._admin() as c:
                c.execute(f'DROP TABLE IF EXISTS "{table.name}"')
            table = None
        if table is None:
            self._serial += 1
            name = f"rsp_{nblocks}_{role}_{self._serial}"
            with self._admin() as c:
                c.execute(f'CREATE TABLE "{name}" (x int) WITH (autovacuum_enabled = off)')
                row = c.execute("SELECT %s::regclass::oid", (name,)).fetchone()
                assert row is not None
                c.execute("SELECT rsp_extend(%s::regclass, %s)", (name, nblocks))
            table = _ServerRelation(name, int(row[0]), nblocks)
            self._tables[key] = table
        return table

    def _admin(self) -> psycopg.Connection[Any]:
        """A short autocommit connection with the probe loaded (tables, growth)."""
        self._sessions()  # the extension exists in the database from here on
        conn = self._connect()
        return conn

    def forget_tables(self) -> None:
        """After a restart or a rebuilt database nothing of the old tables is known."""
        self._tables.clear()

    # ------------------------------------------------------------------------------ begin
    def _transaction(self, backend: Any) -> _Transaction:
        """The transaction of the test that owns ``backend`` (a new test rolls the old one back)."""
        conn, other = self._sessions()
        txn = self._txn
        if txn is not None and txn.backend is backend:
            return txn
        self.foreign.finish()
        for c in (conn, other):
            with self.impl.server._guard("starting a probe transaction"):
                c.execute("ROLLBACK")
                c.execute("BEGIN")
        txn = _Transaction(backend)
        self._txn = txn
        settings = backend.settings
        for name in _SESSION_GUCS:
            raw = getattr(settings, name)
            value = ("on" if raw else "off") if isinstance(raw, bool) else str(raw)
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        return txn

    def _server_table(self, txn: _Transaction, rel: Any) -> _ServerRelation:
        table = txn.tables.get(rel.relid)
        if table is None:
            from reference_impl import ForkNumber

            n = rel.nblocks(ForkNumber.MAIN)
            role = sum(1 for t in txn.tables.values() if t.nblocks == n)
            table = self._table(n, role)
            txn.tables[rel.relid] = table
            txn.relids[table.oid] = rel.relid
        return table

    def _mirror_cache(self, txn: _Transaction, instance: Any, rel: Any) -> None:
        """Evict the table and read back the blocks the model's pool holds."""
        if rel.relid in txn.prepared:
            return
        table = self._server_table(txn, rel)
        conn, _ = self._sessions()
        with self.impl.server._guard("mirroring the cache state"):
            conn.execute("SELECT pg_buffercache_evict_relation(%s::regclass)", (table.name,))
            row = conn.execute("SELECT count(*) FROM pg_buffercache WHERE relfilenode IS NOT NULL").fetchone()
            txn.other_pages = int(row[0]) if row is not None else 0
            resident = sorted(instance.pool.resident_blocks(rel))
            for first, last in _runs(resident):
                conn.execute(
                    "SELECT pg_prewarm(%s::regclass, 'buffer', 'main', %s, %s)", (table.name, first, last)
                )
        txn.prepared.add(rel.relid)

    def _mirror_pins(self, txn: _Transaction, instance: Any, backend: Any, rel: Any) -> None:
        """The model backend's pins (the consumer's) and other backends' pins on ``rel``."""
        from reference_impl import ForkNumber

        by_relid = {r.relid: r for r in instance.storage.relations()}
        for buf, n in sorted(backend.pinned_buffers().items()):
            if buf in txn.model_to_server:
                continue
            relid, fork, block = backend.buffer_tag(buf)
            if fork != ForkNumber.MAIN or relid not in by_relid:
                raise StreamUnavailable(f"the consumer pins a page the server cannot mirror (buffer {buf})")
            table = self._server_table(txn, by_relid[relid])
            for _ in range(n):
                rep = self.call("rsp_pin", table.oid, 0, block)
                txn.model_to_server[buf] = int(rep.raw["buffer"])
        if rel.relid in txn.mirrored_others:
            return
        txn.mirrored_others.add(rel.relid)
        table = self._server_table(txn, rel)
        for other in instance.backends:
            if other is backend:
                continue
            for buf in sorted(other.pinned_buffers()):
                relid, fork, block = other.buffer_tag(buf)
                if relid == rel.relid and fork == ForkNumber.MAIN:
                    rep = self.call("rsp_pin", table.oid, 0, block, other=True)
                    txn.other_pins[int(rep.raw["buffer"])] += 1

    def begin(
        self,
        backend: Any,
        rel: Any,
        callback: Any,
        private: Any,
        *,
        fork: Any,
        flags: int,
        strategy: Any,
        per_buffer_data: bool,
    ) -> RemoteStream:
        """Mirror the harness's state on the server and begin its stream (see the module docstring)."""
        from reference_impl import ForkNumber

        instance = backend.instance
        if int(fork) != int(ForkNumber.MAIN):
            raise StreamUnavailable(
                f"streams of fork {int(fork)}: the server tables are mirrored main forks only"
            )
        if rel.persistence == "t" and getattr(rel, "temp_owner", None) not in (None, backend.id):
            # Another session's temporary table: the other session makes one, and the stream's
            # session begins a stream on it, which read_stream_begin_impl refuses.
            return self._begin_other_temp(backend, rel, callback, private, fork=fork, flags=flags)
        if rel.is_catalog or rel.persistence != "p":
            raise StreamUnavailable("a catalog or non-permanent relation cannot be mirrored on the server")
        if rel.tablespace_eic is not None or rel.tablespace_mic is not None:
            raise StreamUnavailable("a tablespace's io concurrency cannot be mirrored on the server")
        faults = instance.storage.faults
        # A plan's foreign_ios are started by the model's scans only (ScanRequest); a stream test
        # starts another backend's I/O itself (Instance.start_foreign_io), and the pool shows it.
        if getattr(faults, "faults", None):
            why = self.faults.why_not(faults, backend.settings)
            if why is not None:
                raise StreamUnavailable(why)
        held = _foreign_reads(instance, backend, rel)
        if held:
            why = self.faults.why_not_foreign(backend.settings)
            if why is not None:
                raise StreamUnavailable(why)
        if self.faults.plan is not faults:
            self.foreign.finish()
            self.faults.clear()  # another test's rules
            self._ledger_rule = None
        fixed = _block_range(callback, private)
        if fixed is None and (
            getattr(callback, "fn", None) is not None
            or not isinstance(getattr(callback, "blocks", None), list)
        ):
            raise StreamUnavailable(
                "the server's callback hands out a planned list of blocks; this callback computes "
                "them on the fly (readstream_conformance.BlockSource without fn= plans them)"
            )
        if getattr(callback, "pause_at", None) and not self.probe.pause_resume:
            raise StreamUnavailable(
                f"the probe cannot pause this server's stream: {self.probe.pause_why} (capability 'pause-resume')"
            )
        self.impl.configure(backend.settings)
        # Only a server that runs io_uring (a build with liburing) gets here with it.
        why_not_io = self.faults.why_not_io_method(
            backend.settings,
            kinds=[f.kind for f in (getattr(faults, "faults", None) or ())],
            held=bool(held),
        )
        if why_not_io is not None:
            raise StreamUnavailable(why_not_io)
        txn = self._transaction(backend)
        table = self._server_table(txn, rel)
        with self.faults.paused():
            self._mirror_cache(txn, instance, rel)
            self._mirror_pins(txn, instance, backend, rel)
        staged = [h for h in held if h[0] not in txn.staged_ios]
        if getattr(faults, "faults", None) or staged:
            # After the cache is mirrored: its pg_prewarm must not trip a rule.
            names = {r.relid: r.name for r in instance.storage.relations()}
            mirrored = {names[relid]: t.name for relid, t in txn.tables.items() if relid in names}
            if staged:
                self.foreign.finish()  # reads held for an earlier stream of the test go first
            first_rule = self.faults.install(
                faults, mirrored, tuple((table.name, start, n, fails) for _key, start, n, fails in staged)
            )
            if staged:
                self.foreign.stage(
                    [
                        ForeignRead(table.name, table.oid, start, n, fails, first_rule + i)
                        for i, (_key, start, n, fails) in enumerate(staged)
                    ]
                )
                txn.staged_ios.update(h[0] for h in staged)
                self._ledger_rule = first_rule + len(staged)
        kind = ring_kb = None
        if strategy is not None:
            kind = strategy.btype.value
            ring_kb = strategy.nbuffers * _BLCKSZ_KB
        span: tuple[int | None, int | None] = (None, None)
        if fixed is not None:
            # The server's own block_range_read_stream_cb hands the range out.
            planned: list[int] = []
            span = fixed
        elif hasattr(callback, "pos"):
            planned = list(callback.blocks[callback.pos :])
        else:
            planned = list(callback.blocks)
        rep = self.call(
            "rsp_begin", table.oid, int(fork), int(flags), kind, ring_kb, per_buffer_data, planned, *span
        )
        self.take_requests()  # the staged reads' requests are not the stream's (rsp_begin reads nothing)
        stream = RemoteStream(self, txn, rel, table, callback, private, rep, per_buffer_data, len(planned))
        stream._fixed_plan = fixed is not None
        stream._send_pauses()
        if self._ledger_rule is not None:
            stream.observation.read_from_ledger(self._ledger_rule, {*self.foreign.pids, self._other_pid})
        return stream

    def _begin_other_temp(
        self, backend: Any, rel: Any, callback: Any, private: Any, *, fork: Any, flags: int
    ) -> RemoteStream:
        """A stream on a temporary table of the other session (``RELATION_IS_OTHER_TEMP``): the
        server raises ``cannot access temporary tables of other sessions``, which becomes the
        model's :class:`~reference_impl.errors.OtherSessionTempRelation`. A stream that begins
        anyway is returned, for the test to see that it did."""
        from reference_impl.errors import OtherSessionTempRelation

        if _block_range(callback, private) is not None or not isinstance(
            getattr(callback, "blocks", None), list
        ):
            raise StreamUnavailable(
                "a stream on another session's temporary table takes a planned list of blocks"
            )
        self.impl.configure(backend.settings)
        txn = self._transaction(backend)
        self._serial += 1
        name = f"rsp_other_temp_{self._serial}"
        _, other = self._sessions()
        with self.impl.server._guard("making the other session's temporary table"):
            # Committed, so that the stream's session can lock it (a table created in an open
            # transaction stays locked until it ends); it lives as long as the other session,
            # which has nothing else of this test yet.
            other.execute("COMMIT")
            other.execute(f'CREATE TEMP TABLE "{name}" (x int)')
            row = other.execute("SELECT %s::regclass::oid", (name,)).fetchone()
            assert row is not None
            other.execute("SELECT rsp_extend(%s, %s)", (int(row[0]), rel.nblocks(fork)))
            other.execute("BEGIN")
        table = _ServerRelation(name, int(row[0]), rel.nblocks(fork), spent=True)
        txn.tables[rel.relid] = table
        txn.relids[table.oid] = rel.relid
        txn.prepared.add(rel.relid)
        txn.mirrored_others.add(rel.relid)
        planned = list(callback.blocks[getattr(callback, "pos", 0) :])
        try:
            rep = self.call(
                "rsp_begin", table.oid, int(fork), int(flags), None, None, False, planned, None, None
            )
        except psycopg.errors.FeatureNotSupported as err:
            if "temporary tables of other sessions" not in str(err):
                raise
            # The session's transaction is aborted; the next test's begins afresh.
            self._txn = None
            raise OtherSessionTempRelation(rel.name) from err
        stream = RemoteStream(self, txn, rel, table, callback, private, rep, False, len(planned))
        return stream


def _foreign_reads(instance: Any, backend: Any, rel: Any) -> list[tuple[int, int, int, bool]]:
    """Reads of ``rel`` another backend has in progress in the model's pool
    (``Instance.start_foreign_io``): ``(id of the I/O, first block, nblocks, fails)``.

    An I/O of the stream's own backend in progress (a read started and never waited for by an
    earlier stream of the test) has no server counterpart to stage: refused.
    """
    from reference_impl import ForkNumber

    pool = instance.pool
    pool.poll()  # those the model completed by now are done
    out: dict[int, tuple[int, int, int, bool]] = {}
    for buf, io in enumerate(pool.buf_io):
        if io is None or pool.tag[buf] < 0 or backend.buffer_tag(buf)[0] != rel.relid:
            continue
        if io.owner == backend.id or int(io.fork) != int(ForkNumber.MAIN):
            raise StreamUnavailable(
                "an I/O of the stream's own backend (or of another fork) in progress on the relation "
                "cannot be mirrored on the server"
            )
        limit = int(backend.settings.io_max_combine_limit)
        if io.nblocks > limit or io.start // _RELSEG_SIZE != (io.start + io.nblocks - 1) // _RELSEG_SIZE:
            raise StreamUnavailable(
                f"another backend's read of blocks {io.start}..{io.start + io.nblocks - 1} is not one read a "
                f"server backend can issue (at most io_max_combine_limit = {limit} blocks, inside one segment)"
            )
        fails = io.outcome is not None and io.outcome.error is not None
        out[id(io)] = (id(io), int(io.start), int(io.nblocks), fails)
    return list(out.values())


def _block_range(callback: Any, private: Any) -> tuple[int, int] | None:
    """``(current_blocknum, last_exclusive)`` when the callback is ``block_range_read_stream_cb``."""
    from reference_impl import BlockRangeReadStreamPrivate, block_range_read_stream_cb

    if getattr(callback, "fn", None) is block_range_read_stream_cb and isinstance(
        private, BlockRangeReadStreamPrivate
    ):
        return private.current_blocknum, private.last_exclusive
    return None


def _runs(blocks: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for b in blocks:
        if runs and b == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((b, b))
    return runs


class RemoteStream:
    """A server's ``ReadStream`` (``read_stream.c``) presented as the protocol's stream."""

    def __init__(
        self,
        streams: RemoteStreams,
        txn: _Transaction,
        rel: Any,
        table: _ServerRelation,
        callback: Any,
        private: Any,
        report: ProbeReport,
        per_buffer_data: bool,
        sent: int,
    ) -> None:
        self._streams = streams
        self._txn = txn
        self.rel = rel
        self._table = table
        self._callback = callback
        self._private = private
        self._id = int(report.raw["id"])
        self._per_buffer_data = per_buffer_data
        self._sent_from = getattr(callback, "pos", 0)
        self._sent = sent
        self._tokens: dict[int, Any] = {}
        self._produced = 0
        self._fixed_plan = False  # block_range_read_stream_cb: the whole range was sent at the start
        self._failed = False  # a call raised an ERROR: the server's transaction is aborted
        self._requests: list[Any] = []  # the interposer's ledger entries of the last call
        self._pauses_sent: set[int] = set()  # the callback's pause positions the probe has
        self._mirror_paused = False  # the harness's callback called pause() while mirrored
        self.ended = False
        self.observation = ServerObservation(streams, txn, rel, table)
        self.observation.absorb(report)

    # -- the protocol -------------------------------------------------------------------
    def next_buffer(self) -> int:
        """``read_stream_next_buffer``: a pinned buffer the caller releases, or -1 at the end."""
        return self._next()[0]

    def next_buffer_with_data(self) -> tuple[int, Any]:
        """``read_stream_next_buffer`` with the per-buffer data the callback stored."""
        return self._next()

    def reset(self) -> None:
        """``read_stream_reset``."""
        self._send_plan()
        rep = self._call("rsp_reset", self._id, self.observation.take_releases())
        self._after(rep)

    def end(self) -> None:
        """``read_stream_end`` (again after an end: nothing, as the server's stream is gone)."""
        if self.ended:
            return
        if self._failed:
            # The error aborted the server's transaction: its resource owner already dropped
            # the stream's pins, and the session accepts nothing but the rollback.
            self.observation.abort()
            self.ended = True
            return
        rep = self._call("rsp_end", self._id, self.observation.take_releases())
        self.ended = True
        self._after(rep)

    def _call(self, fn: str, *args: Any) -> ProbeReport:
        # An injected EIO fails the probe call that waited for the read: the model's error.
        from reference_impl import ChecksumFailure

        faults = self._streams.faults
        try:
            rep = self._streams.call(fn, *args)
            # Taken in _after, once the call's trace is in: a follow-up read comes after its start.
            self._requests = self._streams.take_requests()
            return rep
        except psycopg.Error as err:
            self._failed = True
            if "temporary tables of other sessions" in str(err):
                # StartReadBuffersImpl's RELATION_IS_OTHER_TEMP check (the model's error).
                from reference_impl.errors import OtherSessionTempRelation

                raise OtherSessionTempRelation(self.rel.name) from err
            seen = self._streams.take_requests()
            self.observation.requests(seen, faults.damaged(seen))
            mapped = read_error(err, self.rel.name)
            if isinstance(mapped, ChecksumFailure):
                # The read itself succeeded; its WaitReadBuffers raised on the page's verification.
                covering = [
                    e
                    for e in seen
                    if e.fired
                    and e.action == "corrupt"
                    and e.first_block <= mapped.block < e.first_block + e.nblocks
                ]
                first, n = (covering[0].first_block, covering[0].nblocks) if covering else (mapped.block, 1)
                self.observation.failed_read(first, n, error="ChecksumFailure", block=mapped.block)
                raise mapped from err
            if mapped is not None:
                for e in seen:
                    if e.fired and e.action == "eio":  # (hang_eio fails another backend's read)
                        self.observation.failed_read(e.first_block, e.nblocks)
                raise mapped from err
            raise

    def change_session_setting(self, name: str, value: Any) -> None:
        """``SET LOCAL name = value`` in the stream's session between two calls of the stream (as
        a cursor's ``FETCH`` after a ``SET``): the server's stream sees the GUC changed."""
        raw = ("on" if value else "off") if isinstance(value, bool) else str(value)
        self._streams.session_execute("SELECT set_config(%s, %s, true)", (name, raw))

    @property
    def can_force_pin_limit(self) -> bool:
        """Whether :meth:`force_additional_pin_limit` works here (the traced copy only)."""
        return bool(self._streams.probe.traced)

    def force_additional_pin_limit(self, limit: int) -> None:
        """From now until the end of the test, the traced stream's ``GetAdditionalPinLimit()``
        answers ``limit`` (the probe's ``rsp_force_pin_limit``; the server's own stream cannot)."""
        if not self._streams.probe.traced:
            import pytest

            pytest.skip(
                "a chosen GetAdditionalPinLimit() needs the traced copy of the server's read_stream.c "
                "(--readstream-pg-source or --readstream-pg-fetch-source)"
            )
        self._call("rsp_force_pin_limit", int(limit))

    def pause(self) -> int:
        """``read_stream_pause`` called by the harness's callback as it mirrors the server's.

        The server's callback already paused the stream at this position (the probe calls the
        server's ``read_stream_pause()`` there); the mirror only returns its result."""
        self._mirror_paused = True
        return _INVALID_BLOCK

    def resume(self) -> None:
        """``read_stream_resume`` after the callback paused."""
        self._send_plan()
        rep = self._call("rsp_resume", self._id, self.observation.take_releases())
        self._after(rep)

    # -- introspection (the fields of the version's own struct ReadStream) ---------------
    @property
    def state(self) -> dict[str, Any] | None:
        """The server stream's fields after the last call, under the names its version's
        ``struct ReadStream`` declares (18: ``distance``; 19+: ``readahead_distance``,
        ``combine_distance``, ``distance_decay_holdoff``, ``resume_*``), with ``buffers``,
        ``forwarded`` and ``in_flight``; ``None`` when unknown."""
        return self.observation.last_stream

    def _field(self, name: str) -> int:
        state = self.observation.last_stream
        if state is None:
            raise PgHarnessError(
                f"the server stream's {name} is unknown: its struct ReadStream fails the sanity check "
                "after this call (a counter outside its bounds: a broken stream), or it is not read here"
            )
        if name not in state:
            raise AttributeError(
                f"this server's struct ReadStream has no {name} (its fields: {', '.join(state)})"
            )
        return int(state[name])

    @property
    def max_pinned_buffers(self) -> int:
        return self._field("max_pinned_buffers")

    @property
    def max_ios(self) -> int:
        return self._field("max_ios")

    @property
    def distance(self) -> int:
        """The look-ahead distance: 18's ``distance``, 19+'s read-ahead distance."""
        state = self.observation.last_stream
        if state is not None and "distance" not in state and "readahead_distance" in state:
            return self._field("readahead_distance")
        return self._field("distance")

    @property
    def io_combine_limit(self) -> int:
        return self._field("io_combine_limit")

    def __getattr__(self, name: str) -> Any:
        # Any other field of the version's struct (combine_distance, distance_decay_holdoff, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        state = self.__dict__.get("observation")
        last = getattr(state, "last_stream", None)
        if isinstance(last, dict) and name in last and not isinstance(last[name], list):
            return last[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # -- internals ------------------------------------------------------------------------
    def _send_pauses(self) -> None:
        """The harness callback's pause positions not sent yet, in the probe's count of blocks
        produced (the probe's plan starts at the callback's position when the stream began)."""
        pause_at = getattr(self._callback, "pause_at", None)
        if not pause_at:
            return
        new = sorted(p for p in pause_at if p not in self._pauses_sent and p >= self._sent_from)
        if new:
            self._streams.call("rsp_pause_at", self._id, [p - self._sent_from for p in new])
            self._pauses_sent.update(new)

    def _send_plan(self) -> None:
        self._send_pauses()
        if self._fixed_plan:
            return
        blocks = self._callback.blocks
        start = self._sent_from + self._sent
        if len(blocks) > start:
            new = list(blocks[start:])
            self._streams.call("rsp_plan", self._id, new)
            self._sent += len(new)

    def _next(self) -> tuple[int, Any]:
        self._send_plan()
        rep = self._call("rsp_next", self._id, self.observation.take_releases())
        self._after(rep)
        buf = int(rep.raw.get("buffer", 0))
        if buf == 0:
            return _INVALID_BUFFER, None
        self.observation.returned(rep)
        data = self._tokens.pop(int(rep.raw.get("data", -1)), None) if self._per_buffer_data else None
        return buf, data

    def _after(self, rep: ProbeReport) -> None:
        # The harness's callback sees each call the server's callback received, in order.
        for block in rep.callback:
            self._mirror_paused = False
            got = self._callback(self, self._private)
            if block == _PAUSED or self._mirror_paused:
                if block != _PAUSED or not self._mirror_paused or got != _INVALID_BLOCK:
                    raise PgHarnessError(
                        "the server's callback "
                        + ("paused the stream" if block == _PAUSED else f"handed out {block}")
                        + " where the harness's callback "
                        + ("paused it" if self._mirror_paused else f"gave {got}")
                        + ": the pause positions sent to the probe are out of step"
                    )
                # Used up on the server too: the same position may be planned again later.
                self._pauses_sent.discard(self._sent_from + self._produced)
                continue
            if self._per_buffer_data and isinstance(got, tuple):
                got_block, token = got
            else:
                got_block, token = got, None
            want = None if block < 0 else block
            if (None if got_block == _INVALID_BLOCK else got_block) != want:
                if self._fixed_plan:
                    raise PgHarnessError(
                        f"the server's block_range_read_stream_cb handed out "
                        f"{'InvalidBlockNumber' if want is None else f'block {block}'} where "
                        "the harness's block_range_read_stream_cb gives "
                        f"{'InvalidBlockNumber' if got_block == _INVALID_BLOCK else f'block {got_block}'} "
                        "for the range fixed at the start"
                    )
                raise PgHarnessError(
                    f"the harness callback gave block {got_block} where the server's callback handed "
                    f"out {block}: the plan sent to the probe is out of step"
                )
            if block >= 0:
                self._tokens[self._produced] = token
                self._produced += 1
        self.observation.absorb(rep)
        seen, self._requests = self._requests, []
        self.observation.requests(seen, self._streams.faults.damaged(seen))

    def __repr__(self) -> str:
        return f"RemoteStream(id={self._id}, table={self._table.name!r}, ended={self.ended})"


class ServerObservation:
    """The buffer manager (``bufmgr.c``) of the server's stream session, as the harness's checks see it.

    Buffer numbers are the server's. The consumer's pins are those the probe holds for it
    (returned buffers until released, pins mirrored from the model); the stream's are the
    buffers in its queue (``pinned_buffers`` and ``forwarded_buffers`` of a verified layout) or,
    when the layout is not verified, the relation's pinned buffers in the shared descriptors that
    the other session does not hold.
    """

    def __init__(self, streams: RemoteStreams, txn: _Transaction, rel: Any, table: _ServerRelation) -> None:
        self._streams = streams
        self._txn = txn
        self.rel = rel
        self._table = table
        self._observer: Any = None
        self._held: Counter[int] = Counter()
        self._pending: list[int] = []
        self._stream_pins: Counter[int] = Counter()
        self._tags: dict[int, tuple[int, int, int]] = {}
        self._valid: dict[int, bool] = {}
        self._log: list[Any] = []
        # Buffers returned without a pin (the probe lists them as held; the descriptor says not).
        self._unpinned: set[int] = set()
        # Starts the stream has not waited for yet: first buffer -> [(key, first block, nblocks)].
        self._open: dict[int, list[tuple[int, int, int]]] = {}
        self._keys = 0
        # Blocks whose page the interposer damaged as it was read, and buffers whose page was all
        # zeroes when returned: together they tell a page zero_damaged_pages zeroed.
        self._damaged: set[int] = set()
        self._zero_page: dict[int, bool] = {}
        # Reads taken from the ledger's every-request rule (another backend's read is staged):
        # its index, and the backends whose requests are not the stream's.
        self._ledger_rule: int | None = None
        self._not_mine: set[int] = set()
        # Follow-up requests owed by reads the interposer cut short: (first block, nblocks).
        self._follow_ups: list[tuple[int, int]] = []
        self._traced = streams.probe.traced
        self.last_stream: dict[str, Any] | None = None
        #: The relation's pinned blocks in the shared descriptors after the last call: block -> refcount.
        self.shared_pins: dict[int, int] = {}
        self.blind_to_reads: str | None = (
            None
            if self._traced
            else (
                "the probe runs the server's own read_stream.c, which shows no individual "
                "StartReadBuffers/WaitReadBuffers calls (they are seen with the traced copy of issue 12)"
            )
        )

    # -- feeding ----------------------------------------------------------------------------
    def bind(self, observer: Any) -> None:
        self._observer = observer

    def take_releases(self) -> list[int]:
        out, self._pending = self._pending, []
        return out

    def returned(self, rep: ProbeReport) -> None:
        buf = int(rep.raw["buffer"])
        self._valid[buf] = bool(rep.raw.get("valid"))
        self._zero_page[buf] = bool(rep.raw.get("zero_page"))
        if int(rep.raw.get("shared_refs", 1)) == 0:
            # Nobody pins it: the stream handed the buffer back without the caller's pin.
            self._held[buf] -= 1
            self._held = +self._held
            self._unpinned.add(buf)
        relid = self.rel.relid if rep.raw.get("same_relation") else -1
        self._tags[buf] = (relid, int(rep.raw.get("fork", 0)), int(rep.raw["block"]))

    def absorb(self, rep: ProbeReport) -> None:
        """Take the pins, tags and trace a probe call reported."""
        if "rel_pins" in rep.raw:
            self.shared_pins = {int(block): int(refs) for _buf, block, refs in rep.raw["rel_pins"]}
        for buf, block, _refs in rep.raw.get("rel_pins", []):
            self._tags[int(buf)] = (self.rel.relid, 0, int(block))
        self._held = Counter(rep.held)
        for buf in self._pending:
            self._held[buf] -= 1
        for buf in self._unpinned:
            self._held[buf] -= 1
        self._held = +self._held
        state = rep.stream
        if "stream" in rep.raw:
            self.last_stream = state
            if state is not None:
                self._stream_pins = Counter(int(b) for b in state["buffers"]) + Counter(
                    int(b) for b in state["forwarded"]
                )
            else:
                # Layout not verified, or the stream ended (a correct end leaves nothing; a pin
                # that a broken stream leaked must be seen, not assumed away): the relation's
                # pinned buffers that neither the consumer nor the other session holds.
                mine: Counter[int] = Counter()
                for buf, _block, _refs in rep.raw.get("rel_pins", []):
                    if self._txn.other_pins.get(int(buf), 0) == 0 and int(buf) not in self._held:
                        mine[int(buf)] = 1
                self._stream_pins = mine
        trace = rep.trace
        if trace is not None and self._observer is not None:
            self._absorb_trace(trace)

    def _absorb_trace(self, trace: list[list[Any]]) -> None:
        # The trace names an operation by its first buffer only, and one buffer can be in two
        # operations at once (the same block missed twice: 004_read_stream.pl). Each start gets a
        # key of its own; a wait takes the oldest open operation of its buffer, as the stream
        # waits for its I/Os in the order it started them.
        obs = self._observer
        fork_name = _main_fork_name()
        for event in trace:
            # [kind, buffer, block, asked, accepted, forwarded, additional limit, flags, must_wait,
            # returned]: the last is what the call returned (None for a void call).
            kind, buf, blocknum, asked, accepted, forwarded, additional, flags, must_wait = event[:9]
            buf, blocknum, accepted = int(buf), int(blocknum), int(accepted)
            if kind == 1:
                self._keys += 1
                key = self._keys
                limit = _INT16_MAX if additional < 0 else int(additional)
                obs.record_start(
                    key, None, blocknum, int(asked), accepted, bool(must_wait),
                    limit, int(forwarded), 0, check=True, flags=int(flags),
                )  # fmt: skip
                if not must_wait:
                    continue
                # A start whose first block an earlier start of the stream is still reading waits
                # for that I/O (StartReadBuffers finds it in progress): it reads nothing itself.
                joined = any(
                    first <= blocknum < first + n for opens in self._open.values() for _k, first, n in opens
                )
                self._open.setdefault(buf, []).append((key, blocknum, accepted))
                if not joined and self._ledger_rule is None:
                    self._log.append(_ReadRecord(self.rel.name, fork_name, blocknum, accepted, None, -1))
            else:
                opens = self._open.get(buf)
                key = opens.pop(0)[0] if opens else -1
                if opens is not None and not opens:
                    del self._open[buf]
                obs.record_wait(key, 0)

    def requests(self, entries: list[Any], damaged: set[int]) -> None:
        """The interposer's ledger entries of one call (``faults.LedgerEntry``): the reads that
        ``WaitReadBuffers`` issues itself.

        A request cut short (``ProcessReadBuffersResult`` sees fewer blocks than asked) is
        finished by ``WaitReadBuffers``, which calls ``AsyncReadBuffers`` again from the first
        block not read: a read of the stream that no ``StartReadBuffers`` call shows, so the
        traced copy never reports it. Its request matches the rule of the faulty block (it starts
        there) and reaches the ledger, from whichever process performed it (an I/O worker under
        ``io_method=worker``): a request of exactly the blocks a short read left undone is that
        follow-up, and goes into the read log. ``damaged``: blocks whose page a ``corrupt`` rule
        damaged in these requests (see :meth:`is_zeroed`).
        """
        self._damaged |= damaged
        if not self._traced:
            return  # without the traced copy no read is observed, the follow-up neither
        if self._ledger_rule is not None:
            for e in entries:
                if e.rule == self._ledger_rule and e.pid not in self._not_mine:
                    error = None if e.result >= 0 else "EIO"
                    self._log.append(
                        _ReadRecord(
                            self.rel.name, _main_fork_name(), e.first_block, e.nblocks, None, -1, error=error
                        )
                    )
            return
        for e in entries:
            if e.fired and e.action == "short" and e.result > 0:
                done = e.result // (_BLCKSZ_KB * 1024)
                if 0 < done < e.nblocks:
                    self._follow_ups.append((e.first_block + done, e.nblocks - done))
            elif (e.first_block, e.nblocks) in self._follow_ups and e.result >= 0:
                self._follow_ups.remove((e.first_block, e.nblocks))
                self._log.append(
                    _ReadRecord(self.rel.name, _main_fork_name(), e.first_block, e.nblocks, None, -1)
                )

    def read_from_ledger(self, rule: int, not_mine: set[int]) -> None:
        """Take the stream's reads from the interposer's ledger (rule ``rule`` records every request
        of the table) rather than from its ``StartReadBuffers`` calls, leaving out the requests of
        the backends ``not_mine`` (the other backends' reads staged, the other session).

        A start that meets another backend's read in progress waits for it in ``StartBufferIO``
        (``io_method`` worker) or in ``WaitReadBuffers`` (sync, where the start issues nothing
        yet), and then reads nothing when that read succeeded: its ``StartReadBuffers`` call
        cannot say whether a read followed, the requests that reached ``pg_preadv`` can.
        """
        self._ledger_rule = rule
        self._not_mine = set(not_mine)

    def failed_read(self, first: int, nblocks: int, *, error: str = "EIO", block: int | None = None) -> None:
        """A read that failed (the interposer's ledger) during a call whose report the error took.

        A start recorded earlier whose blocks hold ``block`` (default ``first``) is waited for now
        (its ``WaitReadBuffers`` raised), and its read is marked failed; otherwise the start was
        in the failed call, and is put back with the request's blocks: in PostgreSQL 18 one start
        issues one I/O for the blocks it accepted. ``error`` names the failure as the model's
        read log does (``EIO``, or ``ChecksumFailure`` for a page that failed verification).
        """
        obs = self._observer
        if obs is None or not self._traced:
            return  # without the traced copy no read is observed, this one neither
        at = first if block is None else block
        for buf, opens in list(self._open.items()):
            for i, (key, start, n) in enumerate(opens):
                if start <= at < start + n:
                    del opens[i]
                    if not opens:
                        del self._open[buf]
                    obs.record_wait(key, 0)
                    for rec in reversed(self._log):
                        if rec.start == start and rec.nblocks == n:
                            rec.error = error
                            break
                    return
        self._keys += 1
        key = self._keys
        obs.record_start(key, None, first, nblocks, nblocks, True, _INT16_MAX, 0, 0)
        obs.record_wait(key, 0)
        if self._ledger_rule is None:  # else the ledger has the request
            self._log.append(
                _ReadRecord(self.rel.name, _main_fork_name(), first, nblocks, None, -1, error=error)
            )

    # -- the StreamObservation protocol -----------------------------------------------------
    def read_log(self) -> list[Any]:
        return self._log

    def backend_id(self) -> int:
        # The records carry no I/O context (pg_stat_io is not attributed per read): never "ours".
        return -2

    def other_pages(self) -> int:
        return self._txn.other_pages

    def consumer_buffers(self, held: Counter[int]) -> Counter[int]:
        out: Counter[int] = Counter()
        for buf, n in held.items():
            out[self._txn.model_to_server.get(buf, buf)] += n
        return out

    def pinned_buffers(self) -> dict[int, int]:
        return dict(self._held + self._stream_pins)

    def pin_count(self, buf: int) -> int:
        return self._held[buf] + self._stream_pins[buf]

    def buffer_tag(self, buf: int) -> tuple[int, Any, int]:
        from reference_impl import ForkNumber

        relid, fork, block = self._tags.get(buf, (-1, 0, -1))
        return relid, ForkNumber(fork), block

    def is_valid(self, buf: int) -> bool:
        return self._valid.get(buf, False)

    def is_zeroed(self, buf: int) -> bool:
        """Whether ``zero_damaged_pages`` zeroed the page in ``buf``: a page the interposer delivered
        damaged (never all zeroes: it has a header) that the consumer got back all zeroes. The
        server keeps no such flag; the tables' own pages are all zeroes, so the damage is what
        tells them apart."""
        block = self._tags.get(buf, (-1, 0, -1))[2]
        return block in self._damaged and self._zero_page.get(buf, False)

    def release_buffer(self, buf: int) -> None:
        if self._held[buf] <= 0:
            raise PgHarnessError(f"the consumer releases buffer {buf}, which it does not hold")
        self._held[buf] -= 1
        self._held = +self._held
        self._pending.append(buf)
        # A pin mirrored from the model backend is that backend's pin too: release both.
        for model_buf, server_buf in list(self._txn.model_to_server.items()):
            if server_buf == buf:
                del self._txn.model_to_server[model_buf]
                self._txn.backend.release_buffer(model_buf)
                break

    def flush(self) -> None:
        """Send the consumer's pending releases now."""
        if self._pending:
            rep = self._streams.call("rsp_release", self.take_releases())
            self.absorb(ProbeReport({k: v for k, v in rep.raw.items()}))

    def other_pin(self, rel: Any, block: int, fork: Any) -> None:
        table = self._streams._server_table(self._txn, rel)
        rep = self._streams.call("rsp_pin", table.oid, int(fork), block, other=True)
        buf = int(rep.raw["buffer"])
        self._txn.other_pins[buf] += 1
        self._txn.in_test_pins.append(buf)

    def other_release(self) -> None:
        # Only what the test's other backend pinned; the scenario's other backends keep theirs.
        txn = self._txn
        if txn.in_test_pins:
            self._streams.call("rsp_release", list(txn.in_test_pins), other=True)
            txn.other_pins.subtract(txn.in_test_pins)
            txn.other_pins = +txn.other_pins
            txn.in_test_pins.clear()

    def evict(self, rel: Any) -> None:
        table = self._streams._server_table(self._txn, rel)
        self.flush()
        conn, _ = self._streams._sessions()
        with self._streams.impl.server._guard("evicting"):
            conn.execute("SELECT pg_buffercache_evict_relation(%s::regclass)", (table.name,))

    def grow(self, rel: Any, fork: Any, nblocks: int) -> None:
        rel.extend(fork, nblocks)
        table = self._streams._server_table(self._txn, rel)
        table.spent = True  # no longer of its shape: rebuilt for the next test that wants it
        # Another backend extends it; the new blocks are in storage only, as the model's are.
        with self._streams.impl.server._guard("growing a table"), self._streams._admin() as c:
            c.execute("SELECT rsp_extend(%s::regclass, %s)", (table.name, nblocks))

    def abort(self) -> None:
        # The next stream of the test starts a new transaction and mirrors the model again.
        self._streams.rollback()
        self._held.clear()
        self._pending.clear()
        self._stream_pins.clear()
        self._txn.model_to_server.clear()
