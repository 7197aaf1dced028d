"""Scratch databases: where every measurement runs, created and dropped by the harness.

A scratch database is the harness's only footprint on a server it does not own. Its name says
who made it -- ``readstream_<xdist worker>_<pid>_<n>`` -- so parallel pytest-xdist workers
sharing one DSN server never collide and a leftover can be traced to its process. The harness
drops exactly the databases it created (by name, ``DROP DATABASE ... WITH (FORCE)``) and nothing
else.

On creation the contrib extensions the measurements need are created in it: ``pg_buffercache``
(resident pages, eviction), ``pg_prewarm`` (caching pages, repairing mapped-but-invalid
buffers), ``pgstattuple``, ``tsm_system_rows``, ``tsm_system_time``, ``amcheck`` and
``pageinspect``.

Tables made by :meth:`ScratchDatabase.create_wide_table` have autovacuum disabled, hold one
frozen row per page and are checkpointed, so nothing but the measured session reads or dirties
them and a first scan sets no hint bits (which would dirty pages and change what a
``BULKREAD`` ring keeps, ``buffers_and_strategies.md`` §5.1).
"""

from __future__ import annotations

import os
import re
from typing import Any, Self

import psycopg
from psycopg import sql

from ..errors import PgHarnessError, PgUnsafeDatabase
from ._contracts import ServerHandle
from .observe import evict
from .session import PgSession
from .settings import SessionSettings

__all__ = ["DEFAULT_EXTENSIONS", "NO_AUTOVACUUM", "ScratchDatabase", "scratch_name"]

DEFAULT_EXTENSIONS: tuple[str, ...] = (
    "pg_buffercache",
    "pg_prewarm",
    "pgstattuple",
    "tsm_system_rows",
    "tsm_system_time",
    "amcheck",
    "pageinspect",
    "pg_visibility",
    "bloom",
    "btree_gin",
)
_REQUIRED_EXTENSIONS = ("pg_buffercache", "pg_prewarm")

#: Storage parameters that keep autovacuum away from a table (append to ``WITH (...)``).
NO_AUTOVACUUM = "autovacuum_enabled = off, toast.autovacuum_enabled = off"

_serial = 0
_NAME_OK = re.compile(r"[^a-z0-9_]")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def scratch_name(label: str = "") -> str:
    """A new scratch database name: ``readstream_<worker>_<pid>_<n>[_<label>]``."""
    global _serial
    _serial += 1
    parts = ["readstream", _worker_id(), str(os.getpid()), str(_serial)]
    if label:
        parts.append(label)
    name = _NAME_OK.sub("_", "_".join(parts).lower())
    return name[:63]


def _check_ident(name: str, what: str = "table name") -> None:
    if not _IDENT.match(name):
        raise ValueError(
            f"{what} {name!r} is not allowed; use 1-63 letters, digits or underscores, "
            "not starting with a digit"
        )


class ScratchDatabase:
    """A database the harness created on a :class:`PgServer` (``CREATE DATABASE``, ``dbcommands.c``).

    It also keeps the *observer* connection that takes statistics snapshots for
    :func:`~pytest_readstream.postgres.servers.observe.measure` without being the measured backend.
    """

    def __init__(self, server: ServerHandle, name: str, extensions: tuple[str, ...]) -> None:
        self.server = server
        self.name = name
        self.extensions = extensions
        self._observer: psycopg.Connection[Any] | None = None
        self._observer_generation = -1
        self._sessions: list[PgSession] = []
        self._closed = False
        self._repaired: dict[str, int] = {}

    @classmethod
    def _create(cls, server: ServerHandle, *, extensions: tuple[str, ...], label: str) -> ScratchDatabase:
        missing_required = [e for e in _REQUIRED_EXTENSIONS if e not in extensions]
        if missing_required:
            raise ValueError(f"extensions must include {', '.join(missing_required)} (the harness uses them)")
        name = scratch_name(label)
        with (
            server._guard(f"creating scratch database {name}"),
            server._connect_raw(None) as c,
        ):
            try:
                c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege as err:
                raise PgUnsafeDatabase(
                    f"cannot create scratch database {name!r}: the role lacks CREATEDB ({err})"
                ) from err
        db = cls(server, name, tuple(extensions))
        try:
            with server._guard("creating extensions"), server._connect_raw(name) as c:
                available = {
                    r[0]
                    for r in c.execute(
                        "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)",
                        (list(extensions),),
                    )
                }
                absent = [e for e in extensions if e not in available]
                if absent:
                    raise PgHarnessError(
                        f"the server lacks the extension(s) {', '.join(absent)}; install "
                        "PostgreSQL's contrib modules or pass extensions=... without them"
                    )
                for ext in extensions:
                    c.execute(sql.SQL("CREATE EXTENSION {}").format(sql.Identifier(ext)))
        except BaseException:
            db._close(drop=True)
            raise
        return db

    # -- connections ----------------------------------------------------------------------
    def session(self, settings: SessionSettings | None = None) -> PgSession:
        """A new measured connection with ``settings`` applied (close it, or use ``with``)."""

        self._check_open("opening a session")
        sess = PgSession(self, settings or SessionSettings())
        self._sessions.append(sess)
        return sess

    def observer(self) -> psycopg.Connection[Any]:
        """The harness's bookkeeping connection to this database (reconnected after restarts)."""
        self._check_open("observing")
        server = self.server
        server.ensure_alive("observing")
        if self._observer is None or self._observer_generation != server.generation:
            if self._observer is not None:
                self._observer.close()
            with server._guard("connecting the observer"):
                conn = server._connect_raw(self.name)
                # Read the shared statistics afresh on every call, never a cached snapshot.
                conn.execute("SET stats_fetch_consistency = none")
                conn.execute("SET max_parallel_workers_per_gather = 0")
                from .observe import _warm_observer

                _warm_observer(conn)
            self._observer = conn
            self._observer_generation = server.generation
        return self._observer

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise PgHarnessError(f"scratch database {self.name} was dropped; cannot do {operation}")
        self.server.ensure_alive(operation)

    # -- tables ---------------------------------------------------------------------------
    def create_wide_table(self, name: str, pages: int, *, unlogged: bool = False) -> int:
        """Create ``name`` with exactly ``pages`` main-fork pages, one frozen row per page.

        Each row carries a 5000-byte uncompressed pad (``STORAGE PLAIN``), so two never share a
        page; the table is vacuumed with ``FREEZE`` (hint bits and visibility map set, no later
        scan dirties it), checkpointed and then evicted from shared buffers. Returns the size in
        pages as ``pg_relation_size`` reports it (checked to equal ``pages``).
        """
        _check_ident(name)
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
            raise ValueError(f"pages must be a positive int, got {pages!r}")

        ident = sql.Identifier(name)
        kind = sql.SQL("UNLOGGED TABLE" if unlogged else "TABLE")
        with self.session() as s:
            s.execute(
                sql.SQL("CREATE {} {} (id int, pad text) WITH (" + NO_AUTOVACUUM + ")").format(kind, ident)
            )
            s.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN pad SET STORAGE PLAIN").format(ident))
            s.execute(
                sql.SQL("INSERT INTO {} SELECT g, repeat('x', 5000) FROM generate_series(1, %s) g").format(
                    ident
                ),
                (pages,),
            )
            s.execute(sql.SQL("VACUUM (FREEZE) {}").format(ident))
            s.execute("CHECKPOINT")
            size = s.execute("SELECT pg_relation_size(%s::regclass)", (name,))[0][0]
            got = int(size) // self.server.block_size
            if got != pages:
                raise PgHarnessError(f"table {name} has {got} pages, expected {pages}")
            evict(s, name)
        return got

    def relation_exists(self, name: str) -> bool:
        """Whether ``name`` resolves to a relation in this database (``to_regclass``)."""
        conn = self.observer()
        with self.server._guard(f"looking up {name}"):
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(row and row[0])

    def relation_pages(self, name: str, fork: str = "main") -> int:
        """``pg_relation_size(name, fork)`` in blocks."""
        conn = self.observer()
        with self.server._guard(f"sizing {name}"):
            row = conn.execute("SELECT pg_relation_size(%s::regclass, %s)", (name, fork)).fetchone()
        assert row is not None
        return int(row[0]) // self.server.block_size

    # -- teardown -------------------------------------------------------------------------
    def drop(self) -> None:
        """Close every session of this database and drop it."""
        self._close(drop=True)
        self.server._forget_scratch(self)

    def _close(self, *, drop: bool) -> None:
        if self._closed:
            return
        self._closed = True
        for sess in list(self._sessions):
            sess._close_quietly()
        self._sessions.clear()
        if self._observer is not None:
            try:
                self._observer.close()
            except psycopg.Error:
                pass
            self._observer = None
        if not drop:
            return
        server = self.server
        with (
            server._guard(f"dropping scratch database {self.name}"),
            server._connect_raw(None) as c,
        ):
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def __repr__(self) -> str:
        return f"<ScratchDatabase {self.name} on {self.server!r}>"
