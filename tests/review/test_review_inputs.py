"""``readstream review``'s bad inputs: one line, exit status 2, before anything is built or run
(issue 27, "what it must show" 4). The trees are fakes of the project's own: no source tree needed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_readstream.review.inputs import ReviewInputError, apply_patch, check_inputs, patch_hunks

from ._trees import STREAM, diff, fake_tree

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None, reason="git apply applies the patch: no git on PATH"
)


def _review(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_readstream.cli", "review", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def _patch(tmp_path: Path, edit: str, to: str, name: str = "p.patch") -> Path:
    a, b = fake_tree(tmp_path / "a"), fake_tree(tmp_path / "b")
    text = (b / STREAM).read_text()
    assert edit in text
    (b / STREAM).write_text(text.replace(edit, to))
    patch = tmp_path / name
    patch.write_text(diff(a, b))
    return patch


def _one_line_exit_2(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_patch_that_does_not_apply_names_its_first_failed_hunk(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\tstream->distance = 0;", "\tstream->distance = 1;")
    other = fake_tree(tmp_path / "other")
    (other / STREAM).write_text(
        (other / STREAM).read_text().replace("distance = 0", "readahead_distance = 0")
    )
    # --allow-other-base: past the check of the file's content (its 'index' line), to the hunk.
    out = _review("--base", str(other), "--patch", str(patch), "--allow-other-base")
    line = _one_line_exit_2(out, "hunk 1 of 1 of", STREAM)
    assert "does not apply to the base tree" in line and "@@ -" in line


def test_a_base_that_is_not_postgresql(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\tstream->distance = 0;", "\tstream->distance = 1;")
    (tmp_path / "zlib").mkdir()
    (tmp_path / "zlib" / "meson.build").write_text("project('zlib', 'c', version: '1.3')\n")
    _one_line_exit_2(
        _review("--base", str(tmp_path / "zlib"), "--patch", str(patch)), "--base", "not a PostgreSQL"
    )


def test_a_base_of_an_unsupported_version(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\tstream->distance = 0;", "\tstream->distance = 1;")
    old = fake_tree(tmp_path / "old", version="16.4")
    _one_line_exit_2(_review("--base", str(old), "--patch", str(patch)), "PostgreSQL 16.4", "allowed")


def test_a_patched_tree_of_another_version(tmp_path: Path) -> None:
    base, other = fake_tree(tmp_path / "base"), fake_tree(tmp_path / "nineteen", version="19beta1")
    _one_line_exit_2(
        _review("--base", str(base), "--patched", str(other)), "19beta1", "20devel", "same version"
    )


def test_a_patch_that_changes_the_version(tmp_path: Path) -> None:
    a, b = fake_tree(tmp_path / "a"), fake_tree(tmp_path / "b", version="19beta1")
    patch = tmp_path / "version.patch"
    patch.write_text(diff(a, b))
    from pytest_readstream.review.run import prepare

    with pytest.raises(ReviewInputError, match=r"PostgreSQL 19beta1 but --base is 20devel"):
        prepare(check_inputs(str(a), str(patch), None), cache=tmp_path / "cache")


def test_not_a_diff_and_a_missing_patch(tmp_path: Path) -> None:
    base = fake_tree(tmp_path / "base")
    (tmp_path / "notes.txt").write_text("hello\n")
    _one_line_exit_2(
        _review("--base", str(base), "--patch", str(tmp_path / "notes.txt")), "not a unified diff"
    )
    _one_line_exit_2(_review("--base", str(base), "--patch", str(tmp_path / "nope.patch")), "cannot be read")


def test_patch_and_patched_exclude_each_other(tmp_path: Path) -> None:
    base = fake_tree(tmp_path / "base")
    _one_line_exit_2(_review("--base", str(base)), "exactly one of --patch")


def test_a_patch_applies_to_a_copy_and_names_its_files(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\tstream->distance = 0;", "\tstream->distance = 1;")
    copy = fake_tree(tmp_path / "copy")
    assert apply_patch(copy, patch) == [STREAM]
    assert "distance = 1;" in (copy / STREAM).read_text()
    hunks = patch_hunks(patch.read_text())
    assert [(h.path, h.number) for h in hunks] == [(STREAM, 1)]


def test_a_comment_only_patch_is_no_change_without_building(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\t/* Stop looking ahead. */", "\t/* Stop looking ahead: nothing new starts. */")
    base = fake_tree(tmp_path / "base")  # no build of it exists: nothing may be built
    out = subprocess.run(
        [sys.executable, "-m", "pytest_readstream.cli", "review", "--base", str(base), "--patch", str(patch)],
        capture_output=True,
        text=True,
        check=False,
        env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == "readstream review: NO CHANGE"
    assert "the patch changes no code" in out.stdout
    assert "nothing to build or run" in out.stderr


def test_a_patch_made_against_another_version_of_a_file(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\tstream->distance = 0;", "\tstream->distance = 1;")
    other = fake_tree(tmp_path / "other")  # the hunk still applies, but the file is another one
    (other / STREAM).write_text((other / STREAM).read_text() + "\n/* 19's read_stream.c */\n")
    line = _one_line_exit_2(
        _review("--base", str(other), "--patch", str(patch)), "was made against another", STREAM
    )
    assert "--allow-other-base" in line
    from pytest_readstream.review.run import prepare

    tree, plan = prepare(
        check_inputs(str(other), str(patch), None), cache=tmp_path / "cache", allow_other_base=True
    )
    assert plan.code_changed == (STREAM,) and "distance = 1;" in (tree / STREAM).read_text()


def test_the_review_as_a_pytest_run(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "\t/* Stop looking ahead. */", "\t/* Stop looking ahead: nothing new starts. */")
    base = fake_tree(tmp_path / "base")
    run = tmp_path / "run"
    run.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "pytest_readstream.review.pytest_plugin",
        "-p",
        "no:cacheprovider",
    ]
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    ok = subprocess.run(
        [*cmd, f"--readstream-review-base={base}", f"--readstream-review-patch={patch}", "-rA"],
        cwd=run,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert ok.returncode == 0 and "1 passed" in ok.stdout, ok.stdout[-2000:] + ok.stderr[-2000:]
    bad = subprocess.run(
        [*cmd, f"--readstream-review-base={tmp_path}", f"--readstream-review-patch={patch}"],
        cwd=run,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert bad.returncode == 4 and "not a PostgreSQL source tree" in bad.stderr, bad.stderr


def test_a_patched_tree_is_reviewed_through_a_copy_of_the_base(tmp_path: Path) -> None:
    from pytest_readstream.review.run import prepare

    base, patched = fake_tree(tmp_path / "base"), fake_tree(tmp_path / "patched")
    (patched / STREAM).write_text((patched / STREAM).read_text().replace("distance = 0", "distance = 3"))
    tree, plan = prepare(check_inputs(str(base), None, str(patched)), cache=tmp_path / "cache")
    assert plan.touched == (STREAM,) and plan.mode == "traced"
    assert (tree / STREAM).read_text() == (patched / STREAM).read_text()
    assert (tree / "meson.build").stat().st_mtime_ns == (base / "meson.build").stat().st_mtime_ns


def test_a_branch_checkout_against_a_worktree_of_its_base(tmp_path: Path) -> None:
    """As the CI recipe has them: the branch a checkout (``.git`` a directory), the base a
    ``git worktree`` of it (``.git`` a file). Neither ``.git`` is part of the tree: before, the
    base's ``.git`` file counted as a touched file and copying it from the branch was a
    traceback (``IsADirectoryError``)."""
    from pytest_readstream.review.run import prepare

    git = ["git", "-c", "user.email=r@example.org", "-c", "user.name=r"]
    branch = fake_tree(tmp_path / "branch")
    subprocess.run([*git, "init", "-q", "-b", "master", str(branch)], check=True)
    subprocess.run([*git, "-C", str(branch), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(branch), "commit", "-qm", "base"], check=True)
    subprocess.run(
        [*git, "-C", str(branch), "worktree", "add", "-q", str(tmp_path / "base"), "-b", "b"], check=True
    )
    (branch / STREAM).write_text((branch / STREAM).read_text().replace("distance = 0", "distance = 3"))
    assert (tmp_path / "base" / ".git").is_file() and (branch / ".git").is_dir()
    tree, plan = prepare(check_inputs(str(tmp_path / "base"), None, str(branch)), cache=tmp_path / "cache")
    assert plan.touched == (STREAM,) and plan.mode == "traced"
    assert not (tree / ".git").exists()
