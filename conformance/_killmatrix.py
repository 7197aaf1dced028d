"""A tiny pytest plugin recording each test's outcome for the mutant kill matrix.

``pytest_readstream.mutants.run_kill_matrix`` loads it with ``-p
readstream_conformance._killmatrix`` and reads the JSON file named by the environment variable
``READSTREAM_KILLMATRIX_OUT``: ``{node id: "passed" | "failed" | "skipped"}``. A test counts as
failed when any of its phases failed (an error in set-up or teardown included). Under xdist the
controller receives every worker's reports, so only the controller writes the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

_ENV = "READSTREAM_KILLMATRIX_OUT"
_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if hasattr(report, "wasxfail"):
        _outcomes[nodeid] = "xfailed" if report.skipped else "xpassed"
    elif report.failed:
        _outcomes[nodeid] = "failed"
    elif report.skipped and report.when in ("setup", "call"):
        _outcomes.setdefault(nodeid, "skipped")
    elif report.when == "call" and report.passed:
        if _outcomes.get(nodeid) != "failed":
            _outcomes[nodeid] = "passed"


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
