"""The harness reproduces the stored PostgreSQL 18 facts, and the facts agree with the spec."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.postgres import PgServer, ScratchDatabase, ServerSettings
from pytest_readstream.postgres.fidelity.facts import (
    COMPARED_COUNTERS,
    FACT_CASES,
    FACT_TABLES,
    FactCase,
    run_fact_case,
)

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "pg18_harness_facts.json"


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def _by_id() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in _golden()["cases"]}


def _compared(record: dict[str, Any]) -> dict[str, Any]:
    io = {
        ctx: {k: counts[k] for k in COMPARED_COUNTERS}
        for ctx, counts in record["io"].items()
        if any(counts[k] for k in COMPARED_COUNTERS)
    }
    return {
        "io": io,
        "relation": record["relation"],
        "resident_main": record["resident_main"],
    }


def test_golden_file_covers_every_case() -> None:
    doc = _golden()
    assert doc["server"]["version"].startswith("18.")
    assert [c["id"] for c in doc["cases"]] == [c.id for c in FACT_CASES]
    assert all(c["quiet"] for c in doc["cases"])
    assert doc["tables"] == FACT_TABLES


# -- the stored facts against the spec (no server needed) -----------------------------------


def _ramped_reads(pages: int, cap: int) -> int:
    """Reads of a cold sequential stream: sizes 1, 2, 4, ... capped at ``cap`` (read_stream.md §8.1)."""
    reads = done = 0
    size = 1
    while done < pages:
        take = min(size, cap, pages - done)
        done += take
        reads += 1
        size *= 2
    return reads


def _pool(case: dict[str, Any]) -> int:
    return int(case["observed_settings"]["shared_buffers"])


@pytest.mark.parametrize("case", _golden()["cases"], ids=lambda c: c["id"])
def test_fact_agrees_with_the_spec(case: dict[str, Any]) -> None:
    pages = case["pages"]
    nbuffers = _pool(case)
    icl = int(case["observed_settings"]["io_combine_limit"])
    eic = int(case["observed_settings"]["effective_io_concurrency"])
    # buffers_and_strategies.md §4.1: pin limit = NBuffers / (MaxBackends + 38) with
    # MaxBackends = 100 + 16 + 8 + 10 + 2; a stream may add at most that minus 8.
    pin_limit = nbuffers // (136 + 38)
    budget = max(1, pin_limit - 8)
    io = case["io"]
    if case["id"].startswith("prewarm"):
        # scans.md §8: no ramp, full io_combine_limit reads, context normal at any size.
        assert list(io) == ["normal"]
        assert io["normal"]["reads"] == math.ceil(pages / icl)
        assert case["resident_count"] == pages
        return
    large = pages > nbuffers // 4  # scans.md §2.2: strictly greater
    ctx = "bulkread" if large else "normal"
    assert [c for c in io if io[c]["reads"]] == [ctx]
    assert io[ctx]["reads"] == _ramped_reads(pages, min(icl, budget))
    assert io[ctx]["read_bytes"] == pages * 8192
    assert case["relation"] == {"blks_read": pages, "blks_hit": 0}
    if large:
        # buffers_and_strategies.md §6: ring = min(32 + C * eic, max(32, pin limit), NBuffers / 8).
        ring = min(32 + icl * eic, max(32, pin_limit), nbuffers // 8)
        assert case["resident_main"] == [[pages - ring, pages - 1]]
        assert io[ctx]["reuses"] == pages - ring
    else:
        assert case["resident_main"] == [[0, pages - 1]]


def test_spec_example_ten_thousand_blocks() -> None:
    # scans.md §2.3: a cold 10000-block table, defaults, gives 629 reads.
    for method in ("worker", "sync"):
        case = _by_id()[f"seqscan-t10000-{method}-defaults"]
        assert case["io"]["bulkread"]["reads"] == 629


# -- re-measuring on this worker's server ---------------------------------------------------


@pytest.fixture(scope="module")
def facts_db(pg_server: PgServer) -> Iterator[ScratchDatabase]:
    golden = _golden()["server"]["version"]
    if pg_server.version != golden:
        pytest.skip(f"facts were measured on PostgreSQL {golden}, this is {pg_server.version}")
    db = pg_server.scratch_database(label="facts")
    yield db
    db.drop()
    pg_server.configure(ServerSettings())


@pytest.mark.postgres
@pytest.mark.parametrize("case", FACT_CASES, ids=lambda c: c.id)
def test_harness_reproduces_fact(pg_server: PgServer, facts_db: ScratchDatabase, case: FactCase) -> None:
    record = run_fact_case(pg_server, facts_db, case)
    assert record["quiet"]
    assert _compared(record) == _compared(_by_id()[case.id])
