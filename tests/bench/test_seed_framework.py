"""The seed benchmark machinery: tables, calibration, verdicts, output, missing scans."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from pytest_readstream.bench import seeds as bench_seeds
from pytest_readstream.bench.calibration import calibrate
from pytest_readstream.bench.tables import UNITS, build_tables


def test_tables_are_complete_and_consistent() -> None:
    tables = build_tables()
    assert len({t.key for t in tables}) == len(tables)
    assert {t.thread for t in tables} == {"sample-scan", "online-checksums", "streamify"}
    figures = {(t.thread, r.row) for t in tables for r in t.rows}
    for t in tables:
        names = [r.row for r in t.rows]
        assert len(set(names)) == len(names), t.key
        # The figure a table is calibrated on is one of its thread's rows (tables may share one).
        assert (t.thread, t.calibration.figure) in figures, t.key
        assert t.assumptions
        for r in t.rows:
            assert r.published > 0 and r.unit in UNITS and r.runs
        assert t.device(t.calibration.x0).name


def test_scale_is_validated() -> None:
    with pytest.raises(ValueError, match="scale = 0 is out of range"):
        build_tables(0)
    with pytest.raises(ValueError, match="unknown seed table"):
        bench_seeds.run_seed_benchmarks(tables=["no-such-table"], out=io.StringIO())


def test_calibration_solves_affine_and_curved_figures() -> None:
    calls: list[float] = []

    def affine(x: float) -> float:
        calls.append(x)
        return 1000 + 84 * x

    _x, y, n = calibrate(affine, 7530.0, x0=50, x1=100, lo=1, hi=1000)
    assert y == pytest.approx(7530.0, rel=0.003) and n <= 3
    _x, y, _ = calibrate(lambda v: v**1.3, 500.0, x0=10, x1=20, lo=1, hi=1e4)
    assert y == pytest.approx(500.0, rel=0.003)
    with pytest.raises(ValueError, match="must differ"):
        calibrate(affine, 1.0, x0=5, x1=5, lo=1, hi=10)


@pytest.mark.parametrize(
    ("pub", "sim", "ok", "why"),
    [
        (8.46, 9.61, True, "within"),
        (8.46, 0.9, False, "direction wrong"),
        (1.17, 1.002, False, "direction wrong: simulated unchanged"),
        (0.999, 1.3, False, "direction wrong: published unchanged"),
        (1.004, 0.995, True, "unchanged"),
        (4.0, 7.0, False, "magnitude off"),
        (0.81, 0.81, True, "within"),
    ],
)
def test_verdicts(pub: float, sim: float, ok: bool, why: str) -> None:
    got_ok, got_why = bench_seeds._verdict_speedup(pub, sim)
    assert got_ok is ok and why in got_why


def test_json_rows_and_a_missing_scan(tmp_path, monkeypatch) -> None:
    real = build_tables

    def with_missing(scale: float = 1.0):
        tables = real(scale)
        return [*tables, dataclasses.replace(tables[-1], key="ghost", scans=("no_such_scan",))]

    monkeypatch.setattr(bench_seeds, "build_tables", with_missing)
    out = io.StringIO()
    path = tmp_path / "rows.json"
    rows = bench_seeds.run_seed_benchmarks(
        json_path=path, tables=["streamify-pgstattuple", "ghost"], jobs=1, scale=0.5, out=out
    )
    data = json.loads(path.read_text())
    assert data == json.loads(json.dumps(rows))
    for r in data:
        assert {"thread", "table", "row", "published", "simulated", "unit"} <= set(r)
    ghost = [r for r in data if r["key"] == "ghost"]
    assert ghost and all(r["simulated"] is None for r in ghost)
    assert "no_such_scan not registered" in out.getvalue()
