"""Helpers for the seed-table tests: run some tables small, and judge directions."""

from __future__ import annotations

import io
from typing import Any

from pytest_readstream.bench.seeds import TIE_BAND, run_seed_benchmarks

# Rows whose direction the model is known to get wrong, with the reason (see docs/benchmarks.md).
KNOWN_GAPS = {
    "all cached: patch time / master time": "the model charges no CPU for a stream's own bookkeeping",
    "write-delay 0 ms write_time reduction": "the device's transfer stage serves calls in call order",
}


def run_small(tables: list[str], scale: float) -> list[dict[str, Any]]:
    out = io.StringIO()
    rows = run_seed_benchmarks(tables=tables, scale=scale, jobs=1, out=out)
    assert "published" in out.getvalue()
    return rows


def direction(x: float) -> int:
    return 0 if abs(x - 1.0) < TIE_BAND else (1 if x > 1.0 else -1)


def by_row(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["row"]: r for r in rows}


def assert_directions(rows: list[dict[str, Any]], *, ties_ok: bool = False) -> None:
    """Every derived speedup/reduction goes the published way (known gaps excepted)."""
    checked = 0
    for r in rows:
        if r.get("role") != "derived" and "check" not in r:
            continue
        if r["row"] in KNOWN_GAPS or r["simulated"] is None:
            continue
        pub, sim = direction(r["published"]), direction(r["simulated"])
        if ties_ok and 0 in (pub, sim):
            continue
        assert pub == sim, f"{r['row']}: published {r['published']} vs simulated {r['simulated']}"
        checked += 1
    assert checked
