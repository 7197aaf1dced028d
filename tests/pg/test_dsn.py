"""A server someone else runs: refuse real data, never restart, drop only what we created."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from pytest_readstream.postgres import (
    PgNotAvailable,
    PgServer,
    PgSettingUnavailable,
    PgUnsafeDatabase,
    ServerSettings,
    measure_statement,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def user_database(pg_server: PgServer) -> Iterator[str]:
    """A database with a user table, standing for someone's real data."""
    name = f"userdata_{os.getpid()}"
    with pg_server.connect() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with pg_server.connect(name) as conn:
        conn.execute("CREATE TABLE accounts (id int primary key, owner text)")
        conn.execute("INSERT INTO accounts VALUES (1, 'alice'), (2, 'bob')")
    yield name
    with pg_server.connect() as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _databases(server: PgServer) -> set[str]:
    with server.connect() as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database")}


def test_dsn_refuses_a_database_with_user_tables(pg_server: PgServer, user_database: str) -> None:
    with pytest.raises(PgUnsafeDatabase) as info:
        PgServer.from_dsn(pg_server.conninfo(user_database))
    assert "public.accounts" in str(info.value)
    assert "allow_nonempty=True" in str(info.value)


def test_dsn_accepts_it_with_the_flag_and_touches_nothing_else(
    pg_server: PgServer, user_database: str
) -> None:
    before = _databases(pg_server)
    with PgServer.from_dsn(pg_server.conninfo(user_database), allow_nonempty=True) as remote:
        assert remote.kind == "dsn" and not remote.owned and remote.pid is None
        db = remote.scratch_database()
        assert db.name.startswith(f"readstream_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_")
        assert str(os.getpid()) in db.name
        assert _databases(pg_server) == before | {db.name}
        with db.session() as s:
            m = measure_statement(s, "SELECT 1")
        assert m.io.is_zero()
    assert _databases(pg_server) == before  # the scratch database was dropped
    with pg_server.connect(user_database) as conn:
        assert conn.execute("SELECT owner FROM accounts ORDER BY id").fetchall() == [
            ("alice",),
            ("bob",),
        ]


def test_dsn_cannot_change_restart_level_settings(pg_server: PgServer) -> None:
    with PgServer.from_dsn(pg_server.conninfo("postgres")) as remote:
        current = remote.settings
        assert current.io_method in ("worker", "sync")
        other = "sync" if current.io_method == "worker" else "worker"
        with pytest.raises(PgSettingUnavailable) as info:
            remote.configure(ServerSettings(io_method=other))
        assert info.value.setting == "io_method"
        assert "cannot set io_method" in str(info.value) and "DSN mode" in str(info.value)
        with pytest.raises(PgSettingUnavailable, match="cannot set shared_buffers"):
            remote.configure(ServerSettings(shared_buffers=(current.shared_buffers or 0) + 16))
        assert remote.configure(ServerSettings(io_method=current.io_method)) == "unchanged"
        assert remote.configure(ServerSettings()) == "unchanged"


def test_dsn_requires_a_superuser(pg_server: PgServer) -> None:
    role = f"plain_{os.getpid()}"
    with pg_server.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        from psycopg.conninfo import make_conninfo

        dsn = make_conninfo(pg_server.conninfo("postgres"), user=role)
        with pytest.raises(PgUnsafeDatabase, match="not a superuser"):
            PgServer.from_dsn(dsn)
    finally:
        with pg_server.connect() as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_dsn_rejects_a_malformed_string() -> None:
    with pytest.raises(ValueError, match="not a valid libpq connection string"):
        PgServer.from_dsn("host=/x port")


def test_dsn_reports_an_unreachable_server(tmp_path: Path) -> None:
    with pytest.raises(PgNotAvailable, match="cannot connect to") as info:
        PgServer.from_dsn(f"host={tmp_path} user=someone password=secret dbname=x")
    assert "secret" not in str(info.value)


def test_owned_scratch_database_drop(pg_server: PgServer) -> None:
    db = pg_server.scratch_database(label="drop me")
    assert db.name in _databases(pg_server) and db.name.endswith("_drop_me")
    db.drop()
    assert db.name not in _databases(pg_server)
