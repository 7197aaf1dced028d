"""A harness process that ends without closing its server still leaves no server running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

pytestmark = pytest.mark.postgres

CHILD = """
import json, sys, time
from pytest_readstream.postgres import PgServer
server = PgServer.embedded(sys.argv[1])
print(json.dumps({"pid": server.pid, "data_dir": str(server.data_dir),
                  "procs": [p.pid for p in server.processes()]}), flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def children(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[subprocess.Popen[str], dict[str, Any]]]]:
    """Three harness processes, started together (each starts a server, which takes seconds)."""
    base = tmp_path_factory.mktemp("exit")
    script = base / "child.py"
    script.write_text(CHILD)
    started: dict[str, subprocess.Popen[str]] = {}
    for mode in ("exit", "sigterm", "sigkill"):
        started[mode] = subprocess.Popen(
            [sys.executable, str(script), str(base / mode), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    out: dict[str, tuple[subprocess.Popen[str], dict[str, Any]]] = {}
    for mode, child in started.items():
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=30)
            pytest.fail(f"{mode} child failed: {child.stderr.read()}")
        out[mode] = (child, json.loads(line))
    yield out
    for child in started.values():
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def _all_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_normal_exit_stops_the_server_and_removes_its_files(
    children: dict[str, tuple[subprocess.Popen[str], dict[str, Any]]],
) -> None:
    child, info = children["exit"]
    assert child.wait(timeout=60) == 0
    assert _all_gone(info["procs"]) == []
    assert not Path(info["data_dir"]).exists()


def test_sigterm_stops_the_server_and_removes_its_files(
    children: dict[str, tuple[subprocess.Popen[str], dict[str, Any]]],
) -> None:
    child, info = children["sigterm"]
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
    assert _all_gone(info["procs"]) == []
    assert not Path(info["data_dir"]).exists()


def test_sigkill_of_the_harness_takes_the_server_down(
    children: dict[str, tuple[subprocess.Popen[str], dict[str, Any]]],
) -> None:
    child, info = children["sigkill"]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    # PR_SET_PDEATHSIG kills the postmaster; its children exit on postmaster death.
    assert _all_gone(info["procs"]) == []
