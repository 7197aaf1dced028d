"""Fixtures of the fidelity tests: the golden oracle document and, for live runs, a server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "oracle_pg18.json"


def golden() -> dict[str, Any]:
    """The stored oracle document (measured on PostgreSQL 18.6)."""
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="session")
def golden_doc() -> dict[str, Any]:
    return golden()


@pytest.fixture(scope="session")
def pg_impl() -> Iterator[Any]:
    """This worker's PostgreSQL implementation (its own embedded server, one per xdist worker)."""
    from pytest_readstream.postgres import PgNotAvailable
    from pytest_readstream.postgres.impl.implementation import PostgresImplementation

    # The cluster lives in the implementation's own temporary directory, not under pytest's
    # basetemp: any pytest process starting meanwhile resets pytest-of-<user> to mode 0700,
    # which would cut a running server (another OS user) off its data directory.
    impl = PostgresImplementation(pytest_mode=False)
    try:
        impl.server  # noqa: B018 - start it now, so a missing server skips instead of failing
    except PgNotAvailable as err:
        impl.close()
        pytest.skip(f"no PostgreSQL 18 available: {err}")
    yield impl
    impl.close()
