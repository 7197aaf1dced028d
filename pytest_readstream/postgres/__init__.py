"""A harness for measuring a real PostgreSQL 18 server's reads.

It starts (or connects to) a server, runs measured statements in a scratch database under given
settings, and reports exactly what that session read: ``pg_stat_io`` counters per context,
per-relation block counters and the pages left in shared buffers. The model's oracle and the
``--readstream-impl=postgres`` backend build on it. See ``docs/postgres.md``.

Typical use::

    with PgServer.embedded(workdir, settings=ServerSettings(io_method="sync")) as server:
        db = server.scratch_database()
        db.create_wide_table("t", pages=1000)
        with db.session(SessionSettings(io_combine_limit=8)) as s:
            m = measure_statement(s, "SELECT count(*) FROM t", ["t"])
            print(m.io["normal"].reads, m.resident_blocks("t"))
"""

from __future__ import annotations

from .errors import (
    PgEvictionError,
    PgHarnessError,
    PgNotAvailable,
    PgServerDied,
    PgSettingUnavailable,
    PgStartupError,
    PgUnsafeDatabase,
)
from .servers.observe import (
    EvictionResult,
    IoCounts,
    IoStats,
    MeasureHandle,
    Measurement,
    RelationIo,
    ResidentBuffer,
    evict,
    measure,
    measure_statement,
    pinned_buffers,
    resident_buffers,
    warm_up,
)
from .servers.scratch import (
    DEFAULT_EXTENSIONS,
    NO_AUTOVACUUM,
    ScratchDatabase,
    scratch_name,
)
from .servers.server import PgServer, embedded_bindir
from .servers.session import PgSession
from .servers.settings import ServerSettings, SessionSettings

__all__ = [
    "DEFAULT_EXTENSIONS",
    "NO_AUTOVACUUM",
    "EvictionResult",
    "IoCounts",
    "IoStats",
    "MeasureHandle",
    "Measurement",
    "PgEvictionError",
    "PgHarnessError",
    "PgNotAvailable",
    "PgServer",
    "PgServerDied",
    "PgSession",
    "PgSettingUnavailable",
    "PgStartupError",
    "PgUnsafeDatabase",
    "RelationIo",
    "ResidentBuffer",
    "ScratchDatabase",
    "ServerSettings",
    "SessionSettings",
    "embedded_bindir",
    "evict",
    "measure",
    "measure_statement",
    "pinned_buffers",
    "resident_buffers",
    "scratch_name",
    "warm_up",
]
