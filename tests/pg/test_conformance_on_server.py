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
def test_the_fault_family_runs_against_the_server_with_the_interposer(tmp_path: Path) -> None:
    """The scan-level fault tests run on the embedded server (fault-injection through the
    interposer) and pass; the stream-level ones say which capability they lack."""
    from pytest_readstream.postgres.implementation import PostgresImplementation

    reason = PostgresImplementation(pytest_mode=False).fault_injection_unavailable
    if reason is not None:
        pytest.skip(reason)
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs",
        "readstream_conformance.test_scan_faults", "readstream_conformance.test_faults",
        "--readstream-impl=postgres", "-p", "no:cacheprovider", "-q", "-rs",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert "capabilities: fault-injection, scans" in out.stdout, tail
    row = re.search(r"^faults\s+MUST\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out.stdout, re.M)
    assert row is not None, tail
    passed, failed, errors, _skipped, _xfailed, xpassed = map(int, row.groups())
    assert passed >= 12 and failed == errors == xpassed == 0, tail
    for line in out.stdout.splitlines():
        if line.startswith("SKIPPED"):
            assert "lacks capability 'stream-api'" in line, line
