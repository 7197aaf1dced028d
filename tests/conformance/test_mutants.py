"""The mutants are well-formed and each is killed by the conformance suite; the reference is not.

``test_mutant_is_killed`` runs, per mutant, the conformance test known to kill it (``KILLERS``)
with ``pytester`` (``pytest --pyargs readstream_conformance.<module> --readstream-impl=mutant:...``)
and requires a failure; ``test_reference_passes_every_killer`` runs the union of those tests
against the reference and requires none. The full kill matrix (every mutant against the whole
suite, ``-n 2``, the ``ci`` hypothesis profile) is ``readstream mutants``; it runs here only with
``-m slow``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.mutants import (
    MUTANTS,
    MutantImplementation,
    format_kill_matrix,
    mutant_doc,
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


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_killed(name: str, pytester: pytest.Pytester) -> None:
    result = _run_conformance(pytester, f"mutant:{name}", [KILLERS[name]], "-x")
    outcomes = result.parseoutcomes()
    assert result.ret == 1 and outcomes.get("failed", 0) >= 1, f"mutant {name} survived {KILLERS[name]}"


def test_reference_passes_every_killer(pytester: pytest.Pytester) -> None:
    result = _run_conformance(pytester, "reference", sorted(set(KILLERS.values())))
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
    assert text.splitlines()[-1] == "1 of 2 mutants killed"
