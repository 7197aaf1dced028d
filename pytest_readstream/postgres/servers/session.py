"""The measured session: one client backend whose reads the harness observes.

``pg_stat_io`` and ``pg_stat_get_backend_io`` count per backend (``pgstat_io.c``), so what a
measurement reports is what *this* backend did. A :class:`PgSession` is one autocommit
connection, hence one backend (``PostgresMain`` in ``postgres.c``), with its
:class:`SessionSettings` applied after ``RESET ALL``. It warms the statements the harness itself
runs on it (``pg_stat_force_next_flush()``), so that bookkeeping touches no buffer once a
measurement starts.

After a server restart the session reconnects on its next use and re-applies its settings (its
backend pid changes). Statements that fail are reported to the server object: with
``io_method=sync`` an aborted read stream can leave mapped-but-invalid buffers behind
(``read_stream.md`` §7.1), which :func:`~pytest_readstream.postgres.servers.observe.evict` then repairs.
"""

from __future__ import annotations

from typing import Any, Self

import psycopg
from psycopg import sql

from ..errors import PgHarnessError
from ._contracts import DatabaseHandle
from .settings import SessionSettings

__all__ = ["PgSession"]

_Query = str | sql.SQL | sql.Composed


class PgSession:
    """One measured client backend on a scratch database (``PostgresMain``, ``postgres.c``)."""

    def __init__(self, database: DatabaseHandle, settings: SessionSettings) -> None:
        self.database = database
        self.server = database.server
        self._settings = settings
        self._conn: psycopg.Connection[Any] | None = None
        self._generation = -1
        self._pid = 0
        self._closed = False
        self._connect()

    # -- connection -----------------------------------------------------------------------
    def _connect(self) -> None:
        server = self.server
        with server._guard("opening a session"):
            conn = server._connect_raw(self.database.name)
            try:
                self._apply(conn, self._settings)
                # Warm the catalog entries of the harness's own bookkeeping statement.
                conn.execute("SELECT pg_stat_force_next_flush()")
                conn.execute("SELECT pg_backend_pid()")
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
            except BaseException:
                conn.close()
                raise
        assert row is not None
        self._conn = conn
        self._pid = int(row[0])
        self._generation = server.generation

    def _apply(self, conn: psycopg.Connection[Any], settings: SessionSettings) -> None:
        conn.execute("RESET ALL")
        gucs = settings.to_gucs()
        known = {
            r[0] for r in conn.execute("SELECT name FROM pg_settings WHERE name = ANY(%s)", (list(gucs),))
        }
        unknown = sorted(set(gucs) - known)
        if unknown:
            raise ValueError(
                f"this server has no setting(s) {', '.join(unknown)}; "
                f"PostgreSQL {self.server.version} is running"
            )
        for name, value in gucs.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The live connection (reconnected after a server restart)."""
        if self._closed:
            raise PgHarnessError("the session was closed")
        self.server.ensure_alive("using a session")
        if self._conn is None or self._generation != self.server.generation:
            if self._conn is not None:
                try:
                    self._conn.close()
                except psycopg.Error:
                    pass
            self._connect()
        assert self._conn is not None
        return self._conn

    @property
    def pid(self) -> int:
        """The backend's process id (``pg_backend_pid()``)."""
        self.conn  # noqa: B018 - reconnects after a restart
        return self._pid

    @property
    def settings(self) -> SessionSettings:
        return self._settings

    def apply(self, settings: SessionSettings) -> None:
        """Replace the session settings (``RESET ALL``, then ``SET`` each non-``None`` one)."""
        conn = self.conn
        with self.server._guard("applying session settings"):
            self._apply(conn, settings)
        self._settings = settings

    # -- statements -----------------------------------------------------------------------
    def execute(self, query: _Query, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement; returns its rows (empty list if it returns none).

        A failed statement is re-raised unchanged, after noting the abort (see module doc);
        a lost server becomes :class:`~pytest_readstream.postgres.errors.PgServerDied`.
        """
        conn = self.conn
        with self.server._guard("executing a statement"):
            try:
                cur = conn.execute(query, params)
            except psycopg.Error:
                self.server._note_abort()
                raise
            return cur.fetchall() if cur.description is not None else []

    def cancel(self) -> None:
        """Cancel the statement this session is running, from another connection.

        Uses ``pg_cancel_backend`` (as a second client would), so it can be called from another
        thread while :meth:`execute` is blocked.
        """
        pid = self._pid
        with (
            self.server._guard("cancelling a statement"),
            self.server._connect_raw(self.database.name) as other,
        ):
            other.execute("SELECT pg_cancel_backend(%s)", (pid,))

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        self._close_quietly()
        if self in self.database._sessions:
            self.database._sessions.remove(self)

    def _close_quietly(self) -> None:
        self._closed = True
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PgSession pid={self._pid} db={self.database.name}>"
