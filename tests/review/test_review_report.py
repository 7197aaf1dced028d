"""The review's report, rendered from a recorded result (no server, no tree): the verdicts, the
tests whose outcome changed in their groups, the scenarios' first differing read, the timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.review.report import (
    build_report,
    changed_tests,
    format_markdown,
    format_text,
    kind_of,
)


def _test(
    nodeid: str, outcome: str, tier: str = "MUST", message: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "nodeid": nodeid,
        "outcome": outcome,
        "message": message,
        "invariant": {"family": "lifecycle", "tier": tier},
        "scenario": {
            "rerun": f"python -m pytest --pyargs 'readstream_conformance/{nodeid}' --readstream-seed=1"
        },
        "missing_capabilities": [],
        **extra,
    }


def _suite(tests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "implementation": {"name": "postgres"},
        "seed": 1,
        "interrupted": False,
        "summary": {
            o: sum(1 for t in tests if t["outcome"] == o) for o in ("passed", "failed", "skipped", "xfailed")
        },
        "tests": tests,
    }


BASE = _suite(
    [
        _test("test_lifecycle.py::test_end_releases_pins[1]", "passed"),
        _test("test_lifecycle.py::test_reset_waits[pg20devel-sync]", "passed"),
        _test("test_lifecycle.py::test_reset_waits_kinded", "passed"),
        _test("test_order.py::test_same", "passed"),
        _test("test_scans.py::test_known", "xfailed", tier="SHOULD", message="known failure"),
    ]
)
PATCHED = _suite(
    [
        _test(
            "test_lifecycle.py::test_end_releases_pins[1]",
            "failed",
            message="AssertionError: 1 pin left after end(): buffer 12\nmore detail",
        ),
        _test("test_lifecycle.py::test_reset_waits[pg20devel-sync]", "failed", message="reset did not wait"),
        _test(
            "test_lifecycle.py::test_reset_waits_kinded",
            "failed",
            message="no wait",
            readstream_kind="implementation",
        ),
        _test("test_order.py::test_same", "passed"),
        _test("test_scans.py::test_known", "xpassed", tier="SHOULD"),
    ]
)
COMPARE = {
    "scenarios": [
        {
            "scenario": "stream-reset",
            "description": "reset after 100",
            "base": {
                "reads": 10,
                "blocks": 120,
                "pins": 120,
                "waits": 8,
                "time_ms": 5.0,
                "read_sequence": [[0, 1], [1, 2], [3, 16]],
            },
            "patch": {
                "reads": 9,
                "blocks": 119,
                "pins": 119,
                "waits": 7,
                "time_ms": 4.0,
                "read_sequence": [[0, 1], [1, 2], [3, 15]],
            },
            "differences": ["reads 10 -> 9", "read #3 differs: base 3-18, patch 3-17"],
        },
        {"scenario": "stream", "description": "plain", "skipped": "base has no source tree"},
    ]
}
TIMING = {
    "pages": 1000,
    "repeats": 3,
    "rows": [
        {
            "profile": "nvme-75us",
            "device": "nvme 75 µs",
            "tables": ["sample-64gib"],
            "what": "traced stream",
            "base_ms": 10.0,
            "patched_ms": 12.0,
            "ratio": 1.2,
        },
        {
            "profile": "delayed-12000us",
            "device": "delayed 12000 µs",
            "tables": ["streamify-pgstattuple"],
            "what": "traced stream",
            "base_ms": 900.0,
            "patched_ms": 450.0,
            "ratio": 0.5,
        },
    ],
}


def _result(base: dict[str, Any] = BASE, patched: dict[str, Any] = PATCHED) -> dict[str, Any]:
    return {
        "base": {"tree": "BASE", "version": "20devel", "bindir": "BASE/bin"},
        "patched": {"tree": "PATCHED", "bindir": "BASE/bin"},
        "patch": "fix.patch",
        "plan": {"mode": "traced", "reason": "only read_stream.c's code changes"},
        "build": {"patched": "none"},
        "suites": {"base": base, "patched": patched},
        "compare": COMPARE,
        "timing": TIMING,
        "seconds": {"prepare": 3.0, "suite": 100.0, "total": 150.0},
    }


def test_the_kind_comes_from_the_test_first_then_a_version_parameter() -> None:
    assert kind_of({"nodeid": "t.py::x", "readstream_kind": "implementation"}) == (
        "implementation",
        "readstream_kind",
    )
    assert kind_of({"nodeid": "t.py::x", "invariant": {"kind": "contract"}})[0] == "contract"
    assert kind_of({"nodeid": "t.py::x[pg19-sync]"}) == ("implementation", "version-parameter")
    assert kind_of({"nodeid": "t.py::x[4]"}) == ("contract", "default")
    failed = {
        "nodeid": "t.py::x[4]",
        "message": "conformance._harness.ImplementationExpectation: reset waited",
    }
    assert kind_of(failed) == ("implementation", "ImplementationExpectation")
    # A contract check that failed in a version-stated test is a broken contract all the same.
    leak = {
        "nodeid": "t.py::x[pg20devel-sync]",
        "message": "conformance._harness.ConformanceViolation: end() left 1 pin",
    }
    assert kind_of(leak) == ("contract", "ConformanceViolation")
    # Until the suite marks its tests: the interim table of the suite's implementation tests and checks.
    drained = {
        "nodeid": "conformance/test_order.py::t[1]",
        "message": "conformance._harness.ConformanceViolation: reset() returned with 2 started read(s) never waited for",
    }
    assert kind_of(drained) == ("implementation", "interim table (check)")
    surfaced = {
        "nodeid": "conformance/test_lifecycle.py::test_end_surfaces_errors_of_started_reads_only[1-2-x]",
        "message": "Failed: DID NOT RAISE",
    }
    assert kind_of(surfaced) == ("implementation", "interim table (test)")


def test_changed_tests_are_grouped_broken_apart_from_changed_expectations() -> None:
    groups = changed_tests(BASE, PATCHED)
    assert [t["nodeid"] for t in groups["broken_invariants"]] == [
        "test_lifecycle.py::test_end_releases_pins[1]"
    ]
    changed = [t["nodeid"] for t in groups["changed_expectations"]]
    assert changed == [
        "test_lifecycle.py::test_reset_waits[pg20devel-sync]",
        "test_lifecycle.py::test_reset_waits_kinded",
        "test_scans.py::test_known",
    ]
    broken = groups["broken_invariants"][0]
    assert broken["first_violation"].startswith("AssertionError: 1 pin left")
    assert "--readstream-seed=1" in broken["reproduction"]


def test_the_report_renders_verdicts_changes_scenarios_and_timing() -> None:
    report = build_report(_result())
    assert report["conclusion"] == "changes"
    assert report["verdicts"]["base"]["verdict"] == "conforms"
    assert report["verdicts"]["patched"]["verdict"] == "DOES NOT CONFORM"
    text = format_text(report)
    assert "Broken invariants" in text and "Changed expectations" in text
    assert text.index("test_end_releases_pins") < text.index("Changed expectations")
    assert "first read that differs: read #3: base 3-18 (16 blocks), patched 3-17 (15 blocks)" in text
    assert "10 reads, 960 kB, 120 pins, 8 waits" in text
    assert "x1.20" in text and "x0.50" in text
    md = format_markdown(report)
    assert "| nvme-75us | nvme 75 µs | traced stream | 10.0 | 12.0 | 1.20 |" in md
    assert "### Broken invariants" in md and "**DOES NOT CONFORM**" in md
    json.dumps(report)  # JSON-ready


def test_no_change_when_nothing_differs() -> None:
    same = _suite([_test("test_order.py::test_same", "passed")])
    result = _result(same, same)
    result["compare"] = {
        "scenarios": [
            {**COMPARE["scenarios"][0], "patch": COMPARE["scenarios"][0]["base"], "differences": []}
        ]
    }
    report = build_report(result)
    assert report["conclusion"] == "no change", report["conclusion_reasons"]
    assert format_text(report).splitlines()[0] == "readstream review: NO CHANGE"
    assert "no test changed its outcome" in format_text(report)


def test_the_read_size_plot_is_drawn_from_a_recorded_comparison(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from pytest_readstream.review.plots import plot_read_sizes

    path = plot_read_sizes(COMPARE, tmp_path / "reads.png")
    assert path is not None and path.stat().st_size > 1000
    assert plot_read_sizes({"scenarios": [COMPARE["scenarios"][1]]}, tmp_path / "none.png") is None


def test_a_saved_report_renders_again_with_its_tests_classified_anew(tmp_path: Path) -> None:
    import subprocess
    import sys

    report = build_report(_result())
    moved = report["changed_tests"]["changed_expectations"][0]
    report["changed_tests"]["broken_invariants"].append(
        moved | {"first_violation": "ImplementationExpectation: x"}
    )
    saved = tmp_path / "review.json"
    saved.write_text(json.dumps(report))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_readstream.cli",
            "review",
            "--render",
            str(saved),
            "--markdown",
            str(tmp_path / "r.md"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    assert "Broken invariants (a contract the patched side no longer keeps): 1" in out.stdout
    assert "### Changed expectations" in (tmp_path / "r.md").read_text()
    (tmp_path / "other.json").write_text("{}")
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_readstream.cli", "review", "--render", str(tmp_path / "other.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "not a readstream review report" in bad.stderr


def test_reruns_are_matched_whatever_the_rootdir_and_absent_tells_nothing() -> None:
    from pytest_readstream.review.report import _unstable
    from pytest_readstream.review.run import _outcome_of

    results = [("::test_a[1]", "failed"), ("test_other.py::test_b", "passed")]
    assert _outcome_of("test_x.py::test_a[1]", results) == "failed"
    assert _outcome_of("conformance/test_other.py::test_b", results) == "passed"
    assert _outcome_of("test_x.py::test_b", results) == "absent"
    assert not _unstable({"base": ["passed", "absent"], "patched": ["failed", "absent"]})
    assert _unstable({"base": ["passed", "failed"], "patched": ["failed", "failed"]})
