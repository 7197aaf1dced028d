"""Server lifecycle: start, stop, restart only on change, reload, bindir mode."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from pytest_readstream.postgres import (
    PgNotAvailable,
    PgServer,
    PgSettingUnavailable,
    PgStartupError,
    ServerSettings,
    SessionSettings,
    embedded_bindir,
    measure_statement,
)

pytestmark = pytest.mark.postgres


def _left_behind(workdir: Path) -> list[Path]:
    """What a closed server left in its workdir, apart from the process's initdb template."""
    return [p for p in workdir.iterdir() if not p.name.startswith("pg-initdb-")]


def _show(server: PgServer, name: str) -> str:
    with server.connect() as conn:
        row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


def test_start_and_stop_leave_nothing(tmp_path: Path) -> None:
    server = PgServer.embedded(tmp_path / "work")
    data_dir = server.data_dir
    assert data_dir is not None and (data_dir / "PG_VERSION").read_text().strip() == "18"
    procs = server.processes()
    assert server.pid in {p.pid for p in procs}
    assert len(procs) >= 4  # postmaster, checkpointer, background writer, io workers, ...
    assert server.version.startswith("18.")
    assert _show(server, "listen_addresses") == ""
    assert _show(server, "autovacuum") == "off"
    server.close()
    _gone, alive = psutil.wait_procs(procs, timeout=10)
    assert alive == []
    assert not data_dir.exists()
    assert _left_behind(tmp_path / "work") == []
    server.close()  # idempotent


def test_restart_only_when_a_setting_changes(default_server: PgServer) -> None:
    server = default_server
    pid, restarts = server.pid, server.restarts
    assert server.configure(ServerSettings()) == "unchanged"
    assert (server.pid, server.restarts) == (pid, restarts)

    assert server.configure(ServerSettings(io_method="sync")) == "restarted"
    assert server.pid != pid and server.restarts == restarts + 1
    assert _show(server, "io_method") == "sync"

    sync_pid = server.pid
    assert server.configure(ServerSettings(io_method="sync")) == "unchanged"
    assert server.pid == sync_pid

    assert server.configure(ServerSettings(io_method="sync", io_max_combine_limit=32)) == ("restarted")
    assert _show(server, "io_max_combine_limit") == "256kB"
    assert server.configure(ServerSettings()) == "restarted"
    assert _show(server, "io_method") == "worker"


def test_io_workers_is_a_reload(default_server: PgServer) -> None:
    server = default_server
    pid = server.pid
    assert server.setting_context("io_workers") == "sighup"
    assert server.configure(ServerSettings(io_workers=5)) == "reloaded"
    assert server.pid == pid
    with server.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'io worker'"
        ).fetchone()
    assert row == (5,)
    assert server.configure(ServerSettings()) == "reloaded"
    assert _show(server, "io_workers") == "3"


def test_restart_level_settings_are_postmaster_context(pg_server: PgServer) -> None:
    for name in ("io_method", "shared_buffers", "io_max_combine_limit", "debug_io_direct"):
        assert pg_server.setting_context(name) == "postmaster", name


def test_sessions_survive_a_restart(default_server: PgServer) -> None:
    db = default_server.scratch_database(label="restart")
    try:
        with db.session(SessionSettings(io_combine_limit=4)) as s:
            old_pid = s.pid
            default_server.configure(ServerSettings(shared_buffers=4096))
            assert s.pid != old_pid
            assert s.execute("SHOW io_combine_limit") == [("32kB",)]
            assert s.execute("SHOW shared_buffers") == [("32MB",)]
    finally:
        db.drop()
        default_server.configure(ServerSettings())


def test_unsupported_io_method_is_refused(pg_server: PgServer) -> None:
    with pytest.raises(PgSettingUnavailable, match="io_method") as info:
        pg_server.configure(ServerSettings(io_method="io_uring"))
    assert "this build supports only" in str(info.value)


def test_from_bindir_runs_a_users_build(tmp_path: Path) -> None:
    bindir = embedded_bindir()
    with PgServer.from_bindir(bindir.parent, tmp_path) as server:
        assert server.kind == "bindir" and server.owned
        db = server.scratch_database()
        with db.session() as s:
            m = measure_statement(s, "SELECT 1")
        assert m.io.is_zero() and m.quiet


def test_from_bindir_rejects_a_directory_without_binaries(tmp_path: Path) -> None:
    with pytest.raises(PgNotAvailable, match="lacks executable initdb, postgres"):
        PgServer.from_bindir(tmp_path, tmp_path / "work")


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    # shared_buffers far beyond memory: the postmaster refuses to start and says why.
    with pytest.raises(PgStartupError) as info:
        PgServer.embedded(tmp_path, settings=ServerSettings(shared_buffers=2**30 - 1))
    assert "log tail" in str(info.value)
    assert "shared memory" in str(info.value)
    assert _left_behind(tmp_path) == []


def test_a_run_directory_left_by_a_killed_harness_with_the_same_pid_is_no_obstacle(tmp_path: Path) -> None:
    # A harness killed by SIGKILL leaves its run directory, named after its pid; a later process
    # given the same pid once failed to start its server (FileExistsError).
    from pytest_readstream.postgres.servers import _cluster
    from pytest_readstream.postgres.servers._process import _run_as

    workdir = tmp_path / "work"
    workdir.mkdir()
    home = _cluster._server_home(workdir, _run_as(None))
    stale = home / f"pg-{os.getpid()}-{_cluster._counter + 1}"
    stale.mkdir()
    cluster = _cluster._Cluster.create(embedded_bindir(), workdir, None, 30.0, 30.0)
    try:
        assert cluster.run_dir != stale and cluster.run_dir.parent == home
        assert cluster.run_dir.name.startswith(f"pg-{os.getpid()}-")
        assert cluster.data_dir.is_dir() and stale.is_dir()
    finally:
        shutil.rmtree(cluster.run_dir, ignore_errors=True)
        stale.rmdir()
