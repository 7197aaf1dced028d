"""A pytest plugin of the systematic mutant runs: which tests run, in which order, and how long each took.

Loaded with ``-p pytest_readstream.postgres.builds._suite_order`` by :mod:`.systematic_run`:

* ``READSTREAM_SUITE_ORDER=PATH`` (a JSON list of node ids): only those tests run, in that order
  (the ones that killed most mutants so far first, then the quickest), the others are
  deselected. With ``-x`` a mutant's run then stops at its first failure, usually the first test.
* ``READSTREAM_SUITE_TIMES=PATH``: the controller writes ``{node id: seconds}`` (set-up, call and
  teardown) at the end of the session, from which the first order is made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

_ORDER = "READSTREAM_SUITE_ORDER"
_TIMES = "READSTREAM_SUITE_TIMES"
_times: dict[str, float] = {}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    target = os.environ.get(_ORDER)
    if not target:
        return
    order: list[str] = json.loads(Path(target).read_text())
    rank = {nodeid: i for i, nodeid in enumerate(order)}
    kept = sorted((it for it in items if it.nodeid in rank), key=lambda it: rank[it.nodeid])
    dropped = [it for it in items if it.nodeid not in rank]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _times[report.nodeid] = _times.get(report.nodeid, 0.0) + float(report.duration)


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    if hasattr(session.config, "workerinput"):
        return
    target = os.environ.get(_TIMES)
    if target:
        Path(target).write_text(json.dumps(_times, indent=1, sort_keys=True))
