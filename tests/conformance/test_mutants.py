"""The mutants are well-formed and each is killed by the conformance suite; the reference is not.

``test_mutant_is_killed`` runs, per mutant, the conformance test known to kill it (``KILLERS``)
with ``pytester`` (``pytest --pyargs readstream_conformance.<module> --readstream-impl=mutant:...``)
and requires a failure, both as ``--readstream-impl=mutant:<name>`` runs and with every self-check
of the model off, where only a failure the suite itself raised counts (the kill matrix's recorder
tells the two apart); ``test_reference_passes_every_killer`` runs the union of those tests
against the reference in every mode and requires none; ``test_reference_passes_the_whole_suite``
runs the whole suite against the reference with its self-checks off and black-box. The full kill
matrix (every mutant against the whole suite in every mode, ``-n 2``, the ``ci`` hypothesis
profile) is ``readstream mutants``; it runs here only with ``-m slow``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import readstream_conformance._killmatrix as killmatrix

from pytest_readstream.implementations import load_implementation
from pytest_readstream.mutants import (
    MODES,
    MUTANTS,
    MutantImplementation,
    format_kill_matrix,
    impl_spec,
    mutant_doc,
    reference_in_mode,
    run_kill_matrix,
)
from pytest_readstream.protocol import check_implementation

KILLERS: dict[str, str] = {
    "set-strategy-pin-limit-zero": "test_strategy::test_pin_limit_stays_at_least_one_after_set_strategy",
    "stale-strategy-after-rescan": "test_strategy::test_rescan_that_adds_a_strategy_uses_its_ring",
    "freed-strategy-after-rescan": "test_strategy::test_rescan_that_removes_a_strategy_never_touches_the_freed_one",
    "distance-not-clamped-on-set-strategy": "test_strategy::test_set_strategy_clamps_the_current_distance",
    "paused-distance-not-clamped": "test_strategy::test_set_strategy_clamps_the_distance_saved_by_pause",
    "capacity-updated-on-set-strategy": "test_strategy::test_capacity_statistic_unchanged_by_set_strategy",
    "block-range-reads-current-size": "test_reads::test_block_range_never_reads_past_numblocks_fixed_at_start",
    "end-leaks-queued-pins": "test_lifecycle::test_end_releases_every_pin_and_reads_nothing_new",
    "end-keeps-looking-ahead": "test_lifecycle::test_end_releases_every_pin_and_reads_nothing_new",
    "read-crosses-segment": "test_reads::test_reads_never_cross_a_segment",
    "read-exceeds-io-combine-limit": "test_reads::test_reads_are_at_most_io_combine_limit",
    "unget-block-lost": "test_order::test_unget_block_neither_lost_nor_duplicated",
    "unget-block-duplicated": "test_order::test_unget_block_neither_lost_nor_duplicated",
    "per-buffer-data-misaligned-after-wrap": "test_order::test_per_buffer_data_survives_queue_wraparound",
    "fast-path-not-left-after-miss": "test_adaptivity::test_fast_path_is_left_after_a_miss",
    "ignores-additional-pin-limit": "test_pins::test_reads_respect_the_backends_additional_pin_limit",
    "system-time-ignores-deadline": "test_scans::test_system_time_overshoot_bounded_by_lookahead_window",
    "downgraded-read-not-finished": "test_faults::test_downgraded_page_error_finishes_its_read",
    "effective-combine-limit-ignored": "test_pins::test_limits_follow_the_effective_io_combine_limit",
    "system-sample-hash-order": "test_scan_facts::test_system_repeatable_samples_postgresqls_block_set",
    "vacuum-skip-threshold-exclusive": "test_scan_facts::test_vacuum_skips_runs_of_at_least_32_all_visible_pages",
    "bulkread-ring-in-blocks-not-kb": "test_scan_facts::test_bulkread_ring_has_getaccessstrategys_size",
    # Twins of systematic C mutants of 18.6 that survived before conformance/test_starts.py.
    "reset-keeps-put-back-block": "test_starts::test_a_reset_forgets_the_block_the_look_ahead_put_back",
    "forwarded-left-out-of-budget": "test_starts::test_each_start_and_wait_is_the_models",
    # Issue 26's classes of missed bugs (conformance/test_missed.py).
    "io-combine-limit-read-live": "test_missed::test_a_stream_keeps_the_io_combine_limit_it_began_with",
    "pin-limit-int16-truncated": "test_missed::test_a_pin_budget_beyond_int16_is_capped_not_wrapped",
    "forwarded-overflow-not-copied": "test_missed::test_read_stream_c_special_cases",
    "advice-never": "test_missed::test_read_ahead_advice_of_each_start_is_the_models",
    "hit-distance-not-decayed": "test_missed::test_a_cached_stream_asks_the_callback_one_block_ahead",
    "fast-path-never": "test_missed::test_an_all_cached_stream_takes_the_fast_path",
    "other-temp-accepted": "test_missed::test_a_stream_on_another_sessions_temporary_table_is_refused",
    "descending-merged": "test_missed::test_descending_blocks_come_back_in_order",
}
"""Mutant -> ``module::test`` of the conformance suite expected to kill it: the quickest killer.
docs/conformance.md lists every killing test of the full matrix."""

_ISSUE_MUTANTS = 17


def _run_conformance(
    pytester: pytest.Pytester, impl: str, killers: list[str], *extra: str
) -> pytest.RunResult:
    """Run the given ``module::test`` killers of the installed suite in-process."""
    modules = sorted({k.split("::")[0] for k in killers})
    tests = sorted({k.split("::")[1] for k in killers})
    return pytester.runpytest_inprocess(
        "--pyargs",
        *(f"readstream_conformance.{m}" for m in modules),
        f"--readstream-impl={impl}",
        "--readstream-seed=1",
        "-p",
        "no:cacheprovider",
        "-q",
        "-k",
        " or ".join(tests),
        *extra,
    )


def test_every_mutant_has_a_killer_and_the_issue_list_is_covered() -> None:
    assert set(KILLERS) == set(MUTANTS)
    assert len(MUTANTS) >= _ISSUE_MUTANTS


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_a_documented_implementation(name: str) -> None:
    impl = MUTANTS[name]()
    assert isinstance(impl, MutantImplementation)
    assert check_implementation(impl) == []
    assert impl.name == f"mutant:{name}"
    doc = mutant_doc(name)
    assert len(doc) > 80 and doc == " ".join(doc.split())
    assert {"stream-api", "scans"} & set(impl.capabilities)


def test_run_kill_matrix_rejects_unknown_mutants(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no-such-bug"):
        run_kill_matrix(["no-such-bug"], [], tmp_path / "m.json")


def _recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, impl: str, killers: list[str], *extra: str
) -> tuple[pytest.RunResult, dict[str, str]]:
    """Run killers with the kill matrix's recorder; the run and its per-test outcomes."""
    out = pytester.path / "outcomes.json"
    monkeypatch.setenv("READSTREAM_KILLMATRIX_OUT", str(out))
    killmatrix._outcomes.clear()
    result = _run_conformance(pytester, impl, killers, "-p", "readstream_conformance._killmatrix", *extra)
    outcomes: dict[str, str] = json.loads(out.read_text()) if out.exists() else {}
    return result, outcomes


@pytest.mark.parametrize("mode", ["suite", "self-checks-off"])
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_killed(
    name: str, mode: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, outcomes = _recorded(pytester, monkeypatch, impl_spec(name, mode), [KILLERS[name]], "-x")
    assert result.ret == 1 and result.parseoutcomes().get("failed", 0) >= 1, (
        f"mutant {name} survived {KILLERS[name]} ({mode})"
    )
    if mode != "suite":
        # With the model's self-checks off, the kill must be the suite's own.
        assert "failed" in outcomes.values(), (
            f"mutant {name} was caught only by the model's self-checks: {outcomes}"
        )


@pytest.mark.parametrize("mode", MODES)
def test_reference_passes_every_killer(mode: str, pytester: pytest.Pytester) -> None:
    result = _run_conformance(pytester, impl_spec(None, mode), sorted(set(KILLERS.values())))
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and not outcomes.get("failed"), result.stdout.str()[-3000:]
    assert outcomes.get("passed", 0) >= len(set(KILLERS.values()))


@pytest.mark.slow
def test_full_kill_matrix(tmp_path: Path) -> None:
    out: dict[str, Any] = run_kill_matrix(
        None, ["-n", "2", "-p", "hypothesis", "--hypothesis-profile=ci"], tmp_path / "matrix.json"
    )
    assert out["reference_clean"], out["reference"]
    survivors = [n for n, m in out["mutants"].items() if not m["killed"]]
    assert not survivors, survivors
    assert json.loads((tmp_path / "matrix.json").read_text())["all_killed"] is True


def test_format_kill_matrix_shows_survivors_and_the_reference() -> None:
    result = {
        "mutants": {
            "a-bug": {
                "killed": True,
                "killing_tests": ["test_x.py::test_one[p1]", "test_x.py::test_one[p2]"],
            },
            "b-bug": {"killed": False, "killing_tests": []},
        },
        "reference": {"failed": [], "exit_code": 0, "passed": 10, "skipped": 1},
    }
    text = format_kill_matrix(result)
    assert "a-bug" in text and "test_x.py::test_one (2)" in text
    assert "SURVIVED" in text
    assert "reference" in text and "clean" in text
    assert text.splitlines()[-1] == "suite: 1 of 2 mutants killed"


def test_format_kill_matrix_has_a_column_per_mode() -> None:
    def cell(killed: bool) -> dict[str, Any]:
        return {"killed": killed, "killing_tests": ["test_x.py::test_one[p1]"] if killed else []}

    result = {
        "modes": list(MODES),
        "mutants": {
            "a-bug": {
                **cell(True),
                "modes": {"suite": cell(True), "self-checks-off": cell(False), "black-box": cell(False)},
            },
        },
        "reference_modes": {m: {"failed": [], "exit_code": 0, "passed": 10, "skipped": 0} for m in MODES},
    }
    text = format_kill_matrix(result)
    header = text.splitlines()[0]
    assert all(m in header for m in MODES)
    row = next(line for line in text.splitlines() if line.startswith("a-bug"))
    assert row.count("killed") == 1 and row.count("SURVIVED") == 2
    assert text.splitlines()[-3:] == [
        "suite: 1 of 1 mutants killed",
        "self-checks-off: 0 of 1 mutants killed",
        "black-box: 0 of 1 mutants killed",
    ]


@pytest.mark.parametrize("mode", ["self-checks-off", "black-box"])
def test_reference_passes_the_whole_suite(mode: str, pytester: pytest.Pytester) -> None:
    """The whole conformance suite against the reference with its self-checks off (and black-box,
    without ``introspection``): nothing may lean on the model's own checks to pass."""
    result = pytester.runpytest_inprocess(
        "--pyargs",
        "readstream_conformance",
        f"--readstream-impl={impl_spec(None, mode)}",
        "--readstream-seed=1",
        "-p",
        "no:cacheprovider",
        "-p",
        "hypothesis",
        "--hypothesis-profile=ci",
        "-q",
    )
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and not outcomes.get("failed") and not outcomes.get("errors"), result.stdout.str()[
        -3000:
    ]
    assert outcomes.get("passed", 0) >= 400


@pytest.mark.parametrize("mode", MODES)
def test_modes_are_loadable_by_name(mode: str) -> None:
    ref = load_implementation(impl_spec(None, mode))
    assert ("introspection" in ref.capabilities) is (mode != "black-box")
    assert type(ref) is type(reference_in_mode(mode))
    mutant = load_implementation(impl_spec("unget-block-lost", mode))
    assert isinstance(mutant, MutantImplementation) and mutant.mode == mode
    assert ("introspection" in mutant.capabilities_for(None)) is (mode != "black-box")


def test_self_checks_off_turns_off_the_buffer_managers_check(readstream_instance: Any) -> None:
    impl = reference_in_mode("self-checks-off")
    rel = readstream_instance.create_relation("t", 4)
    be = readstream_instance.backend("b")
    stream = impl.begin_stream(be, rel, lambda s, p: 0xFFFFFFFF)
    assert readstream_instance.debug is False and stream.debug is False
    stream.end()


def test_recorder_tells_self_checks_from_the_suites_failures() -> None:
    class _Crash:
        def __init__(self, message: str) -> None:
            self.message = message

    class _Repr:
        def __init__(self, message: str) -> None:
            self.reprcrash = _Crash(message)

    def report(message: str) -> Any:
        return type("R", (), {"longrepr": _Repr(message)})()

    assert killmatrix._is_self_check(report("reference_impl.errors.InvariantViolation: reset left ios=1"))
    assert killmatrix._is_self_check(report("reference_impl.errors.ModelUsageError: freed"))
    assert not killmatrix._is_self_check(report("conformance._harness.ConformanceViolation: pins"))
    assert not killmatrix._is_self_check(report("AssertionError: assert 7 == 8"))
    assert os.environ.get("READSTREAM_KILLMATRIX_OUT") is None


def test_only_the_capacity_mutant_is_blind_in_black_box() -> None:
    """A mutant is exempt from the black-box column only when its bug lives in the stream's own
    statistics; the table shows it as blind, not survived."""
    blind = sorted(n for n, f in MUTANTS.items() if f().introspection_only)
    # The fast-path flag is the stream's own state too (issue 26, class 6).
    assert blind == ["capacity-updated-on-set-strategy", "fast-path-never"]
    cell = {"killed": False, "killing_tests": [], "blind": True}
    result = {
        "modes": list(MODES),
        "mutants": {
            "c-bug": {
                "killed": True,
                "killing_tests": ["t.py::t"],
                "modes": {"suite": {"killed": True, "killing_tests": ["t.py::t"]}, "black-box": cell},
            }
        },
    }
    text = format_kill_matrix(result)
    row = next(line for line in text.splitlines() if line.startswith("c-bug"))
    assert "blind" in row and "SURVIVED" not in row
    assert text.splitlines()[-1] == "black-box: 0 of 1 mutants killed (1 visible only through introspection)"
