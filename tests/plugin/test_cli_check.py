"""readstream check: runs the suite in a subprocess and ends with a one-line verdict by tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.cli import check_verdict, main


def _report(families: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"implementation": {"name": "mine"}, "seed": 5, "families": families, **extra}


def _counts(**kw: int) -> dict[str, int]:
    base = dict.fromkeys(("passed", "failed", "error", "skipped", "xfailed", "xpassed", "incomplete"), 0)
    return base | kw


def test_verdict_conforms_when_no_must_test_fails() -> None:
    report = _report(
        {
            "pins": {"MUST": _counts(passed=3)},
            "reads": {"MUST": _counts(passed=2, skipped=1), "SHOULD": _counts(passed=1, failed=1)},
        }
    )
    assert check_verdict(report) == (
        "readstream check: mine conforms: MUST 5/5 passed (1 skipped); SHOULD 1/2 passed; seed 5"
    )


def test_verdict_fails_on_a_must_failure_or_an_interrupted_run() -> None:
    failing = _report({"pins": {"MUST": _counts(passed=3, error=1), "MAY": _counts(xfailed=2)}})
    assert check_verdict(failing) == (
        "readstream check: mine DOES NOT CONFORM: MUST 3/4 passed; MAY 0/0 passed (2 xfailed); seed 5"
    )
    cut = _report({"pins": {"MUST": _counts(passed=3)}}, interrupted=True)
    assert "DOES NOT CONFORM" in check_verdict(cut)
    assert check_verdict(_report({})) == "readstream check: mine: no conformance test ran"


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest_readstream.cli", "check", "-n", "0", "--json"]
    return subprocess.run(
        [*cmd, str(tmp_path / "r.json"), *args], capture_output=True, text=True, cwd=tmp_path
    )


def test_check_runs_the_suite_and_prints_the_verdict(tmp_path: Path) -> None:
    out = _check(tmp_path, "--", "-k", "pin_limit_stays_at_least_one")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("readstream check: reference conforms: MUST ")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] >= 1
    assert out.stdout.count("invariant family") == 1  # the family table is printed once


def test_check_without_json_prints_the_verdict_and_leaves_no_report_behind(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [sys.executable, "-m", "pytest_readstream.cli", "check", "-n", "0"]
    out = subprocess.run(
        [*cmd, "--", "-k", "pin_limit_stays_at_least_one"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("readstream check: reference conforms: MUST ")
    assert [p.name for p in tmpdir.iterdir() if p.name.startswith("readstream-check-")] == []


def test_check_against_a_mutant_does_not_conform(tmp_path: Path) -> None:
    out = _check(
        tmp_path, "--impl", "mutant:set-strategy-pin-limit-zero", "--", "-k", "pin_limit_stays_at_least_one"
    )
    assert out.returncode == 1
    assert "readstream check: mutant:set-strategy-pin-limit-zero DOES NOT CONFORM: MUST " in out.stdout


def test_check_refuses_an_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--profile", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err  # argparse's quoting of the choices differs between versions
    assert "--profile: invalid choice: 'nope'" in err and all(p in err for p in ("ci", "dev", "thorough"))
