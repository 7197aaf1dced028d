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


FAULT_EXPECTATIONS = EXPECTATIONS.with_name("postgresql-18-faults.txt")
_FAULT_SKIPS = (
    "this build supports only sync, worker",  # io_uring, where the build lacks it
    "a read the interposer holds, and io_method=io_uring",  # io_uring: held reads only
)


@pytest.mark.postgres
def test_the_fault_family_runs_against_the_server_with_the_interposer(tmp_path: Path) -> None:
    """The fault family (stream level through the probe, scan level) on the embedded server with
    the read interposer: every test a server can run passes (checksum failures on pages the
    interposer damages, another backend's read held by a second session, a short read's
    follow-up taken from the interposer's ledger), none is a known failure, and every skip is
    io_uring's. With the traced copy of the server's read_stream.c (its source already in the
    cache: no network here) the tests that need every read run too."""
    from pytest_readstream.postgres.builds.pgsource import READ_STREAM_C, source_cache_dir
    from pytest_readstream.postgres.impl.implementation import PostgresImplementation

    impl = PostgresImplementation(pytest_mode=False)
    reason = impl.fault_injection_unavailable
    if reason is not None:
        pytest.skip(reason)
    version = impl.server.version
    impl.close()
    traced = (source_cache_dir() / f"postgresql-{version}" / READ_STREAM_C).is_file()
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs",
        "readstream_conformance.test_scan_faults", "readstream_conformance.test_faults",
        "--readstream-impl=postgres", f"--readstream-xfails={FAULT_EXPECTATIONS}",
        "-W", "error::pytest_readstream.xfails.ReadstreamXfailsWarning",
        "-p", "no:cacheprovider", "-q", "-rsx",
        # Its own temporary root: a pytest run that creates the default one resets it to 0700,
        # which cuts other tests' servers (run as another OS user) off their files.
        f"--basetemp={tmp_path / 'basetemp'}",
        *(["--readstream-pg-fetch-source"] if traced else []),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    row = re.search(r"^faults\s+MUST\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out.stdout, re.M)
    assert row is not None, tail
    passed, failed, errors, _skipped, xfailed, xpassed = map(int, row.groups())
    assert failed == errors == xpassed == 0, tail
    allowed = _FAULT_SKIPS if traced else (*_FAULT_SKIPS, "needs every read the stream started")
    for line in out.stdout.splitlines():
        if line.startswith("SKIPPED"):
            assert any(a in line for a in allowed), line
    assert xfailed == 0, tail
    if traced:
        assert passed >= 68, tail
    else:
        assert passed >= 14, tail
