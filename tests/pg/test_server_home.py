"""A server run as another OS user keeps working when its work directory's ancestors go private.

Issue 18 item 5: pytest resets ``pytest-of-<user>`` to mode 0700 whenever any pytest run starts.
A server whose data directory lived under the session's temporary directory, run as another OS
user, then lost its way to that directory and died with "Permission denied" at its next start.
The harness now keeps such a server in a directory of its own (``_server_home``); this test
makes the reset happen between two starts of one server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_readstream.postgres import PgServer, ServerSettings, embedded_bindir

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="only root switches the server to another OS user",
    ),
]


@pytest.fixture
def basetemp_like(tmp_path: Path) -> Iterator[Path]:
    """A ``pytest-of-<user>``-like directory (open for now), given back its mode afterwards."""
    base = tmp_path / "pytest-of-someone"
    work = base / "pytest-7" / "session"
    work.mkdir(parents=True)
    for path in (tmp_path, base, work.parent, work):
        path.chmod(0o755)
    yield work
    base.chmod(0o755)


def test_a_server_survives_its_work_directorys_ancestor_going_private(basetemp_like: Path) -> None:
    base = basetemp_like.parent.parent
    with PgServer.from_bindir(embedded_bindir(), basetemp_like) as server:
        with server.scratch_database().session() as s:
            assert s.execute("SELECT 1")[0][0] == 1
        # What any pytest run starting meanwhile does to pytest-of-<user>.
        base.chmod(0o700)
        # A restart makes the server's user find its data directory again from the root.
        outcome = server.configure(ServerSettings(shared_buffers=2048))
        assert outcome == "restarted"
        with server.scratch_database().session() as s:
            assert s.execute("SHOW shared_buffers")[0][0] == "16MB"
        # A second server of the same session starts while the directory is private.
        with PgServer.from_bindir(embedded_bindir(), basetemp_like) as second:
            with second.scratch_database().session() as s:
                assert s.execute("SELECT 2")[0][0] == 2
        data_dir = server.data_dir
        assert data_dir is not None and base not in data_dir.parents, (
            f"the data directory {data_dir} lives under the pytest-of-like directory {base}"
        )
