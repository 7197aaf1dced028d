"""The conformance suite's scan tests against a real PostgreSQL 18 with its expectations file.

Stock 18.6 must pass every scan test it can run except the heap-rescan test listed in
``fixtures/expectations/postgresql-18.txt``, which must fail (strict xfail): the bug is still
there. An unused line in the file is an error here, so a renamed test cannot drop its entry.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXPECTATIONS = Path(__file__).resolve().parents[2] / "fixtures" / "expectations" / "postgresql-18.txt"


@pytest.mark.postgres
def test_stock_18_fails_only_its_listed_scan_tests(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "readstream_conformance.test_scans",
        "--readstream-impl=postgres", f"--readstream-xfails={EXPECTATIONS}",
        "-W", "error::pytest_readstream.xfails.ReadstreamXfailsWarning",
        "-p", "no:cacheprovider", "-q", "-rx",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, \d+ skipped, 2 xfailed in .*", summary), tail
    assert int(summary.split()[0]) >= 10, tail  # the scan tests a server can run
    xfails = [line for line in out.stdout.splitlines() if line.startswith("XFAIL")]
    assert len(xfails) == 2, tail
    for line in xfails:
        assert "test_rescan_that_adds_a_strategy_reads_through_the_ring[" in line, line
        assert "heap_rescan keeps the stale no-strategy (18.6) (postgresql-18.txt:9)" in line, line


@pytest.mark.postgres
def test_stream_tests_run_against_the_servers_own_stream(tmp_path: Path) -> None:
    """A fast subset of ``--readstream-impl=postgres``: the order and pin families and the stream
    state machine drive the server's ``read_stream.c`` through the probe; every MUST test runs
    or names why it cannot (io_uring missing from the build, a postmaster setting, a fault)."""
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "readstream_conformance.test_order",
        "readstream_conformance.test_pins", "readstream_conformance.test_stateful",
        "--readstream-impl=postgres", "--hypothesis-profile=ci", "-p", "no:cacheprovider", "-q", "-rs",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    if "lacks capability 'stream-api'" in out.stdout:
        pytest.skip("the probe cannot be built here: " + tail.splitlines()[-1])
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"(\d+) passed, (\d+) skipped in .*", summary)
    assert match, tail
    assert int(match.group(1)) >= 45, tail  # order 29, pins 20 (minus io_uring), the machine
    allowed = ("io_uring", "max_connections", "fault-injection", "traced copy")
    for line in out.stdout.splitlines():
        if line.startswith("SKIPPED"):
            assert any(word in line for word in allowed), line
