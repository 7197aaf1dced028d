"""The README's three journeys, run as printed (issue 27 item 5).

Each journey's commands sit between ``<!-- journey: NAME -->`` and ``<!-- /journey -->`` in the
README. What runs without a PostgreSQL source tree runs here; the rest needs one named by
``READSTREAM_PG_SOURCE`` and skips with that reason otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_JOURNEY = re.compile(r"<!-- journey: ([\w-]+)[^>]*-->\n```sh\n(.*?)```\n<!-- /journey -->", re.S)


def journeys() -> dict[str, str]:
    return dict(_JOURNEY.findall((ROOT / "README.md").read_text(encoding="utf-8")))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "READSTREAM_IMPL")}
    # `python3` and `readstream` as a user's shell finds them: this Python's environment first.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return {**env, **extra}


def _run(script: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=_env(**extra),
        capture_output=True,
        text=True,
    )


def test_the_readme_has_its_three_journeys() -> None:
    found = journeys()
    assert set(found) == {"build", "review", "own-implementation", "fixtures"}, sorted(found)
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_own_implementation_journey_is_the_command_the_plugin_test_runs() -> None:
    # tests/plugin/test_readme_commands.py runs this command against the README's module.
    command = journeys()["own-implementation"].strip()
    assert (
        command
        == "pytest --pyargs readstream_conformance --readstream-impl=no_lookahead:NoLookaheadImplementation -n 2"
    )


def test_fixtures_journey_runs_as_printed() -> None:
    out = _run(journeys()["fixtures"], ROOT)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert re.search(r"\b6 passed\b", out.stdout), out.stdout[-2000:]


def _source_tree() -> Path:
    src = os.environ.get("READSTREAM_PG_SOURCE", "").strip()
    if not src or not Path(src).is_dir():
        pytest.skip("the build and review journeys need a PostgreSQL source tree: set READSTREAM_PG_SOURCE")
    return Path(src)


def test_build_journey_runs_as_printed() -> None:
    src = _source_tree()
    lines = journeys()["build"].splitlines()
    # The install line is what made this environment; running it here would replace the install.
    assert lines[0] == "python3 -m pip install '.[test,pgbuild,plot]'"
    out = _run("\n".join(lines[1:]), ROOT, SRC=str(src))
    assert out.returncode in (0, 1), (out.stdout + out.stderr)[-3000:]
    assert re.search(r"\d+ passed", out.stdout), out.stdout[-2000:]


def test_review_journey_runs_as_printed(tmp_path: Path) -> None:
    src = _source_tree()
    stream = src / "src/backend/storage/aio/read_stream.c"
    text = stream.read_text()
    lines = text.splitlines()
    line = next(i for i, ln in enumerate(lines) if ln.startswith("/*"))
    # A comment-only change: the review decides there is nothing to build or run. The new
    # comment goes before the file's first comment (inside it, its "*/" would end that comment
    # early), with the context a diff gives: none before line 1, one line otherwise.
    before = [f" {lines[line - 1]}"] if line else []
    hunk = [*before, "+/* a reviewer's note */", f" {lines[line]}"]
    start = line if line else 1
    patch = (
        "--- a/src/backend/storage/aio/read_stream.c\n+++ b/src/backend/storage/aio/read_stream.c\n"
        f"@@ -{start},{len(hunk) - 1} +{start},{len(hunk)} @@\n" + "\n".join(hunk) + "\n"
    )
    (tmp_path / "my-change.patch").write_text(patch)
    out = _run(journeys()["review"], tmp_path, SRC=str(src))
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert out.stdout.startswith("readstream review: NO CHANGE")
    assert (tmp_path / "review.json").is_file() and (tmp_path / "review.md").is_file()
