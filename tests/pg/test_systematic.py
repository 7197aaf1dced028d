"""The systematic C mutants of read_stream.c: generator, coverage markers, report (no server).

The generator and the coverage markers are checked on a small C file written for these tests
(none of PostgreSQL's text); the shipped list of reviewed equivalents is checked against the
server's real ``read_stream.c`` when a source tree is at hand (``pg_source_tree``), else skipped.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

needs_parser = pytest.mark.skipif(
    importlib.util.find_spec("tree_sitter_c") is None or importlib.util.find_spec("tree_sitter") is None,
    reason="the systematic mutants are made with tree-sitter's C grammar: pip install 'pytest-readstream[postgres]'",
)

SNIPPET = """\
#include <stdio.h>

typedef struct Pair
{
\tint\t\t\ta;
\tint\t\t\tb;
} Pair;

#define Assert(x) ((void) 0)

static int\tlimit = 3;\t\t\t/* file scope: no site */

static int
step(Pair *p, int n)
{
\tint\t\t\tx = n + 1;

\tAssert(n > 0);
\tif (p->a < n && x != 2)
\t\tp->b++;
\twhile (x > 0)
\t\tx--;
\treturn p->a == 1 ? x * 2 : x % 4;
}
"""

MAIN = """
int
main(int argc, char **argv)
{
\tPair\t\tp = {0, 0};

\t(void) argv;
\treturn step(&p, argc) + limit;
}
"""


@needs_parser
def test_counts_per_operator_on_a_small_file() -> None:
    from pytest_readstream.postgres.builds.systematic import generate_mutants

    mutants = generate_mutants(SNIPPET)
    counts = collections.Counter(m.operator for m in mutants)
    # ROR: 3 comparisons x 3 (sufficient set) + '!=' x 3; CRP: 1 -> 0, 2 (twice), 2 -> 0, 1, 3
    # (twice), 0 -> 1, 4 -> 0, 1, 3, 5; NEG: if, while, ?:; AOR: +, *, %; SDL and INC: p->b++, x--.
    assert counts == {"ROR": 12, "CRP": 15, "NEG": 3, "AOR": 3, "SDL": 2, "INC": 2, "LCR": 1}
    # Nothing in Assert(), nothing at file scope (limit = 3), nothing in the #define.
    assert all(m.function == "step" for m in mutants)
    assert not [m for m in mutants if m.line == 18]


@needs_parser
def test_ids_are_stable_and_unique() -> None:
    from pytest_readstream.postgres.builds.systematic import generate_mutants

    first = generate_mutants(SNIPPET)
    ids = [m.id for m in first]
    assert len(set(ids)) == len(ids)
    assert ids == [m.id for m in generate_mutants(SNIPPET)]
    assert "step:19:11:ROR:<-><=" in ids
    assert "step:20:3:SDL:p->b++;->;" in ids
    for m in first:
        fn, line, col, op, change = m.id.split(":", 4)
        assert (fn, int(line), int(col), op) == (m.function, m.line, m.column, m.operator)
        assert change == f"{m.original}->{m.replacement}" or "..." in change
        assert re.fullmatch(r"[0-9a-f]{12}", m.key)
    # A function added after this one changes none of its mutants.
    more = generate_mutants(SNIPPET + "\nstatic int\nother(int y)\n{\n\treturn y + 1;\n}\n")
    assert [m.id for m in more if m.function == "step"] == ids


@needs_parser
def test_every_mutant_is_one_edit_that_parses_as_c() -> None:
    from pytest_readstream.postgres.builds.cparse import parse_c
    from pytest_readstream.postgres.builds.systematic import generate_mutants

    for m in generate_mutants(SNIPPET):
        text = m.apply(SNIPPET)
        assert text != SNIPPET
        assert not parse_c(text).has_errors, m.id
        head, tail = SNIPPET.encode()[: m.start], SNIPPET.encode()[m.end :]
        assert text.encode() == head + m.replacement.encode() + tail


@needs_parser
def test_coverage_markers_record_the_statements_that_ran(tmp_path: Path) -> None:
    """The instrumented snippet, compiled and run with one argument (n = 1): the loop body ran,
    the if's body did not (p->a is 0, so 0 < 1 holds but x != 2 fails: x = 2)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc or gcc) on PATH")
    from pytest_readstream.postgres.builds.cparse import parse_c
    from pytest_readstream.postgres.builds.sitecov import instrument, read_hits
    from pytest_readstream.postgres.builds.systematic import generate_mutants

    hits_dir = tmp_path / "hits"
    hits_dir.mkdir()
    inst = instrument(SNIPPET, hits_dir)
    assert not parse_c(inst.text).has_errors
    (tmp_path / "t.c").write_text(inst.text + MAIN)
    subprocess.run([cc, "-Wall", "-Werror", "-o", str(tmp_path / "t"), str(tmp_path / "t.c")], check=True)
    subprocess.run([str(tmp_path / "t")], check=False)
    reached = inst.reached(read_hits(hits_dir))
    by_site = {m.id: m.statement in reached for m in generate_mutants(SNIPPET)}
    assert by_site["step:20:3:SDL:p->b++;->;"] is False
    assert by_site["step:22:3:SDL:x--;->;"] is True
    assert by_site["step:23:31:AOR:%->/"] is True
    assert by_site["step:16:14:AOR:+->-"] is True


def test_equivalents_file_format(tmp_path: Path) -> None:
    from pytest_readstream.postgres.builds.systematic_run import equivalents_path, load_equivalents

    good = tmp_path / "eq.txt"
    good.write_text("# comment\n\nf:1:2:ROR:<-><= | the loop ends at the same block either way\n")
    assert load_equivalents("18.6", good) == {"f:1:2:ROR:<-><=": "the loop ends at the same block either way"}
    bad = tmp_path / "bad.txt"
    bad.write_text("f:1:2:ROR:<-><=\n")
    with pytest.raises(ValueError, match=r"line 1: expected 'ID \| reason'"):
        load_equivalents("18.6", bad)
    from pytest_readstream.postgres.builds.systematic_run import gaps_path

    shipped = {**load_equivalents("18.6"), **load_equivalents("18.6", gaps_path("18.6"))}
    assert equivalents_path("18.6").name == "systematic_equivalents_18.txt"
    assert not set(load_equivalents("18.6")) & set(load_equivalents("18.6", gaps_path("18.6")))
    for ident, why in shipped.items():
        _fn, line, col, op, _change = ident.split(":", 4)
        assert (
            op in ("ROR", "AOR", "BOR", "LCR", "CRP", "NEG", "SDL", "INC") and int(line) > 0 and int(col) > 0
        )
        assert len(why) > 20, ident


@needs_parser
def test_shipped_equivalents_name_mutants_of_18s_file(pg_source_tree: Path) -> None:
    from pytest_readstream.postgres.builds.pgsource import READ_STREAM_C, source_version
    from pytest_readstream.postgres.builds.systematic import generate_mutants
    from pytest_readstream.postgres.builds.systematic_run import load_equivalents

    version = source_version(pg_source_tree)
    if not version.startswith("18."):
        pytest.skip(f"the shipped equivalents are 18's; the tree is {version}")
    from pytest_readstream.postgres.builds.systematic_run import gaps_path
    from pytest_readstream.postgres.builds.traced_copy import WRAPPED_CALLS

    text = (pg_source_tree / READ_STREAM_C).read_text()
    ids = {m.id for m in generate_mutants(text, keep_calls=frozenset(WRAPPED_CALLS))}
    assert set(load_equivalents(version)) <= ids
    assert set(load_equivalents(version, gaps_path(version))) <= ids


def _result() -> dict:
    mutants = {
        "f:1:1:ROR:<-><=": {
            "function": "f",
            "operator": "ROR",
            "status": "killed",
            "killing_tests": ["t.py::a"],
        },
        "f:2:1:SDL:x++;->;": {"function": "f", "operator": "SDL", "status": "survived"},
        "f:3:1:CRP:1->2": {"function": "f", "operator": "CRP", "status": "equivalent", "why": "no reader"},
        "g:4:1:NEG:(a)->(!(a))": {"function": "g", "operator": "NEG", "status": "not reached"},
        "g:5:1:AOR:+->-": {"function": "g", "operator": "AOR", "status": "timeout", "note": "no end"},
    }
    by_fn: dict = {}
    by_op: dict = {op: {"generated": 1} for op in ("ROR", "SDL", "CRP", "NEG", "AOR")}
    totals: dict = {}
    for v in mutants.values():
        for table, name in ((by_fn, v["function"]), (by_op, v["operator"])):
            row = table.setdefault(name, {})
            row[v["status"]] = row.get(v["status"], 0) + 1
            row["mutants"] = row.get("mutants", 0) + 1
        totals[v["status"]] = totals.get(v["status"], 0) + 1
    totals["mutants"] = len(mutants)
    from pytest_readstream.postgres.builds.systematic_run import score

    return {
        "schema": 1,
        "version": "18.6",
        "generated": 5,
        "selected": 5,
        "seconds": 90.0,
        "reference": {
            "passed": 3,
            "failed": [],
            "harness_errors": [],
            "seconds": 10.0,
            "statements": 9,
            "statements_run": 7,
        },
        "totals": totals,
        "score_percent": score(totals),
        "by_function": by_fn,
        "by_operator": by_op,
        "stale_equivalents": [],
        "mutants": mutants,
    }


def test_score_counts_timeouts_as_kills_and_leaves_out_the_rest() -> None:
    from pytest_readstream.postgres.builds.systematic_run import score

    assert score({"killed": 8, "timeout": 1, "survived": 1, "equivalent": 5, "not reached": 7}) == 90.0
    assert score({"not reached": 3, "not compiled": 2}) is None


def test_report_table_per_function_with_survivors_and_reasons() -> None:
    from pytest_readstream.postgres.builds.systematic_run import format_systematic

    text = format_systematic(_result())
    lines = text.splitlines()
    f_row = next(ln for ln in lines if ln.startswith("f "))
    # 3 mutants: 1 killed, 1 survived, 1 equivalent -> 50 %
    assert re.search(r"\b3\s+1\s+0\s+1\s+1\s+0\s+0\s+0\s+0\s+0\s+50\.0 %", f_row), f_row
    g_row = next(ln for ln in lines if ln.startswith("g "))
    assert "100.0 %" in g_row  # the timeout counts as a kill, not reached is left out
    assert "survivors (suite gaps): 1" in text and "f:2:1:SDL:x++;->;" in text
    assert "f:3:1:CRP:1->2  -- no reader" in text
    assert "score: 66.7 %" in text
    assert "time: 1.5 min" in text
    json.dumps(_result())  # what --json writes


def test_report_with_unfinished_mutants_says_the_score_is_not_final() -> None:
    """--report-only or --time-limit: a share of the mutants judged so far is no final score."""
    from pytest_readstream.postgres.builds.systematic_run import format_systematic, score

    result = _result()
    result["mutants"]["f:2:1:SDL:x++;->;"]["status"] = "unfinished"
    result["totals"] = {**result["totals"], "survived": 0, "unfinished": 1}
    result["score_percent"] = score(result["totals"])
    text = format_systematic(result)
    assert (
        "score (not final: 1 unfinished): 100.0 % of the non-equivalent reached mutants judged so far" in text
    )
    assert "score: 66.7 %" in format_systematic(_result())  # a complete run's line is unchanged


def test_suite_order_plugin_runs_the_listed_tests_in_order(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import os\nfrom pathlib import Path\n\n"
        "def _log(name):\n    with open(os.environ['LOG'], 'a') as f:\n        f.write(name + '\\n')\n\n"
        "def test_a():\n    _log('a')\n\ndef test_b():\n    _log('b')\n\ndef test_c():\n    _log('c')\n"
    )
    order = tmp_path / "order.json"
    order.write_text(json.dumps(["test_x.py::test_c", "test_x.py::test_a"]))
    times = tmp_path / "times.json"
    log = tmp_path / "log"
    env = {
        "READSTREAM_SUITE_ORDER": str(order),
        "READSTREAM_SUITE_TIMES": str(times),
        "LOG": str(log),
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "pytest_readstream.postgres.builds._suite_order",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "test_x.py",
        ],
        cwd=tmp_path,
        env={**__import__("os").environ, **env},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert log.read_text().split() == ["c", "a"]
    assert set(json.loads(times.read_text())) == {"test_x.py::test_c", "test_x.py::test_a"}


def test_cli_refuses_systematic_without_postgres(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_readstream.cli import main

    assert main(["mutants", "--systematic"]) == 2
    err = capsys.readouterr().err
    assert "--systematic needs --impl postgres" in err and "Traceback" not in err
    assert main(["mutants", "--sample", "3"]) == 2
    assert "--sample, --no-cache, --time-limit and --report-only need --systematic" in capsys.readouterr().err


def test_only_file_lists_the_ids_and_bad_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_readstream import cli

    ids = tmp_path / "ids.txt"
    ids.write_text("# survivors\nf:1:1:ROR:<-><=\n\n  g:2:1:SDL:x++;->;  \n")
    seen: dict[str, list[str]] = {}

    def systematic(args: Any) -> int:
        seen["only"] = args.only
        return 0

    monkeypatch.setattr(cli, "_systematic_mutants", systematic)
    argv = ["mutants", "--impl", "postgres", "--systematic", "--only", "h:3:1:CRP:1->0"]
    assert cli.main([*argv, "--only-file", str(ids)]) == 0
    assert seen["only"] == ["h:3:1:CRP:1->0", "f:1:1:ROR:<-><=", "g:2:1:SDL:x++;->;"]
    for bad, says in [
        (tmp_path / "missing.txt", "cannot read it"),
        (tmp_path / "empty.txt", "lists no mutant id"),
    ]:
        if bad.name == "empty.txt":
            bad.write_text("# nothing\n\n")
        assert cli.main([*argv, "--only-file", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"--only-file {bad}: {says}" in err and "Traceback" not in err and err.count("\n") == 1
    assert cli.main(["mutants", "--only-file", str(ids)]) == 2
    assert "--only-file needs --systematic" in capsys.readouterr().err


def test_a_mutants_tests_go_first_by_kills_at_its_statement_then_its_function() -> None:
    from pytest_readstream.postgres.builds.systematic import SystematicMutant
    from pytest_readstream.postgres.builds.systematic_run import _KillTally

    def mutant(function: str, statement: tuple[int, int]) -> SystematicMutant:
        return SystematicMutant(function, 1, 1, "ROR", "<", "<=", statement[0], statement[0] + 1, statement)

    advice, other_in_f, elsewhere = mutant("f", (10, 20)), mutant("f", (30, 40)), mutant("g", (50, 60))
    tally = _KillTally()
    for _ in range(5):
        tally.add(elsewhere, ["t_common"])
    tally.add(other_in_f, ["t_function"])
    tally.add(advice, ["t_advice"])
    tests = ["t_advice", "t_common", "t_function", "t_never"]
    assert sorted(tests, key=tally.ranking(mutant("f", (10, 20)))) == [
        "t_advice",
        "t_function",
        "t_common",
        "t_never",
    ]
    # Another statement of f: f's killers first (a tie, kept in the given order), then the rest.
    assert sorted(tests, key=tally.ranking(mutant("f", (70, 80)))) == [
        "t_advice",
        "t_function",
        "t_common",
        "t_never",
    ]
    assert sorted(tests, key=tally.ranking(mutant("g", (90, 100)))) == [
        "t_common",
        "t_advice",
        "t_function",
        "t_never",
    ]
    assert sorted(tests, key=tally.ranking(None)) == ["t_common", "t_advice", "t_function", "t_never"]
