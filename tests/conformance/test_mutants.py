"""The mutants are well-formed and each is killed by the conformance suite; the reference is not.

``test_mutant_is_killed`` runs, per mutant, the conformance tests known to kill it (``KILLERS``)
in a subprocess (``python -m pytest --pyargs readstream_conformance --readstream-impl=mutant:...``)
and requires a failure; ``test_reference_passes_every_killer`` runs the union of those tests
against the reference and requires none. The full kill matrix (every mutant against the whole
suite, ``-n 2``, the ``ci`` hypothesis profile) is ``readstream mutants``; it runs here only with
``READSTREAM_RUN_SLOW=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.mutants import MUTANTS, MutantImplementation, mutant_doc, run_kill_matrix
from pytest_readstream.protocol import check_implementation

# Mutant -> the conformance tests (``-k`` expressions) expected to kill it. The full matrix in
# docs/conformance.md lists every killing test; these are the quickest ones.
KILLERS: dict[str, str] = {
    "set-strategy-pin-limit-zero": "test_pin_limit_stays_at_least_one_after_set_strategy",
    "stale-strategy-after-rescan": "test_rescan_that_adds_a_strategy_uses_its_ring",
    "freed-strategy-after-rescan": "test_rescan_that_removes_a_strategy_never_touches_the_freed_one",
    "distance-not-clamped-on-set-strategy": "test_set_strategy_clamps_the_current_distance",
    "paused-distance-not-clamped": "test_set_strategy_clamps_the_distance_saved_by_pause",
    "capacity-updated-on-set-strategy": "test_capacity_statistic_unchanged_by_set_strategy",
    "block-range-reads-current-size": "test_block_range_never_reads_past_numblocks_fixed_at_start",
    "end-leaks-queued-pins": "test_end_releases_every_pin_and_reads_nothing_new",
    "end-keeps-looking-ahead": "test_end_releases_every_pin_and_reads_nothing_new",
    "read-crosses-segment": "test_reads_never_cross_a_segment",
    "read-exceeds-io-combine-limit": "test_reads_are_at_most_io_combine_limit",
    "unget-block-lost": "test_unget_block_neither_lost_nor_duplicated",
    "unget-block-duplicated": "test_unget_block_neither_lost_nor_duplicated",
    "per-buffer-data-misaligned-after-wrap": "test_per_buffer_data_survives_queue_wraparound",
    "fast-path-not-left-after-miss": "test_fast_path_is_left_after_a_miss",
    "ignores-additional-pin-limit": "test_reads_respect_the_backends_additional_pin_limit",
    "system-time-ignores-deadline": "test_system_time_overshoot_bounded_by_lookahead_window",
}

_ISSUE_MUTANTS = 17


def _run_conformance(impl: str, keyword: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, str], str]:
    record = tmp_path / f"outcomes-{impl.replace(':', '_')}.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "readstream_conformance",
        f"--readstream-impl={impl}",
        "--readstream-seed=1",
        "-p",
        "readstream_conformance._killmatrix",
        "-p",
        "no:cacheprovider",
        "-q",
        "-k",
        keyword,
        *extra,
    ]
    env = dict(os.environ, READSTREAM_KILLMATRIX_OUT=str(record))
    env.pop("READSTREAM_IMPL", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    outcomes = json.loads(record.read_text()) if record.exists() else {}
    return proc.returncode, outcomes, proc.stdout[-3000:] + proc.stderr[-2000:]


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
def test_mutant_is_killed(name: str, tmp_path: Path) -> None:
    code, outcomes, output = _run_conformance(f"mutant:{name}", KILLERS[name], tmp_path, "-x")
    failed = [k for k, v in outcomes.items() if v == "failed"]
    assert code == 1 and failed, f"mutant {name} survived {KILLERS[name]}:\n{output}"


def test_reference_passes_every_killer(tmp_path: Path) -> None:
    keyword = " or ".join(sorted(set(KILLERS.values())))
    code, outcomes, output = _run_conformance("reference", keyword, tmp_path)
    failed = [k for k, v in outcomes.items() if v == "failed"]
    assert code == 0 and not failed, output
    assert sum(1 for v in outcomes.values() if v == "passed") >= len(set(KILLERS.values()))


@pytest.mark.skipif(
    not os.environ.get("READSTREAM_RUN_SLOW"), reason="full kill matrix: set READSTREAM_RUN_SLOW=1"
)
def test_full_kill_matrix(tmp_path: Path) -> None:
    out: dict[str, Any] = run_kill_matrix(
        None, ["-n", "2", "-p", "hypothesis", "--hypothesis-profile=ci"], tmp_path / "matrix.json"
    )
    assert out["reference_clean"], out["reference"]
    survivors = [n for n, m in out["mutants"].items() if not m["killed"]]
    assert not survivors, survivors
    assert json.loads((tmp_path / "matrix.json").read_text())["all_killed"] is True
