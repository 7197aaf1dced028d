"""``readstream bench model``: the model's cost per block against a bare loop, and its memory."""

from __future__ import annotations

import io
import re

import pytest

from pytest_readstream.bench.model import (
    bare_pin_loop,
    format_model_benchmark,
    model_scan,
    profile_model,
    run_model_benchmark,
)


def test_benchmark_figures_and_json(tmp_path) -> None:
    out = tmp_path / "model.json"
    printed = io.StringIO()
    fig = run_model_benchmark(out, nblocks=2000, rounds=1, rss_nblocks=20_000, out=printed)
    assert '"ratio"' in printed.getvalue() and "ns/block" in printed.getvalue()
    assert {
        "model_ns_per_block",
        "bare_ns_per_block",
        "ratio",
        "blocks_per_second",
        "peak_rss_mb_64gib",
    } <= set(fig)
    assert fig["ratio"] == pytest.approx(fig["model_ns_per_block"] / fig["bare_ns_per_block"], rel=0.01)
    assert fig["blocks_per_second"] == pytest.approx(1e9 / fig["model_ns_per_block"], rel=0.01)
    assert 0 < fig["peak_rss_mb_64gib"] < 300
    assert '"ratio"' in out.read_text()
    assert "ratio" in format_model_benchmark(fig)


def test_memory_is_measured_only_when_asked() -> None:
    fig = run_model_benchmark(nblocks=1000, rounds=1, rss_nblocks=None, out=io.StringIO())
    assert fig["peak_rss_mb_64gib"] is None
    assert "not measured" in format_model_benchmark(fig)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="nblocks = 10 is too small"):
        run_model_benchmark(nblocks=10)
    with pytest.raises(ValueError, match="rounds = 0"):
        run_model_benchmark(nblocks=1000, rounds=0)


def test_both_sides_take_time_and_profile_names_the_model() -> None:
    assert model_scan(1000) > 0 and bare_pin_loop(1000) >= 0
    rows = profile_model(2000, top=5)
    assert len(rows) == 5
    assert [r["own_s"] for r in rows] == sorted((r["own_s"] for r in rows), reverse=True)
    assert sum(r["own_share"] for r in rows) <= 1.0
    # Which function tops the list is timing; how often each runs is not.
    every = {r["function"]: r for r in profile_model(2000, top=10_000)}
    next_buffer = [f for f in every if f.startswith("read_stream/pg18.py:") and f.endswith("(_next_buffer)")]
    assert len(next_buffer) == 1
    assert every[next_buffer[0]]["calls_per_block"] >= 1.0


def test_cli_profile_prints_the_hot_spots(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pytest_readstream.bench.model as bench_model
    from pytest_readstream.cli import main

    def small_run(json_path: object = None) -> dict:
        return run_model_benchmark(nblocks=1000, rounds=1, rss_nblocks=None)

    monkeypatch.setattr(bench_model, "run_model_benchmark", small_run)
    monkeypatch.setattr(bench_model, "profile_model", lambda n: profile_model(2000, top=6))
    assert main(["bench", "model", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "goal <= 8 in pure Python" in out and "calls/block" in out
    # Which six functions are hottest is timing; that six rows of them are printed is not.
    assert len(re.findall(r"^\S+:\d+\(.*\)\s+[\d.]+\s+[\d.]+%", out, flags=re.M)) == 6


def test_opcode_counts_are_exact_and_repeatable() -> None:
    from pytest_readstream.bench.model import count_opcodes, format_opcodes

    first = count_opcodes(nblocks=4000, measured=1000, top=5)
    again = count_opcodes(nblocks=4000, measured=1000, top=5)
    assert first == again  # no clock in it: the same code gives the same figure anywhere
    assert first["model_opcodes_per_block"] > first["bare_opcodes_per_block"] > 0
    assert first["opcode_ratio"] == pytest.approx(
        first["model_opcodes_per_block"] / first["bare_opcodes_per_block"], abs=0.05
    )
    names = [row["function"] for row in first["functions"]]
    assert len(names) == 5 and any("_next_buffer" in n for n in names)
    assert "bytecode instructions per block" in format_opcodes(first)


def test_opcode_count_sizes_are_checked() -> None:
    from pytest_readstream.bench.model import count_opcodes

    with pytest.raises(ValueError, match="measured = 3000 are invalid"):
        count_opcodes(nblocks=4000, measured=3000)


def test_cli_opcodes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    import json

    import pytest_readstream.bench.model as bench_model
    from pytest_readstream.cli import main

    real = bench_model.count_opcodes
    monkeypatch.setattr(
        bench_model,
        "run_model_benchmark",
        lambda json_path=None: run_model_benchmark(nblocks=1000, rounds=1, rss_nblocks=None),
    )
    monkeypatch.setattr(bench_model, "count_opcodes", lambda: real(nblocks=2000, measured=500))
    out_json = tmp_path / "m.json"
    assert main(["bench", "model", "--opcodes", "--json", str(out_json)]) == 0
    assert "bytecode instructions per block" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["opcodes"]["measured_blocks"] == 500


def test_peak_rss_is_the_childs_own_not_its_parents() -> None:
    """A parent holding 400 MB starts the measurement: the child reports its own peak (Linux
    carries ``ru_maxrss`` over ``execve``, which once made this figure the parent's)."""
    import subprocess
    import sys

    code = (
        "import subprocess, sys\n"
        "ballast = bytearray(400 * 1024 * 1024)\n"
        "ballast[::4096] = b'x' * len(ballast[::4096])\n"
        "from pytest_readstream.bench.model import measure_peak_rss_mb\n"
        "print(measure_peak_rss_mb(5000))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < float(out.stdout.strip().splitlines()[-1]) < 200
