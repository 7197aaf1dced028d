"""Issue 15 item 6: a server run as another OS user never lives under a private TMPDIR.

A test that points TMPDIR at its ``tmp_path`` put the harness's home under
``pytest-of-<user>``; any pytest run starting meanwhile makes that directory mode 0700 again,
and initdb or the server then failed with "Permission denied" (seen as a missing pid file in
``test_pytest_run_ends_with_one_clear_error`` while another full run loaded the machine).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from pytest_readstream.postgres.servers import _process as _cluster


def test_a_private_tmpdir_is_not_a_shared_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    assert not _cluster._is_shared_temp_dir(private)
    root = _cluster._shared_temp_root()
    if not any(_cluster._is_shared_temp_dir(Path(d)) for d in _cluster._SYSTEM_TEMP_DIRS):
        pytest.skip("this machine has no sticky, world-writable temporary directory")
    assert root != private and _cluster._is_shared_temp_dir(root)
    assert private not in root.parents


def test_a_shared_tmpdir_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    assert _cluster._shared_temp_root() == shared
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
