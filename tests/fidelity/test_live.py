"""A live comparison on the embedded PostgreSQL 18 for the fast subset of scenarios (CI).

Each fast scenario runs through the model and on this worker's own server; it must agree (or be
explained), and the server must reproduce the figures stored in the golden document, which
shows that the golden data is current and the measurement repeatable.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_readstream.postgres.oracle import (
    compare,
    run_model,
    run_oracle,
    run_server,
    select,
    side_from_record,
)
from pytest_readstream.postgres.scenarios import Scenario

from .conftest import golden

pytestmark = pytest.mark.postgres

_FAST = select(fast=True)


def test_fast_subset_is_small_and_varied() -> None:
    assert 5 <= len(_FAST) <= 10
    assert {s.relation.nblocks for s in _FAST} <= {1000, 2000, 3000}  # quick to build
    assert len({s.scan for s in _FAST}) >= 4
    assert {s.settings.get("io_method", "worker") for s in _FAST} == {"sync", "worker"}


@pytest.mark.parametrize("scenario", _FAST, ids=[s.name for s in _FAST])
def test_fast_scenario_live(pg_impl: Any, scenario: Scenario) -> None:
    model = run_model(scenario)
    server = run_server(pg_impl, scenario)
    cmp = compare(scenario, model, server)
    assert cmp["differs"] == [], (scenario.name, cmp["differs"], model["io"], server["io"])
    stored = side_from_record({r["name"]: r for r in golden()["scenarios"]}[scenario.name])
    again = compare(scenario, stored, server)
    assert again["differs"] == [], f"the server no longer measures what the golden file holds: {again}"


def test_run_oracle_document(pg_impl: Any) -> None:
    """``run_oracle`` with ``--only``: the JSON shape the CLI writes, and the printed table."""
    lines: list[str] = []
    doc = run_oracle(only=["system-5pct"], impl=pg_impl, echo=lines.append)
    assert doc["server"]["version"].startswith("18.")
    assert doc["summary"] == {"scenarios": 1, "agree": 1, "explained": 0, "differ": 0, "skipped": 0}
    (record,) = doc["scenarios"]
    assert set(record) >= {"name", "settings", "model", "server", "agree"}
    for side in ("model", "server"):
        assert set(record[side]) >= {"reads", "read_bytes", "blocks"}
    assert record["model"]["blocks"] == record["server"]["blocks"]
    table = lines[-2]
    assert "model reads" in table and "system-5pct-repeatable" in table and "agree" in table
    with pytest.raises(ValueError, match="no scenario matches"):
        run_oracle(only=["no-such-scenario"], impl=pg_impl, echo=None)


def test_hash_functions_match_the_server(pg_impl: Any) -> None:
    """The model's hashint4/hashint8 (hash index bucket choice) against the server's own."""
    import numpy as np

    from reference_impl.relations.hashfuncs import hashint4, hashint8

    rng = np.random.default_rng(14)
    v4 = [*range(-300, 300), 2**31 - 1, -(2**31), *rng.integers(-(2**31), 2**31, 500).tolist()]
    v8 = [*v4, 2**63 - 1, -(2**63), *rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64).tolist()]
    server = pg_impl.server
    with server._connect_raw(pg_impl.database.name) as conn:
        got4 = [r[0] for r in conn.execute("SELECT hashint4(v) FROM unnest(%s::int4[]) v", (v4,)).fetchall()]
        got8 = [r[0] for r in conn.execute("SELECT hashint8(v) FROM unnest(%s::int8[]) v", (v8,)).fetchall()]
    for fn, values, want in ((hashint4, v4, got4), (hashint8, v8, got8)):
        mine = fn(values).astype(np.int64)
        assert np.where(mine >= 2**31, mine - 2**32, mine).tolist() == want


def test_unhinted_scan_measured_without_wal_flush(pg_impl: Any) -> None:
    """The scenario whose resident blocks depended on when WAL was flushed: it agrees, and its
    measurement saw no flush inside the current WAL segment (the server's ``wal_flushed``)."""
    (scenario,) = select(["pgstattuple_approx-unhinted"])
    model = run_model(scenario)
    server = run_server(pg_impl, scenario)
    assert server["wal_flushed"] is False
    cmp = compare(scenario, model, server)
    assert cmp["differs"] == [], (cmp["differs"], model["resident"], server["resident"])
