"""The review's inputs: a base tree, a patch or a patched tree, and the patched copy made of them.

Everything a reviewer can get wrong is refused here, in one line naming the bad value, before
anything is built or run (:class:`ReviewInputError`, exit status 2): a base that is not a
PostgreSQL tree of a supported version (:func:`..postgres.builds.pgtree.check_tree`), a patch
that is not a readable unified diff, a patch that does not apply (the first hunk that failed,
as ``git apply`` found it), a patched tree or patched copy of another version than the base.

The patched copy is always a copy of the base with the patch applied (or with the files that
differ in ``--patched`` copied in), so that both sides share every file the patch leaves alone,
with their modification times: ninja then rebuilds only what the patch touched
(:mod:`.rebuild`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..postgres.builds.pgbuild import PgBuildUnavailable
from ..postgres.builds.pgsource import PgSourceMismatch, source_version
from ..postgres.builds.pgtree import check_tree

__all__ = [
    "Hunk",
    "ReviewInputError",
    "ReviewInputs",
    "apply_patch",
    "changed_files",
    "check_inputs",
    "copy_tree",
    "patch_hunks",
]


class ReviewInputError(Exception):
    """A bad ``readstream review`` input: one line, exit status 2."""


@dataclass(frozen=True)
class Hunk:
    """One ``@@ -a,b +c,d @@`` hunk of a unified diff: its file, number in that file and header."""

    path: str
    number: int  # 1-based, within its file
    old_start: int
    header: str


@dataclass(frozen=True)
class ReviewInputs:
    """The checked inputs: base tree and its version; the patch file or patched tree."""

    base: Path
    version: str
    patch: Path | None
    patched: Path | None

    def key(self) -> str:
        """What the patched copy is keyed by: the base's path and the patch's (or tree's) identity."""
        h = hashlib.sha256(str(self.base).encode() + b"\0")
        if self.patch is not None:
            h.update(self.patch.read_bytes())
        else:
            h.update(b"tree\0" + str(self.patched).encode())
        return h.hexdigest()[:16]


_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)")
_PLUS = re.compile(r"^\+\+\+ (?:b/)?(\S+)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*")


def patch_hunks(text: str) -> list[Hunk]:
    """Every hunk of a unified diff (git or plain), in order."""
    hunks: list[Hunk] = []
    path: str | None = None
    number = 0
    for line in text.splitlines():
        m = _DIFF_GIT.match(line)
        if m:
            path, number = m.group(2), 0
            continue
        m = _PLUS.match(line)
        if m and m.group(1) != "/dev/null":
            if path != m.group(1):
                path, number = m.group(1), 0
            continue
        m = _HUNK.match(line)
        if m and path is not None:
            number += 1
            hunks.append(Hunk(path, number, int(m.group(1)), m.group(0).strip()))
    return hunks


def check_inputs(base: str, patch: str | None, patched: str | None) -> ReviewInputs:
    """The inputs, checked (one line each, :class:`ReviewInputError`); nothing is built or copied."""
    if (patch is None) == (patched is None):
        raise ReviewInputError("give exactly one of --patch FILE (a unified diff) or --patched TREE")
    try:
        version = check_tree(Path(base))
    except PgBuildUnavailable as err:
        raise ReviewInputError(str(err).replace("--source", "--base", 1)) from None
    base_path = Path(base).resolve()
    if patch is not None:
        p = Path(patch)
        try:
            text = p.read_text(errors="replace")
        except OSError as err:
            raise ReviewInputError(f"--patch {patch}: cannot be read ({err.strerror or err})") from None
        if not patch_hunks(text):
            raise ReviewInputError(
                f"--patch {patch}: not a unified diff (no '@@' hunk of a file); allowed: git diff or diff -u output"
            )
        return ReviewInputs(base_path, version, p.resolve(), None)
    assert patched is not None
    try:
        other = check_tree(Path(patched))
    except PgBuildUnavailable as err:
        raise ReviewInputError(str(err).replace("--source", "--patched", 1)) from None
    if other != version:
        raise ReviewInputError(
            f"--patched {patched} is PostgreSQL {other} but --base {base} is {version}: "
            "a patch is reviewed against the tree it was made for (the same version)"
        )
    if Path(patched).resolve() == base_path:
        raise ReviewInputError(f"--patched {patched} is the base tree itself: nothing to review")
    return ReviewInputs(base_path, version, None, Path(patched).resolve())


def _skip_dir(path: Path, names: list[str]) -> list[str]:
    """``copytree``'s ignore: ``.git`` and meson build directories inside the tree."""
    out = [n for n in names if n == ".git"]
    for n in names:
        if (path / n / "meson-private").is_dir():
            out.append(n)
    return out


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a source tree with its modification times (``.git`` and in-tree build directories left out)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True, ignore=lambda d, n: _skip_dir(Path(d), n))


def _git() -> str:
    git = shutil.which("git")
    if git is None:
        raise ReviewInputError("--patch needs git on PATH (git apply applies it); or give --patched TREE")
    return git


_INDEX = re.compile(
    r"^diff --git a/(\S+) b/\S+\n(?:(?!diff --git)[^\n]*\n)*?index ([0-9a-f]+)\.\.[0-9a-f]+", re.M
)


def _blob_hash(path: Path) -> str:
    """git's object name of a file's content (``git hash-object``)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_pre_images(tree: Path, patch: Path, text: str, *, label: str = "--patch") -> None:
    """A git patch names each file's content it was made against (``index OLD..NEW``): every such
    file of ``tree`` must be that content, or the patch belongs to another version or commit."""
    for rel, old in _INDEX.findall(text):
        if set(old) == {"0"}:
            continue  # a new file
        path = tree / rel
        have = _blob_hash(path) if path.is_file() else None
        if have is None or not have.startswith(old):
            base = f"the base's is {have[: len(old)]}" if have else "the base has no such file"
            raise ReviewInputError(
                f"{label} {patch} was made against another {rel} (index {old}; {base}): a patch of "
                "another version or commit; give the tree it was made for, or --allow-other-base"
            )


def apply_patch(
    tree: Path, patch: Path, *, label: str = "--patch", allow_other_base: bool = False
) -> list[str]:
    """Apply ``patch`` to ``tree`` with ``git apply`` (all or nothing); the files it touches.

    A patch made against other contents of a file than the tree's is refused (unless
    ``allow_other_base``); a patch that does not apply is one line naming the first hunk that failed.
    """
    git = _git()
    text = patch.read_text(errors="replace")
    if not allow_other_base:
        check_pre_images(tree, patch, text, label=label)
    base_cmd = [git, "apply", "-p1", "--whitespace=nowarn"]
    # --unsafe-paths off, no index: the tree need not be a git checkout.
    check = subprocess.run(
        [*base_cmd, "--check", "-v", str(patch)], cwd=tree, capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        raise ReviewInputError(_apply_failure(label, patch, text, check.stderr))
    numstat = subprocess.run(
        [git, "apply", "-p1", "--numstat", str(patch)], cwd=tree, capture_output=True, text=True, check=False
    )
    touched = [line.split("\t", 2)[2] for line in numstat.stdout.splitlines() if line.count("\t") >= 2]
    done = subprocess.run([*base_cmd, str(patch)], cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReviewInputError(_apply_failure(label, patch, text, done.stderr))
    return [_renamed_target(t) for t in touched]


def _renamed_target(entry: str) -> str:
    """numstat's ``a => b`` (a rename) is the file ``b``."""
    if " => " in entry:
        entry = re.sub(r"\{([^{}]*) => ([^{}]*)\}", r"\2", entry)
        entry = entry.split(" => ")[-1]
    return entry.replace("//", "/")


_FAILED_AT = re.compile(r"patch failed: (\S+?):(\d+)")
_NO_FILE = re.compile(r"error: (\S+): (No such file or directory|does not exist in index)")


def _apply_failure(label: str, patch: Path, text: str, stderr: str) -> str:
    hunks = patch_hunks(text)
    m = _FAILED_AT.search(stderr)
    if m:
        path, line = m.group(1), int(m.group(2))
        per_file = [h for h in hunks if h.path == path]
        hit = next((h for h in per_file if h.old_start == line), per_file[0] if per_file else None)
        if hit is not None:
            return (
                f"{label} {patch}: hunk {hit.number} of {len(per_file)} of {path} ({hit.header}) "
                "does not apply to the base tree"
            )
        return f"{label} {patch}: {path} line {line} does not apply to the base tree"
    m = _NO_FILE.search(stderr)
    if m:
        return f"{label} {patch}: {m.group(1)} is not in the base tree"
    first = next((ln.strip() for ln in stderr.splitlines() if ln.startswith("error")), stderr.strip())
    return f"{label} {patch}: does not apply to the base tree ({first or 'git apply failed'})"


def changed_files(base: Path, patched: Path) -> list[str]:
    """The files (relative paths) whose content differs between two trees, or that only one has.

    Only what a build reads is compared: the top-level files and ``src``, ``contrib``, ``config``.
    """
    from ..postgres.builds.pgtree import _meson_inputs

    def listing(tree: Path) -> dict[str, Path]:
        return {str(p.relative_to(tree)): p for p in _meson_inputs(tree)}

    a, b = listing(base), listing(patched)
    out = []
    for rel in sorted(set(a) | set(b)):
        pa, pb = a.get(rel), b.get(rel)
        if pa is None or pb is None:
            out.append(rel)
        elif pa.stat().st_size != pb.stat().st_size or pa.read_bytes() != pb.read_bytes():
            out.append(rel)
    return out


def copy_changes(patched: Path, dest: Path, files: list[str]) -> None:
    """Bring ``files`` of ``patched`` into the copy ``dest`` (new modification times: ninja sees them)."""
    for rel in files:
        src, target = patched / rel, dest / rel
        if src.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
        elif target.exists():
            target.unlink()


def check_patched_version(tree: Path, version: str, patch: Path | None) -> None:
    """The patched copy must still be ``version`` (a patch of the version line is another base)."""
    try:
        found = source_version(tree)
    except PgSourceMismatch:
        found = "(none: read_stream.c or meson.build's version is gone)"
    if found != version:
        raise ReviewInputError(
            f"--patch {patch}: the patched tree is PostgreSQL {found} but --base is {version}: "
            "a patch is reviewed against the version it was made for"
        )


def read_only_safe(path: Path) -> None:
    """Make a copied tree writable by its owner (a read-only base keeps its modes in the copy)."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root) / name
            if not p.is_symlink():
                mode = p.stat().st_mode
                if not mode & 0o200:
                    p.chmod(mode | 0o200)
