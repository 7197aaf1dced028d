"""Errors raised by the PostgreSQL harness.

Every error names what went wrong, the value that caused it and what to do about it. They all
derive from :class:`PgHarnessError`, so a caller (the oracle, the ``postgres`` backend of the
pytest plugin) can catch the harness's failures without catching PostgreSQL's own SQL errors,
which pass through unchanged.
"""

from __future__ import annotations

__all__ = [
    "PgConnectionTimeout",
    "PgEvictionError",
    "PgHarnessError",
    "PgNotAvailable",
    "PgServerDied",
    "PgSettingUnavailable",
    "PgStartupError",
    "PgUnsafeDatabase",
]


class PgHarnessError(RuntimeError):
    """Base class of every error the harness raises itself.

    ``readstream_harness_error`` (see :mod:`pytest_readstream.harness_errors`): the subclasses
    that mean "the harness could not do its part" name what it could not do; a test failing
    with one of them judged nothing. ``None`` here: a server that died under a test, or a
    setting a server cannot take, is not such an error.
    """

    readstream_harness_error: str | None = None


class PgNotAvailable(PgHarnessError):
    """No usable PostgreSQL: package missing, wrong version, or binaries not found."""

    readstream_harness_error = "use the PostgreSQL server"


class PgStartupError(PgHarnessError):
    """``initdb`` or the postmaster (``PostmasterMain`` in ``postmaster.c``) failed to start."""

    readstream_harness_error = "start the PostgreSQL server"


class PgConnectionTimeout(PgHarnessError):
    """A connection to a running server timed out (psycopg's ``ConnectionTimeout``): a machine so
    loaded that the postmaster did not accept in time (a settings reload, a new probe session).

    The server is alive, so nothing the test judged is behind it: a harness error, never a test
    failure or a kill (a backend that crashed under a mutant loses its connection instead, and
    the postmaster's restart is seen by the liveness check).
    """

    readstream_harness_error = "reach the PostgreSQL server in time"

    def __init__(self, operation: str, err: BaseException) -> None:
        self.operation = operation
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        super().__init__(f"connecting during {operation} timed out under load: {first}")


class PgServerDied(PgHarnessError):
    """The postmaster stopped while the harness was using it.

    Raised by the first harness call after the death and by every later one (the same message),
    once the remaining server processes have been killed.
    """

    def __init__(self, pid: int | None, operation: str, log_tail: str) -> None:
        self.pid = pid
        self.operation = operation
        self.log_tail = log_tail
        who = f"(pid {pid})" if pid is not None else "(remote)"
        tail = log_tail.strip() or "(no log available)"
        super().__init__(f"the PostgreSQL server {who} stopped during {operation}; its log tail:\n{tail}")


class PgSettingUnavailable(PgHarnessError):
    """A setting cannot be given to this server (e.g. a restart on a server someone else runs)."""

    def __init__(self, setting: str, wanted: str, current: str, reason: str) -> None:
        self.setting = setting
        self.wanted = wanted
        self.current = current
        super().__init__(f"cannot set {setting} = {wanted!r} (server has {current!r}): {reason}")


class PgUnsafeDatabase(PgHarnessError):
    """A DSN points at a database that already holds user tables, or lacks needed rights."""


class PgEvictionError(PgHarnessError):
    """``pg_buffercache_evict_relation`` left pages of a relation resident."""
