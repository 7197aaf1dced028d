"""TAP output of a pytest run, for ``meson test`` (``protocol: 'tap'``) and other TAP harnesses.

PostgreSQL's test suites report to ``meson test`` as TAP (the Test Anything Protocol), and the
proposed pytest support runs pytest suites the same way. Two ways in:

* the plugin option ``--readstream-tap=PATH`` (load it with ``-p pytest_readstream.tap``)
  writes one TAP line per test to ``PATH`` as each test ends (a file, or ``/dev/fd/N``);
* ``python -m pytest_readstream.tap PYTEST-ARGS...`` runs pytest with every line of its own
  output on stderr and the TAP stream alone on stdout: what ``meson test`` parses.

A test is ``ok`` when it passed, ``ok ... # SKIP reason`` when skipped, ``not ok ... # TODO``
when it is a known failure (xfail: TAP's TODO is exactly "expected to fail"), ``ok ... # TODO``
when a known failure passed, and ``not ok`` when it failed or errored, followed by its first
line of failure as a ``#`` diagnostic. The plan ``1..N`` comes last (TAP allows a trailing
plan), so a run that is interrupted has no plan and the harness reports it as broken.
It works under pytest-xdist: the controller, which receives every worker's reports, writes.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

import pytest

__all__ = ["TapWriter", "main"]


class TapWriter:
    """Writes a TAP 13 stream: a line per test from its reports, the plan at the end."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.count = 0
        self._outcome: dict[str, tuple[tuple[str, str], pytest.TestReport]] = {}
        self._write("TAP version 13")

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # The verdict is the call's (or a setup's that failed or skipped); the line is written
        # at teardown, which can still turn an ok into a not ok (a fixture's check failed).
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self._outcome[report.nodeid] = (_verdict(report), report)
        elif report.when == "teardown":
            verdict, source = self._outcome.pop(report.nodeid, (("ok", ""), report))
            if report.failed and verdict[0] == "ok":
                verdict, source = ("not ok", ""), report
            self._emit(source, verdict)

    def _emit(self, report: pytest.TestReport, verdict: tuple[str, str]) -> None:
        self.count += 1
        word, directive = verdict
        self._write(f"{word} {self.count} - {_escape(report.nodeid)}{directive}")
        if word == "not ok" and not directive:
            message = _failure_line(report)
            if message:
                self._write(f"# {message}")

    def finish(self) -> None:
        self._write(f"1..{self.count}")


def _verdict(report: pytest.TestReport) -> tuple[str, str]:
    """``(ok | not ok, directive)`` of a call report, or of a setup report that did not pass."""
    wasxfail = hasattr(report, "wasxfail")
    if report.passed:
        return ("ok", " # TODO known failure passed") if wasxfail else ("ok", "")
    if report.skipped:
        if wasxfail:
            return ("not ok", f" # TODO {_one_line(getattr(report, 'wasxfail', '')) or 'known failure'}")
        return ("ok", f" # SKIP {_skip_reason(report)}")
    return ("not ok", "")


def _escape(text: str) -> str:
    return text.replace("#", "\\#")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:200]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return _one_line(str(longrepr[2]).removeprefix("Skipped: "))
    return "skipped"


def _failure_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return _one_line(crash.message.splitlines()[0])
    return _one_line(str(report.longrepr).strip().splitlines()[-1]) if report.longrepr else ""


_KEY = pytest.StashKey[TapWriter]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("readstream").addoption(
        "--readstream-tap",
        dest="readstream_tap",
        metavar="PATH",
        default=None,
        help="write a TAP stream of the run to PATH (a file or /dev/fd/N), a line per test as it ends",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("readstream_tap", None)
    if not path or hasattr(config, "workerinput"):  # xdist workers: the controller writes
        return
    try:
        stream = open(path, "w", encoding="utf-8")  # open for the whole session
    except OSError as err:
        raise pytest.UsageError(
            f"--readstream-tap {path}: cannot be written ({err.strerror or err})"
        ) from None
    writer = TapWriter(stream)
    config.stash[_KEY] = writer
    config.pluginmanager.register(writer, "readstream-tap-writer")


def pytest_unconfigure(config: pytest.Config) -> None:
    writer = config.stash.get(_KEY, None)
    if writer is not None:
        writer.finish()
        writer.stream.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m pytest_readstream.tap PYTEST-ARGS``: TAP alone on stdout, pytest's output on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    tap_fd = os.dup(1)
    os.dup2(2, 1)  # everything pytest prints goes to stderr from here on
    tap: Any = os.fdopen(tap_fd, "w", encoding="utf-8")
    path = f"/dev/fd/{tap_fd}"
    try:
        return int(pytest.main(["-p", "pytest_readstream.tap", f"--readstream-tap={path}", *args]))
    finally:
        tap.close()


if __name__ == "__main__":
    raise SystemExit(main())
