"""Issue 15 item 2: every printed ``rerun:`` line runs as printed, the way the run was started.

The suite is run from a directory holding only the implementation's module, as a user would
(``--pyargs``, with and without xdist, by the ``pytest`` script and by ``python -m pytest``);
the first reproduction's command is then executed by a shell, verbatim, from that directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
IMPL = "distance_plus_one:DistancePlusOneImplementation"  # fails SHOULD tests, deterministically


def _env() -> dict[str, str]:
    """The shell a user has: this Python's bin directory first on PATH, nothing else preset."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "READSTREAM_IMPL")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _rerun_lines(text: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("rerun:")]


@pytest.mark.parametrize(
    ("launcher", "selection"),
    [
        (["pytest"], ["--pyargs", "readstream_conformance", "-n", "2", "-k", "ramp_up or pending_read"]),
        ([sys.executable, "-m", "pytest"], ["--pyargs", "readstream_conformance.test_reads"]),
    ],
    ids=["pytest-script-xdist", "python-m-pytest-module"],
)
def test_printed_rerun_line_runs_as_printed(
    tmp_path: Path, launcher: list[str], selection: list[str]
) -> None:
    shutil.copy(HERE / "distance_plus_one.py", tmp_path / "distance_plus_one.py")
    run = subprocess.run(
        [*launcher, *selection, "-p", "no:cacheprovider", f"--readstream-impl={IMPL}"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    lines = _rerun_lines(run.stdout)
    assert lines, run.stdout[-3000:]
    first = lines[0]
    assert first.startswith(
        "pytest --pyargs 'readstream_conformance.test_" if launcher == ["pytest"] else "python"
    )
    assert " -n " not in first and " -k " not in first  # one test is rerun
    rerun = subprocess.run(first, shell=True, cwd=tmp_path, env=_env(), capture_output=True, text=True)
    out = rerun.stdout
    assert rerun.returncode == 1, out[-3000:] + rerun.stderr[-3000:]
    assert out.strip().splitlines()[-1].startswith("=") and " 1 failed in " in out.strip().splitlines()[-1]
    assert _rerun_lines(out) == [first]  # the same test, the same seed: the same reproduction
