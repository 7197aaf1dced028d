"""A tiny pytest plugin recording each test's outcome for the mutant kill matrix.

``pytest_readstream.mutants.run_kill_matrix`` loads it with ``-p
readstream_conformance._killmatrix`` and reads the JSON file named by the environment variable
``READSTREAM_KILLMATRIX_OUT``: ``{node id: "passed" | "failed" | "self-check" | "harness-error" |
"skipped"}``. A test counts as failed when any of its phases failed (an error in set-up or teardown
included), unless the harness itself failed it (``harness-error``: the server did not start, the
probe did not build; ``pytest_readstream.harness_errors``), which is never a kill. A test
whose only failures are the reference model's own internal checks (``InvariantViolation``,
``ModelUsageError`` raised inside the model) is ``self-check``: the model caught the bug, not the
suite, and an implementation under test has no such checks. Under xdist the controller receives
every worker's reports, so only the controller writes the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

_ENV = "READSTREAM_KILLMATRIX_OUT"
_SELF_CHECK_ERRORS = ("InvariantViolation", "ModelUsageError")
_outcomes: dict[str, str] = {}
# node id -> "the harness could not ..." (written beside the outcomes, as PATH.harness.json)
_harness: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if hasattr(report, "wasxfail"):
        _outcomes[nodeid] = "xfailed" if report.skipped else "xpassed"
    elif report.failed:
        lines = [str(v) for name, v in report.user_properties if name == "readstream_harness_error"]
        if lines:
            _outcomes[nodeid] = "harness-error"
            _harness.setdefault(nodeid, lines[0])
        elif _outcomes.get(nodeid) == "harness-error":
            pass
        elif _is_self_check(report):
            _outcomes.setdefault(nodeid, "self-check")
        else:
            _outcomes[nodeid] = "failed"
    elif report.skipped and report.when in ("setup", "call"):
        _outcomes.setdefault(nodeid, "skipped")
    elif report.when == "call" and report.passed:
        if _outcomes.get(nodeid) not in ("failed", "self-check"):
            _outcomes[nodeid] = "passed"


def _is_self_check(report: pytest.TestReport) -> bool:
    """The failure is one of the model's own checks (the crash line names its exception)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") or ""
    head = message.split(":", 1)[0]
    return head.rsplit(".", 1)[-1] in _SELF_CHECK_ERRORS


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    if hasattr(session.config, "workerinput"):
        return
    target = os.environ.get(_ENV)
    if not target:
        return
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_outcomes, indent=1, sort_keys=True))
    tmp.replace(path)
    if _harness:
        side = path.with_name(path.name + ".harness.json")
        side.write_text(json.dumps(_harness, indent=1, sort_keys=True))
