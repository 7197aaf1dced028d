"""readstream check: runs the suite in a subprocess and ends with a one-line verdict by tier."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.cli import check_verdict, main
from pytest_readstream.verdict import tier_counts, tier_table, verdict


def _suite_count(tier: str) -> int:
    """How many tests of ``tier`` the shipped suite holds, counted from the tests' own tier markers."""
    import importlib

    import readstream_conformance

    root = Path(readstream_conformance.__file__).parent
    count = 0
    for path in sorted(root.glob("test_*.py")):
        module = importlib.import_module(f"readstream_conformance.{path.stem}")
        for name in dir(module):
            fn = getattr(module, name)
            if not (name.startswith("test_") and callable(fn)):
                continue
            marks = getattr(fn, "pytestmark", [])
            tiers = [m.args[1] for m in marks if m.name == "readstream_invariant" and len(m.args) > 1]
            if tier not in tiers:
                continue
            cases = 1
            for m in marks:
                if m.name == "parametrize":
                    cases *= len(m.args[1])
            count += cases
    return count


MUST = _suite_count("MUST")
SHOULD = _suite_count("SHOULD")


def _report(families: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"implementation": {"name": "mine"}, "seed": 5, "families": families, **extra}


def _counts(**kw: int) -> dict[str, int]:
    base = dict.fromkeys(("passed", "failed", "error", "skipped", "xfailed", "xpassed", "incomplete"), 0)
    return base | kw


def test_verdict_conforms_only_when_every_must_test_ran_and_passed() -> None:
    report = _report(
        {
            "pins": {"MUST": _counts(passed=3)},
            "reads": {"MUST": _counts(passed=2), "SHOULD": _counts(passed=2)},
        }
    )
    result = verdict(report)
    assert result.line == (
        "readstream check: mine conforms: all 5 MUST tests ran and passed; SHOULD 2/2 passed; seed 5"
    )
    assert (result.word, result.exit_status) == ("conforms", 0)


def test_verdict_names_should_failures_and_what_they_mean() -> None:
    """Issue 18: a slower look-ahead fails only SHOULD tests; the verdict conforms and says so."""
    report = _report(
        {
            "pins": {"MUST": _counts(passed=3)},
            "reads": {"MUST": _counts(passed=2), "SHOULD": _counts(passed=1, failed=3)},
            "performance": {"MAY": _counts(passed=1, failed=1)},
        }
    )
    result = verdict(report)
    assert result.exit_status == 0
    assert result.line == (
        "readstream check: mine conforms: all 5 MUST tests ran and passed; "
        "SHOULD 1/4 passed, 3 FAILED: reads 3 (read sequence unlike PostgreSQL's); "
        "MAY 1/2 passed, 1 FAILED: performance 1 (slower than PostgreSQL); seed 5"
    )


def test_verdict_is_incomplete_when_must_tests_did_not_run() -> None:
    """Issue 11 / issue 15 item 4: skipped MUST tests never read as conformance."""
    tests = [
        {"invariant": {"family": "pins", "tier": "MUST"}, "outcome": "passed"},
        {
            "invariant": {"family": "pins", "tier": "MUST"},
            "outcome": "skipped",
            "missing_capabilities": ["scans"],
        },
        {
            "invariant": {"family": "scans", "tier": "MUST"},
            "outcome": "skipped",
            "missing_capabilities": ["scans"],
        },
        {"invariant": {"family": "faults", "tier": "MUST"}, "outcome": "skipped", "missing_capabilities": []},
    ]
    result = verdict(_report({}, tests=tests, deselected={"MUST": 2}))
    assert (result.word, result.exit_status) == ("INCOMPLETE", 3)
    assert result.line == (
        "readstream check: mine INCOMPLETE: only 1 of 6 MUST tests ran, 1 passed, 2 skipped for "
        "missing capabilities (scans 2), 1 skipped, 2 deselected; seed 5"
    )
    table = tier_table(tier_counts(_report({}, tests=tests, deselected={"MUST": 2})))
    assert table[1].split() == ["MUST", "6", "1", "1", "0", "0", "2", "1", "2"]
    nothing = verdict(_report({}, tests=tests[1:]))
    assert nothing.exit_status == 3 and "INCOMPLETE: no MUST test ran (0 of 3 MUST tests ran" in nothing.line


def test_verdict_does_not_conform_on_a_must_failure_a_known_failure_or_an_interruption() -> None:
    failing = verdict(_report({"pins": {"MUST": _counts(passed=3, error=1), "MAY": _counts(xfailed=2)}}))
    assert failing.line == (
        "readstream check: mine DOES NOT CONFORM: 4 of 4 MUST tests ran, 3 passed, 1 FAILED (pins 1); "
        "MAY none ran (2 xfailed); seed 5"
    )
    assert failing.exit_status == 1
    known = verdict(_report({"scans": {"MUST": _counts(passed=13, xfailed=2, skipped=390)}}))
    assert (
        known.exit_status == 1
        and "13 of 405 MUST tests ran, 13 passed, 2 known failures (xfailed)" in known.line
    )
    cut = verdict(_report({"pins": {"MUST": _counts(passed=3)}}, interrupted=True))
    assert (cut.word, cut.exit_status) == ("INTERRUPTED", 130)
    assert check_verdict(_report({})) == "readstream check: mine INCOMPLETE: no MUST test ran; seed 5"


HERE = Path(__file__).parent


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest_readstream.cli", "check", "-n", "0", "--json"]
    return subprocess.run(
        [*cmd, str(tmp_path / "r.json"), *args], capture_output=True, text=True, cwd=tmp_path
    )


def _last(out: subprocess.CompletedProcess[str]) -> str:
    return out.stdout.strip().splitlines()[-1]


def test_check_runs_the_suite_and_prints_the_verdict(tmp_path: Path) -> None:
    out = _check(tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert _last(out).startswith(
        f"readstream check: reference conforms: all {MUST} MUST tests ran and passed; "
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] >= 1
    assert out.stdout.count("invariant family") == 1  # the family table is printed once
    assert f"report written to {tmp_path / 'r.json'}" in out.stdout  # kept, so announced


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
    # A selection is not the suite: the verdict says how many MUST tests ran of how many exist.
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    assert re.match(
        rf"readstream check: reference INCOMPLETE: only (\d+) of {MUST} MUST tests ran, \1 passed, \d+ deselected; "
        rf"SHOULD none ran \({SHOULD} deselected\); MAY none ran \(6 deselected\); seed \d+$",
        _last(out),
    ), _last(out)
    assert "report written to" not in out.stdout  # the report is deleted: no path is printed
    assert [p.name for p in tmpdir.iterdir() if p.name.startswith("readstream-check-")] == []


def test_check_of_a_partial_implementation_is_incomplete_and_exits_3(tmp_path: Path) -> None:
    """Issue 15 item 4: a stream lacking capabilities is never said to conform."""
    shutil.copy(HERE / "no_lookahead.py", tmp_path / "no_lookahead.py")
    out = _check(tmp_path, "--impl", "no_lookahead:NoLookaheadImplementation")
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    line = _last(out)
    match = re.match(
        rf"readstream check: no-lookahead INCOMPLETE: only (\d+) of {MUST} MUST tests ran, \1 passed, ", line
    )
    assert match and int(match.group(1)) < MUST, line
    assert "skipped for missing capabilities (" in line and "pause-resume " in line and "scans " in line
    assert "SHOULD " in line and " FAILED: " in line
    table = out.stdout.strip().splitlines()[-5:-1]
    assert table[0].split()[:4] == ["tier", "tests", "ran", "passed"]
    assert table[1].split()[:3] == ["MUST", str(MUST), match.group(1)]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["exitstatus"] == 1  # pytest's own status differs: the verdict decides


def test_check_of_a_slower_lookahead_conforms_and_shows_the_should_failures(tmp_path: Path) -> None:
    """Issue 18: a distance that grows by one instead of doubling fails SHOULD tests only."""
    shutil.copy(HERE / "distance_plus_one.py", tmp_path / "distance_plus_one.py")
    out = _check(tmp_path, "--impl", "distance_plus_one:DistancePlusOneImplementation")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    line = _last(out)
    assert line.startswith(
        f"readstream check: distance-plus-one conforms: all {MUST} MUST tests ran and passed; SHOULD "
    ), line
    assert re.search(
        rf"SHOULD (\d+)/{SHOULD} passed, \d+ FAILED: .*reads \d+ \(read sequence unlike PostgreSQL's\)", line
    )


def test_check_refuses_an_unknown_implementation_with_status_2(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest_readstream.cli", "check", "--impl", "nosuch"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 2
    assert out.stderr.startswith(
        "readstream check: --impl nosuch: unknown implementation 'nosuch'; available: "
    )
    assert len(out.stderr.strip().splitlines()) == 1 and "--readstream-impl" not in out.stderr
    assert out.stdout == ""  # refused before the suite started


def test_check_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for status in ("0 conforms", "1 does not conform", "2 usage error", "3 incomplete", "130 interrupted"):
        assert status in text


def test_check_against_a_mutant_does_not_conform(tmp_path: Path) -> None:
    out = _check(
        tmp_path, "--impl", "mutant:set-strategy-pin-limit-zero", "--", "-k", "pin_limit_stays_at_least_one"
    )
    assert out.returncode == 1
    assert re.match(
        rf"readstream check: mutant:set-strategy-pin-limit-zero DOES NOT CONFORM: \d+ of {MUST} MUST tests ran, "
        r"\d+ passed, \d+ FAILED \(strategy \d+\)",
        _last(out),
    ), _last(out)


def test_check_refuses_an_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--profile", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err  # argparse's quoting of the choices differs between versions
    assert "--profile: invalid choice: 'nope'" in err and all(p in err for p in ("ci", "dev", "thorough"))


def test_verdict_of_a_run_with_harness_errors_is_an_error_not_a_failure() -> None:
    """Issue 24 item 4: a test the harness could not run judged nothing; no verdict, exit 2."""
    line = "the harness could not start the PostgreSQL server: the postmaster exited with status 1"
    tests = [
        {"outcome": "error", "invariant": {"tier": "MUST", "family": "pins"}, "harness_error": line},
        {"outcome": "failed", "invariant": {"tier": "MUST", "family": "pins"}, "harness_error": line},
        {"outcome": "passed", "invariant": {"tier": "MUST", "family": "reads"}},
    ]
    report = {"implementation": {"name": "postgres"}, "seed": 5, "tests": tests}
    result = verdict(report)
    assert (result.word, result.exit_status) == ("ERROR", 2)
    assert result.line.startswith(f"readstream check: postgres ERROR: {line} (2 tests; no verdict")
    must = tier_counts(report)["MUST"]
    assert (must.failed, must.passed, must.harness_errors) == (0, 1, 2)
    assert tier_table(tier_counts(report))[0].split()[-1] == "harness-error"


def test_check_says_the_harness_could_not_start_the_server_and_exits_2(tmp_path: Path) -> None:
    shutil.copy(HERE / "no_server.py", tmp_path / "no_server.py")
    out = _check(tmp_path, "--impl", "no_server:NoServerImplementation", "--", "-k", "test_pins")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    line = _last(out)
    assert line.startswith(
        "readstream check: no-server ERROR: the harness could not start the PostgreSQL server: "
        "the postmaster exited with status 1 during start-up: "
        'FATAL:  unrecognized configuration parameter "io_workers" ('
    ), line
    assert "FAILED" not in line and "CONFORM" not in line, line
    report = json.loads((tmp_path / "r.json").read_text())
    stopped = [t for t in report["tests"] if t["harness_error"]]
    assert stopped and all(t["outcome"] in ("failed", "error") for t in stopped)


def test_harness_errors_that_differ_only_in_a_temporary_directory_are_one() -> None:
    from pytest_readstream.harness_errors import main_harness_error

    lines = [
        "the harness could not build the probe: /var/build/b-1/.src-d_bchlg3/x.h:13: error: unknown type name",
        "the harness could not build the probe: /var/build/b-1/.src-w56xnxw8/x.h:13: error: unknown type name",
        "the harness could not start the PostgreSQL server: exit 1",
    ]
    assert main_harness_error(lines) == (lines[0], 2, 3)
    assert main_harness_error([None, ""]) is None


def test_a_bug_of_the_tool_is_an_error_not_a_verdict(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """An uncaught exception would leave Python with exit status 1, which `check` and `review`
    use for "does not conform" and "changes" (the CI recipe accepts 1 as a review that found
    changes): it is one line and exit 2 instead, the traceback on request."""
    import pytest_readstream.cli as cli

    def broken(_args: list[str]) -> int:
        raise IsADirectoryError(21, "Is a directory", "branch/.git")

    monkeypatch.setitem(cli.COMMANDS, "review", broken)
    monkeypatch.delenv("READSTREAM_TRACEBACK", raising=False)
    assert main(["review"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith("readstream review: internal error") and "IsADirectoryError" in err[0]
    monkeypatch.setenv("READSTREAM_TRACEBACK", "1")
    assert main(["review"]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err
