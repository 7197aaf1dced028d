"""``readstream mutants --impl postgres``: the C mutants' kill matrix, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

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
