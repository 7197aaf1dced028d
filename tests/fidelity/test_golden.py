"""The model against the stored server measurements of each version (no server needed).

``fixtures/golden/oracle_pg18.json`` holds what ``readstream oracle`` measured on PostgreSQL 18.6
for every scenario of ``pytest_readstream.postgres.fidelity.scenarios``, ``oracle_pg19.json`` and
``oracle_pg20devel.json`` the same on 19beta1 and master builds (``readstream oracle
--pg-bindir BIN --json PATH``). Each scenario is run through the model of that version again and
compared with the stored server figures exactly as the live oracle compares them: scenarios that
agreed must still agree, explained ones must still pass their reason's checks (the reason that
applies on that version). A model discrepancy that is known and reported stays here as a strict
xfail naming what differs, so that fixing the model turns it into an error until the entry is
removed.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_readstream.postgres.fidelity.oracle import (
    _spec_dict,
    compare,
    reason_checks,
    run_model,
    side_from_record,
)
from pytest_readstream.postgres.fidelity.scenarios import REASONS, SCENARIOS, Scenario

from .conftest import GOLDEN_BY_VERSION, golden

VERSIONS = tuple(GOLDEN_BY_VERSION)
#: The major version string each document's server reports.
_SERVER_VERSION = {"18": "18.", "19": "19", "20devel": "20devel"}

#: Differences between the model and a server that the model owners have been told about,
#: per version.
KNOWN_MODEL_DISCREPANCIES: dict[str, dict[str, str]] = {v: {} for v in VERSIONS}

_SLOW = {"seqscan-segment-crossing"}  # 131,080 blocks through the model: about 10 s


def _slow(version: str, sc: Scenario) -> bool:
    return sc.name in _SLOW


def _params() -> list[Any]:
    out = []
    for version in VERSIONS:
        known = KNOWN_MODEL_DISCREPANCIES[version]
        for sc in SCENARIOS:
            marks: list[Any] = [pytest.mark.slow] if _slow(version, sc) else []
            if sc.name in known:
                marks.append(pytest.mark.xfail(reason=known[sc.name], strict=True))
            out.append(pytest.param(version, sc, id=f"{version}-{sc.name}", marks=marks))
    return out


def _records(version: str = "18") -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in golden(version)["scenarios"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_document_describes_the_server(version: str) -> None:
    doc = golden(version)
    assert doc["server"]["version"].startswith(_SERVER_VERSION[version]), doc["server"]
    assert doc["server"].get("model_version", "18") == version
    assert doc["server"]["block_size"] == 8192
    from reference_impl import Settings

    for record in doc["scenarios"]:
        assert "skipped" not in record, record["name"]
        # Negative only where pinned blocks were never read (see oracle.compare), and then the
        # per-relation counters themselves are compared.
        other = record["server"]["other_blocks_read"]
        assert other == 0 or (other < 0 and "relation_reads" in record["server"]), record["name"]
        observed = record["server"]["settings"]
        wanted = Settings(**record["settings"])
        assert observed["server_version"] == doc["server"]["version"]
        for name in (
            "io_method",
            "io_combine_limit",
            "io_max_combine_limit",
            "effective_io_concurrency",
            "maintenance_io_concurrency",
            "shared_buffers",
            "vacuum_buffer_usage_limit",
        ):
            assert observed[name] == str(getattr(wanted, name)), (record["name"], name, observed[name])
        assert observed["synchronize_seqscans"] == ("on" if wanted.synchronize_seqscans else "off")


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_scenarios_are_the_current_ones(version: str) -> None:
    """Same names, relations, settings and parameters: the golden data is not stale."""
    records = _records(version)
    assert sorted(records) == sorted(s.name for s in SCENARIOS)
    for sc in SCENARIOS:
        r = records[sc.name]
        assert r["scan"] == sc.scan
        assert r["relation"] == _spec_dict(sc.relation), sc.name
        assert r["settings"] == dict(sc.settings), sc.name
        assert r["params"] == dict(sc.params), sc.name
        assert r["answer_keys"] == list(sc.answer_keys), sc.name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_stored_disagreement_is_explained_or_known(version: str) -> None:
    for r in golden(version)["scenarios"]:
        if r["agree"]:
            continue
        assert r.get("explained") or r["name"] in KNOWN_MODEL_DISCREPANCIES[version], (
            f"{r['name']} differs ({r['differs']}) with no named reason"
        )
        if r.get("explained"):
            assert r["explained"]["reason"] in REASONS
            assert all(r["checks"].values())


def test_scenario_set_covers_the_issue() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) >= 30
    seq = [s for s in SCENARIOS if s.scan == "seqscan"]
    assert {s.settings.get("io_combine_limit", 16) for s in seq} >= {1, 4, 8, 16, 32}
    assert {s.settings.get("effective_io_concurrency", 16) for s in seq} >= {0, 1, 16}
    assert {s.settings.get("io_method", "worker") for s in seq} == {"sync", "worker"}
    assert any(s.relation.nblocks > 131072 for s in seq)
    scans = {s.scan for s in SCENARIOS}
    assert scans >= {
        "tablesample_system",
        "tablesample_bernoulli",
        "tablesample_system_rows",
        "tablesample_system_time",
        "analyze",
        "pg_prewarm",
        "pg_prewarm_read",
        "pg_prewarm_prefetch",
        "vacuum",
        "bitmapscan",
        "pgstattuple",
        "pgstattuple_approx",
        "pgstatindex",
        "pgstathashindex",
        "verify_heapam",
        "bt_index_check",
    }


@pytest.mark.parametrize(("version", "scenario"), _params())
def test_model_against_golden_server(version: str, scenario: Scenario) -> None:
    record = _records(version)[scenario.name]
    model = run_model(scenario, None if version == "18" else version)
    server = side_from_record(record)
    cmp = compare(scenario, model, server)
    # The model as it is now against the stored server side: agreement, or a named reason whose
    # checks hold. (The stored "agree" flag is what the live run found when it was recorded.)
    reason = scenario.reason_for(version)
    if reason is None:
        assert cmp["differs"] == [], _describe(cmp["differs"], model, server)
    else:
        checks = reason_checks(scenario, model, server, version)
        assert all(checks.values()), f"{scenario.name}: reason {reason} checks failed: {checks}"


def _describe(differs: list[str], model: dict[str, Any], server: dict[str, Any]) -> str:
    parts = []
    for key in differs:
        if key in ("reads", "read_bytes", "io"):
            parts.append(f"{key}: model {model[key]} server {server[key]}")
        elif key.startswith("answer."):
            k = key.split(".", 1)[1]
            parts.append(f"{key}: model {model['answer'].get(k)!r} server {server['answer'].get(k)!r}")
        else:
            parts.append(key)
    return "; ".join(parts)


def test_relation_reads_are_compared_where_a_scenario_asks() -> None:
    flagged = next(s for s in SCENARIOS if s.relation_reads)
    plain = next(s for s in SCENARIOS if not s.relation_reads and s.reason is None)
    for sc in (flagged, plain):
        server = side_from_record(_records()[sc.name])
        model = dict(
            server, relation_reads={k: v + 1 for k, v in server["relation_reads"].items()} or {"t": 1}
        )
        assert ("relation_reads" in compare(sc, model, server)["differs"]) is (sc is flagged)
    # The stored server side of a flagged scenario carries the counters it is compared on.
    assert _records()[flagged.name]["server"]["relation_reads"] == {"fresh": 10_010}
