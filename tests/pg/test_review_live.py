"""``readstream review`` on a real master tree (issue 27, "what it must show" 2 and 3).

Opt-in: it builds the tree if it is not built (``readstream pg-build --source``, cached by its
content) and runs the suite on both sides, so it runs only when ``READSTREAM_PG_SOURCE`` names a
master (20devel) source tree; otherwise it skips with that reason. The patches are written here,
from the tree's own ``read_stream.c``: a comment, and a pin leaked on one path of
``read_stream_reset`` (the last unconsumed buffer is not released).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = "READSTREAM_PG_SOURCE"
STREAM = "src/backend/storage/aio/read_stream.c"
_RELEASE_LOOP = "\twhile ((buffer = read_stream_next_buffer(stream, NULL)) != InvalidBuffer)\n\t\tReleaseBuffer(buffer);\n"
_LEAKY_LOOP = (
    "\twhile ((buffer = read_stream_next_buffer(stream, NULL)) != InvalidBuffer)\n"
    "\t\tif (stream->pinned_buffers > 0)\n\t\t\tReleaseBuffer(buffer);\n"
)


def _master_tree() -> Path:
    tree = os.environ.get(ENV, "").strip()
    if not tree:
        pytest.skip(f"a real review needs a master source tree: set {ENV}")
    from pytest_readstream.postgres.builds.pgsource import source_version

    if source_version(Path(tree)) != "20devel":
        pytest.skip(f"{ENV}={tree} is not a master (20devel) tree")
    return Path(tree)


def _patch(tree: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = (tree / STREAM).read_text()
    assert text.count(old) == 1, f"{STREAM} has changed: the test's edit does not apply"
    lines = difflib.unified_diff(
        text.splitlines(keepends=True),
        text.replace(old, new).splitlines(keepends=True),
        fromfile=f"a/{STREAM}",
        tofile=f"b/{STREAM}",
    )
    path = tmp_path / "change.patch"
    path.write_text("".join(lines))
    return path


def _review(tree: Path, patch: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_readstream.cli",
            "review",
            "--base",
            str(tree),
            "--patch",
            str(patch),
            "--json",
            str(tmp_path / "review.json"),
            "--no-timing",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads((tmp_path / "review.json").read_text()) if (tmp_path / "review.json").exists() else {}
    return out, report


@pytest.mark.postgres
def test_a_comment_is_no_change(tmp_path: Path) -> None:
    tree = _master_tree()
    patch = _patch(
        tree, tmp_path, "\t/* Unpin anything that wasn't consumed. */", "\t/* Unpin what was not consumed. */"
    )
    out, report = _review(tree, patch, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert report["conclusion"] == "no change" and report["no_code_change"]


@pytest.mark.postgres
@pytest.mark.slow
def test_a_pin_leak_does_not_conform_on_the_patched_side(tmp_path: Path) -> None:
    tree = _master_tree()
    patch = _patch(tree, tmp_path, _RELEASE_LOOP, _LEAKY_LOOP)
    out, report = _review(tree, patch, tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert report["plan"]["mode"] == "traced"
    assert report["verdicts"]["patched"]["verdict"] == "DOES NOT CONFORM"
    assert report["verdicts"]["base"]["verdict"] != "DOES NOT CONFORM"
    broken = report["changed_tests"]["broken_invariants"]
    assert broken and all(t["reproduction"] and t["first_violation"] for t in broken)
    assert "DOES NOT CONFORM" in out.stdout and broken[0]["nodeid"] in out.stdout
