"""Fixtures of the fidelity tests: the golden oracle document and, for live runs, a server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
GOLDEN = _GOLDEN_DIR / "oracle_pg18.json"
#: The stored oracle document of each model version, measured on a server of that version:
#: 18.6 (embedded), 19beta1 and master (20devel) builds.
GOLDEN_BY_VERSION = {
    "18": GOLDEN,
    "19": _GOLDEN_DIR / "oracle_pg19.json",
    "20devel": _GOLDEN_DIR / "oracle_pg20devel.json",
}
_CACHE: dict[str, dict[str, Any]] = {}


def golden(version: str = "18") -> dict[str, Any]:
    """The stored oracle document measured on a server of model version ``version``."""
    doc = _CACHE.get(version)
    if doc is None:
        doc = _CACHE[version] = json.loads(GOLDEN_BY_VERSION[version].read_text())
    return doc


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
