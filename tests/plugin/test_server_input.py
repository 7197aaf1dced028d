"""Issue 15 item 5: bad server input is one line at start-up, before any test or scenario runs.

A connection string libpq cannot parse, a server that does not answer, server options given for
another implementation: pytest stops with exit status 4 (its usage error), ``readstream`` with 2,
under pytest-xdist too, with no traceback and no test run.
"""

from __future__ import annotations

import socket

import pytest

from pytest_readstream.cli import main

psycopg = pytest.importorskip("psycopg", reason="the server options need the postgres extra (psycopg)")

PASSING = "def test_nothing(readstream_impl):\n    pass\n"


def _closed_port_dsn() -> str:
    """A DSN of a local port nobody listens on (bound, then released: connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://nobody:secret@127.0.0.1:{port}/postgres"


def _one_error(result: pytest.RunResult) -> str:
    lines = [line for line in result.errlines if line.strip()]
    assert len(lines) == 1, result.errlines
    assert "Traceback" not in result.stdout.str() and "_pytest.outcomes.Exit" not in result.stdout.str()
    result.stdout.no_fnmatch_line("*passed*")
    return lines[0]


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_dsn_that_is_not_a_connection_string(pytester: pytest.Pytester, workers: tuple[str, ...]) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(
        *workers, "--readstream-impl=postgres", "--readstream-pg-dsn=notadsn"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _one_error(result)
    assert line.startswith("ERROR: --readstream-pg-dsn='notadsn' is not a libpq connection string (missing")
    assert "allowed a URI such as postgresql://" in line


def test_an_unreachable_server_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    dsn = _closed_port_dsn()
    result = pytester.runpytest_subprocess(
        "-n", "2", "--readstream-impl=postgres", f"--readstream-pg-dsn={dsn}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _one_error(result)
    assert line.startswith("ERROR: --readstream-pg-dsn=") and ": cannot connect: " in line
    assert "secret" not in line and "password=***" in line  # the line goes to CI logs


def test_server_options_for_another_implementation(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-pg-dsn=postgresql://localhost/x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _one_error(result) == (
        "ERROR: --readstream-pg-dsn applies only to --readstream-impl=postgres (the implementation is 'reference')"
    )
    # An ini file may carry the server for a project that runs several implementations.
    pytester.makeini("[pytest]\nreadstream_pg_dsn = postgresql://localhost/x\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_dsn_and_bindir_together(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest(
        "--readstream-impl=postgres",
        "--readstream-pg-dsn=dbname=x",
        f"--readstream-pg-bindir={pytester.path}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not both" in _one_error(result)


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--pg-dsn", "notadsn"], "readstream oracle: --pg-dsn='notadsn' is not a libpq connection string"),
        (["--only", "zzzz"], "readstream oracle: --only 'zzzz' matches no scenario: allowed substrings of "),
        (["--pg-dsn", "dbname=x", "--pg-bindir", "."], "readstream oracle: --pg-dsn and --pg-bindir exclude"),
        (["--pg-dsn", "UNREACHABLE"], "readstream oracle: --pg-dsn="),
    ],
    ids=["not-a-dsn", "no-scenario", "dsn-and-bindir", "unreachable"],
)
def test_oracle_refuses_bad_input_in_one_line(
    args: list[str], start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [_closed_port_dsn() if a == "UNREACHABLE" else a for a in args]
    assert main(["oracle", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith(start), err
