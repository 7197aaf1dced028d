"""A postmaster killed with SIGKILL: one clear error, and no server process left behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil  # type: ignore[import-untyped]
import pytest

from pytest_readstream.postgres import PgServer, PgServerDied, SessionSettings

pytestmark = pytest.mark.postgres


def _wait_until_dead(pid: int, timeout: float = 10.0) -> None:
    """Wait for ``pid`` to exit without reaping it (the harness reaps its own child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exit")


def test_killed_postmaster_raises_one_clear_error(own_server: PgServer) -> None:
    server = own_server
    db = server.scratch_database()
    session = db.session()
    assert session.execute("SELECT 1") == [(1,)]
    pid = server.pid
    assert pid is not None
    procs = [p for p in server.processes() if p.pid != pid]
    assert len(procs) >= 3

    os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pid)

    with pytest.raises(PgServerDied) as info:
        session.execute("SELECT 1")
    message = str(info.value)
    assert f"the PostgreSQL server (pid {pid}) stopped during" in message
    assert "its log tail:" in message and "killed by signal 9" in message
    assert info.value.pid == pid

    _gone, alive = psutil.wait_procs(procs, timeout=10)
    assert alive == []
    assert server.processes() == []

    # Every later harness call says the same.
    with pytest.raises(PgServerDied, match=f"pid {pid}"):
        db.session()
    with pytest.raises(PgServerDied, match=f"pid {pid}"):
        server.connect()
    data_dir = server.data_dir
    server.close()
    assert data_dir is not None and not data_dir.exists()


def test_postmaster_killed_during_a_statement(own_server: PgServer) -> None:
    server = own_server
    db = server.scratch_database()
    session = db.session(SessionSettings(statement_timeout=60_000))
    errors: list[BaseException] = []

    def _run() -> None:
        try:
            session.execute("SELECT pg_sleep(30)")
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=_run, daemon=True)
    thread.start()
    time.sleep(0.3)
    procs = server.processes()
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], PgServerDied)
    assert "during executing a statement" in str(errors[0])
    _gone, alive = psutil.wait_procs([p for p in procs if p.pid != pid], timeout=10)
    assert alive == []
