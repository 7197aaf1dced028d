"""TAP output for ``meson test``: ``python -m pytest_readstream.tap`` puts TAP alone on stdout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = """
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_known_failure():
    assert False

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown went wrong")

def test_teardown_fails(broken_teardown):
    pass
"""


def test_the_tap_stream_is_alone_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(TESTS)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_readstream.tap",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "test_sample.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "TAP version 13" and lines[-1] == "1..5", out.stdout
    body = "\n".join(lines)
    assert "ok 1 - test_sample.py::test_passes" in body
    assert "not ok 2 - test_sample.py::test_fails" in body and "# AssertionError: one is not two" in body
    assert "ok 3 - test_sample.py::test_skipped # SKIP not here" in body
    assert "not ok 4 - test_sample.py::test_known_failure # TODO known" in body
    assert "not ok 5 - test_sample.py::test_teardown_fails" in body
    assert all(line.startswith(("TAP", "ok", "not ok", "#", "1..")) for line in lines), out.stdout
    assert "passed" in out.stderr  # pytest's own summary went to stderr
