"""Root runs the server as an unprivileged user, who may not reach pip's copy of the binaries.

The case of a Python installed under ``/root`` (mode 0700): the install is copied once to a
place the server's user can reach, and that copy is reused and never trusted when it is not ours.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_readstream.postgres import PgServer, embedded_bindir, measure_statement
from pytest_readstream.postgres.servers import _install
from pytest_readstream.postgres.servers._process import _ensure_traversable, _run_as, _shared_temp_root

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="only root switches the server to another OS user",
    ),
]


@pytest.fixture(scope="module")
def private_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded wheel's install, in its site-packages layout, in a home only root can enter."""
    home = tmp_path_factory.mktemp("home")
    wheel_install = embedded_bindir().parent
    package = wheel_install.parent
    install = home / package.name / wheel_install.name
    shutil.copytree(wheel_install, install, symlinks=True, ignore=shutil.ignore_patterns("include"))
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, home / libs.name, symlinks=True)
    home.chmod(0o700)
    return install


@pytest.fixture
def cache_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of the test's own for the copies, and a fresh answer cache.

    It lies in the system's shared temporary directory, not under ``tmp_path``: that is inside
    ``pytest-of-<user>``, which any pytest run starting meanwhile makes mode 0700 again, and the
    server's user then lost its way to the copy mid-test ("Permission denied" under load).
    """
    cache = Path(tempfile.mkdtemp(prefix="readstream-test-cache-", dir=_shared_temp_root()))
    cache.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(cache))
    monkeypatch.setattr(_install, "_answers", {})
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


def _copies(cache: Path) -> list[Path]:
    return sorted(cache.glob("pytest-readstream-pginstall-*"))


def test_a_server_starts_from_an_install_its_user_cannot_reach(
    private_install: Path, cache_dir: Path, tmp_path: Path
) -> None:
    with PgServer.from_bindir(private_install, tmp_path / "work") as server:
        with server.scratch_database().session() as s:
            assert measure_statement(s, "SELECT 1").io.is_zero()
    (copy,) = _copies(cache_dir)
    assert copy.stat().st_uid == os.geteuid() and copy.stat().st_mode & 0o777 == 0o755
    home = private_install.parent.parent
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in home.iterdir())


def test_a_reachable_install_is_used_in_place(private_install: Path, cache_dir: Path, tmp_path: Path) -> None:
    home = private_install.parent.parent
    shutil.copytree(home, tmp_path / "open", symlinks=True)
    (tmp_path / "open").chmod(0o755)
    _ensure_traversable(tmp_path / "open")
    bindir = tmp_path / "open" / private_install.relative_to(home) / "bin"
    assert _install.reachable_bindir(bindir, _run_as(None)) == bindir
    assert _copies(cache_dir) == []


def test_the_copy_is_made_once_and_reused(private_install: Path, cache_dir: Path) -> None:
    run_as = _run_as(None)
    first = _install.reachable_bindir(private_install / "bin", run_as)
    assert first != private_install / "bin"
    _install._answers.clear()  # as a second pytest-xdist worker would start
    mtime = first.stat().st_mtime_ns
    assert _install.reachable_bindir(private_install / "bin", run_as) == first
    assert first.stat().st_mtime_ns == mtime
    # No staging directory is left beside the published copy.
    assert [p.name for p in cache_dir.iterdir()] == [first.parents[2].name]


def test_a_foreign_directory_under_the_cache_name_is_not_used(private_install: Path, cache_dir: Path) -> None:
    run_as = _run_as(None)
    squatter = cache_dir / _install._cache_name(private_install)
    (squatter / "bin").mkdir(parents=True)
    assert run_as.uid is not None and run_as.gid is not None
    os.chown(squatter, run_as.uid, run_as.gid)
    bindir = _install.reachable_bindir(private_install / "bin", run_as)
    assert not bindir.is_relative_to(squatter)
    assert (bindir / "postgres").is_file()
    assert list((squatter / "bin").iterdir()) == []


def test_a_temporary_directory_behind_a_private_one_is_opened(
    private_install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest's own basetemp is mode 0700: a TMPDIR inside it must still serve the server's user.
    closed = tmp_path / "closed"
    (closed / "tmp").mkdir(parents=True)
    closed.chmod(0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(closed / "tmp"))
    monkeypatch.setattr(_install, "_answers", {})
    run_as = _run_as(None)
    bindir = _install.reachable_bindir(private_install / "bin", run_as)
    assert bindir.is_relative_to(closed) and _install._runs_as(bindir, run_as)
