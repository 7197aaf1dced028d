"""``readstream pg-build --source``: what a tree's build is keyed by (no build needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_readstream.postgres.builds.pgtree import check_tree, tree_digest

READ_STREAM_C = Path("src/backend/storage/aio/read_stream.c")


def _tree(root: Path, version: str = "20devel") -> Path:
    (root / READ_STREAM_C).parent.mkdir(parents=True)
    (root / "meson.build").write_text(f"project('postgresql', ['c'], version: '{version}')\n")
    (root / READ_STREAM_C).write_text("/* read_stream.c */\n")
    (root / "contrib").mkdir()
    (root / "contrib" / "meson.build").write_text("# contrib\n")
    return root


@pytest.mark.parametrize(
    ("version", "ok"), [("18.6", True), ("19beta1", True), ("19.2", True), ("20devel", True)]
)
def test_supported_versions(tmp_path: Path, version: str, ok: bool) -> None:
    assert check_tree(_tree(tmp_path / "t", version)) == version


def test_the_digest_follows_the_files_meson_reads_and_nothing_else(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t")
    first = tree_digest(tree)
    assert first.kind == "files" and first.files == 3
    assert tree_digest(tree).digest == first.digest
    # A build directory inside the tree, an install, docs: not what meson reads.
    (tree / "src" / "build" / "meson-private").mkdir(parents=True)
    (tree / "src" / "build" / "x.o").write_bytes(b"\0")
    (tree / "inst").mkdir()
    (tree / "inst" / "postgres").write_bytes(b"\0")
    assert tree_digest(tree).digest == first.digest
    (tree / READ_STREAM_C).write_text("/* read_stream.c, patched */\n")
    changed = tree_digest(tree)
    assert changed.digest != first.digest
    (tree / READ_STREAM_C).write_text("/* read_stream.c */\n")
    assert tree_digest(tree).digest == first.digest  # content, not modification times


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_checkout_is_keyed_by_its_tree_hash_and_its_changes(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t")
    run = {"cwd": tree, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "add", "-A"], **run)  # type: ignore[call-overload]
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"],
        **run,  # type: ignore[call-overload]
    )
    clean = tree_digest(tree)
    assert clean.kind == "git"
    (tree / READ_STREAM_C).write_text("/* edited */\n")
    dirty = tree_digest(tree)
    assert dirty.kind == "git" and dirty.digest != clean.digest
    (tree / "src" / "new.c").write_text("int x;\n")
    untracked = tree_digest(tree)
    assert untracked.digest != dirty.digest and untracked.files == 1
    (tree / "src" / "new.c").unlink()
    (tree / READ_STREAM_C).write_text("/* read_stream.c */\n")
    assert tree_digest(tree).digest == clean.digest
