"""readstream trace: the JSON of the issue, exact ramp, segment splits, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_readstream.cli import main


def _trace(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "t.json"
    assert main(["trace", *args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_trace_json_schema_and_ramp(tmp_path: Path) -> None:
    t = _trace(tmp_path, "--scan", "seqscan", "--nblocks", "200", "--setting", "io_method=sync")
    assert set(t) >= {"settings", "reads", "stats"}
    assert t["settings"]["io_method"] == "sync"
    first = t["reads"][0]
    assert set(first) >= {"fork", "start", "nblocks", "submit_us", "complete_us"}
    assert [r["nblocks"] for r in t["reads"][:6]] == [1, 2, 4, 8, 16, 16]
    assert set(t["stats"]) >= {"reads", "blocks_read", "hits", "max_pinned", "elapsed_us"}
    assert t["stats"]["blocks_read"] == 200


def test_trace_unstreamed_reads_every_block_alone(tmp_path: Path) -> None:
    t = _trace(tmp_path, "--nblocks", "50", "--unstreamed")
    assert t["stats"]["reads"] == 50 and {r["nblocks"] for r in t["reads"]} == {1}


def test_trace_segment_crossing_splits_at_the_boundary(tmp_path: Path) -> None:
    t = _trace(tmp_path, "--nblocks", "131100", "--setting", "shared_buffers=1GB")
    for r in t["reads"]:
        assert r["start"] // 131072 == (r["start"] + r["nblocks"] - 1) // 131072
    assert any(r["start"] == 131072 for r in t["reads"])


def test_trace_cached_fraction_is_seeded(tmp_path: Path) -> None:
    a = _trace(tmp_path, "--nblocks", "500", "--cached-fraction", "0.3", "--seed", "4")
    b = _trace(tmp_path, "--nblocks", "500", "--cached-fraction", "0.3", "--seed", "4")
    assert a["reads"] == b["reads"] and a["stats"]["hits"] == 150


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--scan", "nope", "--nblocks", "1"], "--scan 'nope' is unknown"),
        (["--nblocks", "10", "--setting", "io_combine_limit=0"], "io_combine_limit = 0 is out of range"),
        (["--nblocks", "10", "--device", "floppy"], "--device 'floppy' is unknown"),
        (["--nblocks", "10", "--cached-fraction", "2"], "--cached-fraction 2.0 is invalid"),
        (["--setting", "io_method=sync"], "give the relation size"),
    ],
)
def test_trace_bad_input_is_one_line(args, fragment, capsys) -> None:
    assert main(["trace", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err


def test_unknown_command(capsys) -> None:
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ["trace", "--scan", "seqscan", "--nblocks", "10", "--json"],
        ["trace", "--scan", "seqscan", "--nblocks", "10", "--plot"],
        ["mutants", "--only", "unget-block-lost", "--json"],
        ["check", "--json"],
        ["bench", "model", "--json"],
        ["bench", "seeds", "--table", "checksums", "--json"],
        ["oracle", "--json"],
    ],
    ids=lambda c: " ".join(c[:2]) + " " + c[-1],
)
@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_an_unwritable_output_is_refused_before_any_work(
    command: list[str], where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every one of these would run for seconds to minutes first; none may print a result.
    target = tmp_path / "no" / "out.json" if where == "missing-dir" else tmp_path
    assert main([*command, str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    expected = "does not exist" if where == "missing-dir" else "is a directory"
    assert f"{command[-1]} {target}: " in captured.err and expected in captured.err
    assert "\n" not in captured.err.strip()
