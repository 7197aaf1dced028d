"""Checks of the server options (``--readstream-pg-dsn``, ``--pg-dsn``, ``--pg-bindir``) at start-up.

A bad connection string or an unreachable server is the user's input, not a test result: it is
refused with one line before any test or scenario runs, instead of surfacing as one failure per
test (``ValueError`` from libpq's parser) or as ``pytest.exit`` tracebacks from xdist workers.
A bin directory (``--pg-bindir``) is checked by the harness when the implementation is created,
which is at start-up too.
"""

from __future__ import annotations

__all__ = ["dsn_problem", "CONNECT_TIMEOUT_S"]

#: How long the start-up check waits for a server that does not answer (libpq's
#: ``connect_timeout``; without one a silently dropped connection would hang the run).
CONNECT_TIMEOUT_S = 10
_DSN_FORMS = (
    "a URI such as postgresql://user@host:5432/dbname or key=value pairs such as 'host=/tmp dbname=postgres'"
)


def _shown(dsn: str) -> str:
    """The DSN as given, with a password masked (the line ends up in CI logs)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return repr(dsn)
    if "password" in parts:
        parts["password"] = "***"
        return repr(make_conninfo(**{k: str(v) for k, v in parts.items()}))
    return repr(dsn)


def dsn_problem(option: str, dsn: str, *, connect: bool = True) -> str | None:
    """Why ``dsn`` cannot be used (``None``: it can): not a connection string, or no server.

    With ``connect`` the server is asked once for a connection, which is closed at once.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{option}={dsn!r} is not a libpq connection string ({first}): allowed {_DSN_FORMS}"
    if not connect:
        return None
    try:
        conn = psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as err:
        text = " ".join(str(err).split()) or type(err).__name__
        for prefix in ("connection failed: ", "connection is bad: "):
            text = text.removeprefix(prefix)
        return f"{option}={_shown(dsn)}: cannot connect: {text}"
    conn.close()
    return None
