"""``readstream mutants --impl postgres``: the C mutants' kill matrix, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--impl", "postgres"],
            "needs the server's source: give either --pg-source DIR or --pg-fetch-source",
        ),
        (
            ["--impl", "postgres", "--pg-source", "/nonexistent-src"],
            "--pg-source /nonexistent-src: not a directory",
        ),
        (
            ["--impl", "postgres", "--pg-fetch-source", "--only", "nope"],
            "--only 'nope' is not a C mutant: allowed",
        ),
        (["--pg-source", "."], "--pg-source, --pg-fetch-source and --pg-bindir need --impl postgres"),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")
    assert main(["mutants", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
@pytest.mark.postgres
def test_a_c_mutant_is_killed_and_the_copy_is_clean(pg_source_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "kill.json"
    argv = ["mutants", "--impl", "postgres", "--pg-source", str(pg_source_tree)]
    code = main([*argv, "--only", "reset-stays-ended", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["reference_clean"], data["reference"]
    assert data["mutants"]["reset-stays-ended"]["killed"]
    assert code == 0


def test_the_kill_matrix_says_how_each_run_went(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One progress line per run on stderr, each with its verdict: a kill counts only tests the
    unmutated copy passed (run_suite replaced by recorded outcomes; no server)."""
    from pytest_readstream.postgres.builds import cmutants

    runs = {
        None: {"failed": [], "passed": 3, "passed_tests": ["a", "b", "c"], "skipped": 0, "exit_code": 0},
        "no-combine": {"failed": ["b"], "passed": 2, "skipped": 0, "exit_code": 1},
        "distance-plus-one": {"failed": [], "passed": 3, "skipped": 0, "exit_code": 0},
    }

    def fake_run_suite(impl: str, args: list[str], timeout_s: float) -> dict[str, Any]:
        mutant = next((a.split("=", 1)[1] for a in args if a.startswith("--readstream-pg-mutant=")), None)
        return dict(runs[mutant])

    monkeypatch.setattr(cmutants, "run_suite", fake_run_suite)
    out = cmutants.run_c_kill_matrix([], [], ["no-combine", "distance-plus-one"])
    err = capsys.readouterr().err
    assert "unmutated copy: 3 passed, 0 failed" in err
    assert "no-combine: killed by 1 test(s)" in err
    assert "distance-plus-one: SURVIVED" in err
    assert out["mutants"]["no-combine"]["killed"] and not out["mutants"]["distance-plus-one"]["killed"]
    assert out["reference_clean"] and not out["all_killed"]


def test_fail_fast_stops_only_the_mutants_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fail-fast``: each mutant's run gets ``--maxfail=1``; the unmutated copy runs whole (a kill
    counts only tests it passed)."""
    from pytest_readstream.postgres.builds import cmutants

    seen: list[list[str]] = []

    def fake_run_suite(impl: str, args: list[str], timeout_s: float) -> dict[str, Any]:
        seen.append(list(args))
        mutant = any(a.startswith("--readstream-pg-mutant=") for a in args)
        return {
            "failed": ["a"] if mutant else [],
            "passed": 1,
            "passed_tests": ["a"],
            "skipped": 0,
            "exit_code": 1 if mutant else 0,
        }

    monkeypatch.setattr(cmutants, "run_suite", fake_run_suite)
    out = cmutants.run_c_kill_matrix([], [], ["no-combine"], fail_fast=True)
    assert "--maxfail=1" not in seen[0]
    assert "--maxfail=1" in seen[1]
    assert out["fail_fast"] and out["all_killed"]


def test_fail_fast_is_for_the_c_mutants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--fail-fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fail-fast needs --impl postgres" in err[0]
