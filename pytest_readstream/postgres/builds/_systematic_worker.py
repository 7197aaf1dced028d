"""A long-lived pytest worker of the systematic mutant runs: one collection, many mutated copies.

Loaded with ``-p pytest_readstream.postgres.builds._systematic_worker`` by :mod:`.systematic_run`,
which passes two pipes (``READSTREAM_SYSTEMATIC_JOBS_FD``, ``READSTREAM_SYSTEMATIC_RESULTS_FD``).
Instead of pytest's own loop over the collected tests, this plugin reads one job per line
(``{"id": ..., "tree": DIR, "order": [node ids]}``): it points the ``postgres`` implementation at
the job's tree (:meth:`~pytest_readstream.postgres.impl.implementation.PostgresImplementation.retarget_traced_source`:
the stream sessions are closed, so no backend that runs the next streams has the previous
copy's probe, and the probe, already compiled by the runner, is loaded from the build cache;
with ``"restart": true``, or when the server died, the server itself starts afresh), runs the tests in the job's order and
stops at the first failure, and writes one line back (after a line ``{"start": node id}``
before each test, from which the runner limits that test's time): ``{"id": ..., "outcomes": {node id:
"passed" | "failed" | "harness-error" | "skipped"}, "harness": {node id: line}, "seconds": s}``.
A job with ``"coverage": DIR`` (the tree's copy instrumented by ``builds/sitecov`` to write
there) runs every test and answers also ``"per_test": {node id: [marker, ...]}``, the
statements each test ran. A job line ``{"stop": true}`` (or the end of the pipe) ends the session.

So a mutant costs a server start and the tests it runs, not a Python start-up and a collection.
A failure counts as in ``readstream_conformance._killmatrix``: a test whose report carries the
``readstream_harness_error`` property failed because of the harness, which kills nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ..._stash import IMPL_KEY

_JOBS_FD = "READSTREAM_SYSTEMATIC_JOBS_FD"
_RESULTS_FD = "READSTREAM_SYSTEMATIC_RESULTS_FD"
_outcomes: dict[str, str] = {}
_harness: dict[str, str] = {}
_messages: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if report.failed:
        lines = [str(v) for name, v in report.user_properties if name == "readstream_harness_error"]
        if lines:
            _outcomes[nodeid] = "harness-error"
            _harness.setdefault(nodeid, lines[0])
        elif _outcomes.get(nodeid) != "harness-error":
            _outcomes[nodeid] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        _messages.setdefault(
            nodeid, f"{report.when}: {getattr(crash, 'message', '') or report.longrepr}"[:400]
        )
    elif report.skipped and report.when in ("setup", "call"):
        _outcomes.setdefault(nodeid, "skipped")
    elif report.when == "call" and report.passed:
        _outcomes.setdefault(nodeid, "passed")


def _run_job(
    session: pytest.Session, job: dict[str, Any], by_id: dict[str, Any], ran: set[str], results: Any
) -> dict[str, Any]:
    impl = session.config.stash[IMPL_KEY]
    impl.retarget_traced_source(Path(job["tree"]), restart=bool(job.get("restart", False)))
    _outcomes.clear()
    _harness.clear()
    _messages.clear()
    order = [by_id[n] for n in job["order"] if n in by_id]
    coverage = Path(job["coverage"]) if job.get("coverage") else None
    per_test: dict[str, list[int]] = {}
    t0 = time.monotonic()
    stopped = None
    for i, item in enumerate(order):
        # The last test of a job tears everything down (nextitem None): the next job may start
        # anywhere, and a test's own fixtures must end inside its own teardown, where a failure
        # of theirs is that test's (the session's implementation is a value in the stash).
        nextitem = order[i + 1] if i + 1 < len(order) else None
        if item.nodeid in ran and hasattr(item, "_initrequest"):
            item._initrequest()  # a test run again gets fresh fixture values
        ran.add(item.nodeid)
        # The runner limits each test's time from here (a mutant that loops forever).
        results.write(json.dumps({"start": item.nodeid}) + "\n")
        try:
            item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        except pytest.exit.Exception as err:
            # The implementation ends a run whose server died (a mutant that crashes a backend):
            # here that is this test failing, and the next job restarts the server.
            _outcomes[item.nodeid] = "failed"
            stopped = str(err.msg)
        if coverage is not None:
            per_test[item.nodeid] = _take_hits(coverage)
            continue  # a coverage job runs every test
        if stopped or any(v in ("failed", "harness-error") for v in _outcomes.values()):
            break
    if order and (stopped is not None or item is not order[-1]):
        # Stopped at a failure (or by the implementation's exit): what that test left set up
        # for its successor (its module, its class) goes too, and an error in that teardown is
        # no verdict of this job's.
        try:
            session._setupstate.teardown_exact(None)
        except Exception as err:
            _messages.setdefault("<teardown>", f"{type(err).__name__}: {err}"[:400])
    return {
        "id": job["id"],
        "outcomes": dict(_outcomes),
        "harness": dict(_harness),
        "messages": dict(_messages),
        "seconds": round(time.monotonic() - t0, 2),
        **({"exit": stopped} if stopped else {}),
        **({"per_test": per_test} if coverage is not None else {}),
    }


def _take_hits(directory: Path) -> list[int]:
    """The coverage markers set since the last call (``builds/sitecov``), which are cleared: the
    files stay mapped by the backends, so their bytes are zeroed in place."""
    hits: set[int] = set()
    for path in directory.glob("hits.*"):
        with path.open("r+b") as f:
            data = f.read()
            hits.update(i for i, b in enumerate(data) if b)
            f.seek(0)
            f.write(bytes(len(data)))
    return sorted(hits)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    jobs_fd = os.environ.get(_JOBS_FD)
    results_fd = os.environ.get(_RESULTS_FD)
    if not jobs_fd or not results_fd:
        return None
    by_id = {item.nodeid: item for item in session.items}
    ran: set[str] = set()
    with os.fdopen(int(jobs_fd), "r") as jobs, os.fdopen(int(results_fd), "w", buffering=1) as results:
        results.write(json.dumps({"ready": True, "tests": len(by_id)}) + "\n")
        for line in jobs:
            job = json.loads(line)
            if job.get("stop"):
                break
            results.write(json.dumps(_run_job(session, job, by_id, ran, results)) + "\n")
    return True
