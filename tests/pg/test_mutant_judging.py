"""A mutant is killed only by tests the unmutated copy passed in the same run (issue 24 item 4)."""

from __future__ import annotations

from typing import Any

from pytest_readstream.mutants import format_kill_matrix, judge


def _run(failed: list[str], passed: list[str], harness: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "failed": failed,
        "passed": len(passed),
        "passed_tests": passed,
        "skipped": 0,
        "exit_code": 1 if failed or harness else 0,
        "harness_errors": list(harness),
        "self_check_failures": [],
    }


def test_a_failure_the_unmutated_copy_shares_is_no_kill() -> None:
    copy = _run(failed=["t::a", "t::b"], passed=["t::c"])
    same = judge(_run(failed=["t::a", "t::b"], passed=["t::c"]), copy)
    assert (same["killed"], same["not_judged"], same["killing_tests"]) == (False, True, [])
    assert same["unjudged_failures"] == ["t::a", "t::b"]
    real = judge(_run(failed=["t::a", "t::c"], passed=[]), copy)
    assert (real["killed"], real["killing_tests"], real["not_judged"]) == (True, ["t::c"], False)


def test_a_survivor_of_a_clean_copy_survives_and_harness_errors_never_kill() -> None:
    clean = _run(failed=[], passed=["t::a", "t::b"])
    survived = judge(_run(failed=[], passed=["t::a", "t::b"]), clean)
    assert (survived["killed"], survived["not_judged"]) == (False, False)
    stopped = judge(_run(failed=[], passed=[], harness=["t::a", "t::b"]), clean)
    assert (stopped["killed"], stopped["not_judged"]) == (False, True)


def test_the_matrix_says_not_judged_when_the_copy_failed() -> None:
    copy = _run(failed=["t::a"], passed=["t::c"], harness=["t::h"])
    result = {
        "modes": ["suite"],
        "reference": copy,
        "mutants": {"no-combine": {"doc": "", **judge(_run(failed=["t::a"], passed=["t::c"]), copy)}},
    }
    text = format_kill_matrix(result, reference="unmutated copy")
    assert "no-combine" in text and "not judged" in text and "killed 1" not in text
    assert "suite: 0 of 1 mutants killed; 1 not judged" in text
    assert "1 harness errors: no mutant is killed by them" in text
