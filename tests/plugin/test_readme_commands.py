"""The README's plug-in example, run exactly as printed, from a directory holding nothing else.

Issue 15 item 1: a user's first contact with the product must work as written, so the module
and the command are taken from the documents themselves, not retyped here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_MODULE = re.compile(r"```python\n# no_lookahead\.py\n(.*?)```\n", re.S)
_COMMAND = re.compile(
    r"```sh\n(pytest --pyargs readstream_conformance --readstream-impl=no_lookahead:[^\n]*)\n```"
)


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_readme_and_plugin_docs_show_the_same_example() -> None:
    readme, plugin = _MODULE.findall(_doc("README.md")), _MODULE.findall(_doc("docs/plugin.md"))
    assert len(readme) == 1 and readme == plugin
    commands = _COMMAND.findall(_doc("README.md")) + _COMMAND.findall(_doc("docs/plugin.md"))
    assert len(commands) == 2 and commands[0] == commands[1]


def test_readme_plug_in_command_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "no_lookahead.py").write_text(_MODULE.findall(_doc("README.md"))[0], encoding="utf-8")
    argv = shlex.split(_COMMAND.findall(_doc("README.md"))[0])
    assert argv[0] == "pytest"
    # The `pytest` a user's shell finds: the script installed beside this Python.
    argv[0] = str(Path(sys.executable).parent / "pytest")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "READSTREAM_IMPL")}
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert "cannot import" not in text, text[-3000:]
    # It runs the suite: the MUST tests pass, the look-ahead tests fail (exit status 1).
    assert out.returncode == 1, text[-3000:]
    assert "readstream: implementation no_lookahead:NoLookaheadImplementation" in out.stdout
    summary = out.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ failed, \d+ passed, \d+ skipped", summary), summary
    must_rows = [line.split() for line in out.stdout.splitlines() if line.split()[1:2] == ["MUST"]]
    assert must_rows and all(row[3:5] == ["0", "0"] for row in must_rows), must_rows  # failed, error


def test_readme_counts_the_suite_and_its_mutants_as_they_are(pytester: pytest.Pytester) -> None:
    """The README's opening counts (tests of the suite, the model's mutants, the C mutants) are
    the installed suite's, so that they cannot go stale as tests and mutants are added."""
    from pytest_readstream.mutants import MUTANTS
    from pytest_readstream.postgres.builds.cmutants import MUTANTS as C_MUTANTS

    text = " ".join(_doc("README.md").split())
    found = re.search(
        r"the suite every implementation must pass: (\d+) tests graded MUST, SHOULD or MAY per "
        r"invariant family, proved by (\d+) known-bug mutants of the model, (\d+) C mutants",
        text,
    )
    assert found, "the README's opening no longer states the suite's counts"
    tests, mutants, c_mutants = (int(g) for g in found.groups())
    assert (mutants, c_mutants) == (len(MUTANTS), len(C_MUTANTS))
    result = pytester.runpytest_inprocess(
        "--pyargs", "readstream_conformance", "--collect-only", "-q", "-p", "no:cacheprovider"
    )
    assert f"{tests} tests collected" in result.stdout.str()
