"""The sample-scan thread's tables, small: every speedup and regression goes the published way."""

from __future__ import annotations

from ._seeds import assert_directions, by_row, run_small


def test_64gib_table_directions_and_ratios() -> None:
    # 0.01 of 8,388,608 blocks: SYSTEM(0.1) samples ~84 blocks, enough to get past the ramp-up.
    rows = run_small(["sample-64gib"], scale=0.01)
    assert_directions(rows)
    r = by_row(rows)
    assert r["SYSTEM(1) master"]["role"] == "calibration"
    for name in ("SYSTEM(0.1)", "SYSTEM(1)", "SYSTEM(10)"):
        sim = r[f"{name} speedup"]["simulated"]
        assert 4 < sim < 15, (name, sim)
    # BERNOULLI reads sequentially, so streaming gains far less than for the random SYSTEM pages.
    bern = next(v for k, v in r.items() if k.startswith("BERNOULLI") and k.endswith("speedup"))
    assert bern["simulated"] < r["SYSTEM(1) speedup"]["simulated"] / 1.5


def test_concurrency_and_remarks() -> None:
    rows = run_small(["sample-concurrency"], scale=0.005)
    assert_directions(rows)
    r = by_row(rows)
    assert r["8 clients SYSTEM(1) patch"]["simulated"] > 2 * r["8 clients SYSTEM(1) master"]["simulated"]
    assert abs(r["eic=0: patch time / master time"]["simulated"] - 1.0) < 0.03
    assert r["worker eic=1: patch time / master time"]["simulated"] > 1.0


def test_system_time_overshoots_by_what_was_queued() -> None:
    rows = run_small(["sample-system-time"], scale=1.0)
    assert_directions(rows, ties_ok=True)
    r = by_row(rows)
    over = {}
    for method in ("worker", "sync", "io_uring"):
        for eic in (16, 256):
            base = r[f"{method} eic={eic} unpatched"]["simulated"]
            patch = r[f"{method} eic={eic} patched"]["simulated"]
            assert 100.0 <= base < 100.2
            assert patch >= base
            over[(method, eic)] = patch - base
    assert max(over, key=over.get) == ("sync", 256)
    assert over[("sync", 256)] > 10 * over[("sync", 16)]
    assert over[("io_uring", 256)] < 1.0
