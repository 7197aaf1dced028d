"""Results: per-test outcomes, invariant families and I/O figures; the summary and the JSON report.

Everything here runs where the test reports arrive: in a serial run that is the only process, and
under pytest-xdist it is the controller, which receives every worker's reports. Per-test data
travels inside the reports' ``user_properties`` (which xdist serialises), never in worker-side
state, so a run with ``-n 2`` produces the same report as a serial one:

* ``("readstream_meta", {...})`` — implementation, invariant family and tier, capability skip;
  added by the plugin when the test is set up;
* ``("readstream_scenario", {...})`` — the test's reproduction data (``repro.py``);
* ``("readstream_stats", {...})`` — figures a test observed (reads, hits, simulated time...).

The JSON report has a versioned schema (``schema`` / ``schema_version`` below; fields are only
ever added within a version). Tests are sorted by id and carry no worker or timing-dependent
field except ``duration``, so two runs of the same tests compare equal once durations are
dropped. It is written atomically (a temporary file in the same directory, then ``os.replace``),
at the end of the session whatever happened: failures, errors, or ``KeyboardInterrupt``
(``interrupted: true``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .harness_errors import HARNESS_ERROR_PROPERTY

#: The ``user_properties`` name of a failure's kind (``readstream_failure_kind``): ``implementation``
#: when the check that failed states what a version does (the conformance harness's
#: ``ImplementationExpectation``), else the failing test's own kind (``contract`` or
#: ``implementation``, its ``readstream_invariant`` marker). ``readstream review`` tells "a
#: changed expectation" from "a broken invariant" by it.
FAILURE_KIND_PROPERTY = "readstream_failure_kind"

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "FAILURE_KIND_PROPERTY",
    "META_PROPERTY",
    "SCENARIO_PROPERTY",
    "STATS_PROPERTY",
    "OUTCOMES",
    "TestResult",
    "Results",
    "write_json_atomically",
]

SCHEMA = "pytest-readstream/report"
SCHEMA_VERSION = 1
META_PROPERTY = "readstream_meta"
SCENARIO_PROPERTY = "readstream_scenario"
STATS_PROPERTY = "readstream_stats"
#: The figures ``stats_totals`` sums across tests: counts and simulated time.
ADDITIVE_FIGURES = frozenset({"reads", "read_blocks", "read_bytes", "hits", "waits", "elapsed_us"})
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "incomplete")
_NO_FAMILY = "(no family)"


@dataclass
class TestResult:
    """What the run learnt about one test id."""

    __test__ = False  # not a pytest test class, despite its name

    nodeid: str
    # Until the call phase reports: a run interrupted inside the test leaves it "incomplete".
    outcome: str = "incomplete"
    message: str | None = None
    duration: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] | None = None
    stats: list[dict[str, Any]] = field(default_factory=list)
    # The test as pytest's own totals count it: one entry per phase report that pytest counts,
    # so a test that failed and then left pins is one "failed" and one "error", as in
    # "43 failed, 408 passed, 42 errors".
    pytest_counts: Counter[str] = field(default_factory=Counter)
    # "the harness could not ...": the test failed for the harness, not the implementation.
    harness_error: str | None = None
    # For a failure: "implementation" when the check that failed states what a version does,
    # else the test's own kind (FAILURE_KIND_PROPERTY).
    failure_kind: str | None = None

    @property
    def family(self) -> str:
        inv = self.meta.get("invariant")
        return inv["family"] if inv else _NO_FAMILY

    @property
    def tier(self) -> str:
        inv = self.meta.get("invariant")
        return inv["tier"] if inv else ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "message": self.message,
            "implementation": self.meta.get("implementation"),
            "invariant": self.meta.get("invariant"),
            "missing_capabilities": self.meta.get("missing_capabilities", []),
            "scenario": self.scenario,
            "stats": self.stats,
            "duration": round(self.duration, 6),
            "harness_error": self.harness_error,
            "failure_kind": self.failure_kind,
        }


def _short_message(report: pytest.TestReport) -> str | None:
    if report.skipped:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return str(longrepr[2]).removeprefix("Skipped: ")
        wasxfail = getattr(report, "wasxfail", "")
        return str(wasxfail) or None
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return str(crash.message).splitlines()[0] if crash.message else None
        text = str(report.longrepr).strip().splitlines()
        return text[-1] if text else None
    return None


def _outcome(report: pytest.TestReport, previous: str) -> str:
    wasxfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if wasxfail else "passed"
        if report.skipped:
            return "xfailed" if wasxfail else "skipped"
        return "failed"
    if report.when == "setup":
        if report.failed:
            return "error"
        if report.skipped:
            return "xfailed" if wasxfail else "skipped"
        return previous
    # teardown: an error there spoils a pass; it does not hide a failure.
    if report.failed and previous in ("passed", "xpassed", "skipped", "incomplete"):
        return "error"
    return previous


def _pytest_category(report: pytest.TestReport) -> str | None:
    """The category pytest's terminal totals put this phase report in (``None``: not counted)."""
    wasxfail = hasattr(report, "wasxfail")
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "xfailed" if wasxfail else "skipped"
    if report.when == "call":
        return "xpassed" if wasxfail else "passed"
    return None


class Results:
    """Per-test results gathered from the reports (the controller's view of the run)."""

    def __init__(self) -> None:
        self.tests: dict[str, TestResult] = {}

    def add_report(self, report: pytest.TestReport) -> None:
        res = self.tests.get(report.nodeid)
        if res is None:
            res = self.tests[report.nodeid] = TestResult(report.nodeid)
        new_outcome = _outcome(report, res.outcome)
        if new_outcome != res.outcome or report.failed:
            if report.failed or report.skipped or new_outcome in ("xpassed",):
                res.message = _short_message(report) or res.message
        res.outcome = new_outcome
        category = _pytest_category(report)
        if category:
            res.pytest_counts[category] += 1
        res.duration += float(getattr(report, "duration", 0.0) or 0.0)
        # Each report carries the test's user_properties as they were then; the latest is the
        # most complete (teardown's has everything the test attached).
        stats: list[dict[str, Any]] = []
        for name, value in report.user_properties:
            if name == META_PROPERTY and isinstance(value, dict):
                res.meta = dict(value)
            elif name == SCENARIO_PROPERTY and isinstance(value, dict):
                res.scenario = value
            elif name == STATS_PROPERTY and isinstance(value, dict):
                stats.append(value)
            elif name == HARNESS_ERROR_PROPERTY and isinstance(value, str) and report.failed:
                res.harness_error = res.harness_error or value
            elif name == FAILURE_KIND_PROPERTY and isinstance(value, str) and report.failed:
                res.failure_kind = res.failure_kind or value
        if stats or report.when == "teardown":
            res.stats = stats or res.stats

    # ------------------------------------------------------------------------------ figures
    def readstream_tests(self) -> list[TestResult]:
        return [t for t in self.tests.values() if t.meta]

    def counts(self) -> Counter[str]:
        return Counter(t.outcome for t in self.tests.values())

    def by_family(self) -> dict[tuple[str, str], Counter[str]]:
        table: dict[tuple[str, str], Counter[str]] = {}
        for t in self.readstream_tests():
            table.setdefault((t.family, t.tier), Counter())[t.outcome] += 1
        return dict(sorted(table.items(), key=lambda kv: (kv[0][0] == _NO_FAMILY, kv[0])))

    def pytest_counts_by_family(self) -> dict[tuple[str, str], Counter[str]]:
        """Like :meth:`by_family`, but counted as pytest's totals count (the terminal table)."""
        table: dict[tuple[str, str], Counter[str]] = {}
        for t in self.readstream_tests():
            table.setdefault((t.family, t.tier), Counter()).update(t.pytest_counts)
        return dict(sorted(table.items(), key=lambda kv: (kv[0][0] == _NO_FAMILY, kv[0])))

    def missing_capabilities(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for t in self.readstream_tests():
            if t.outcome == "skipped":
                for cap in t.meta.get("missing_capabilities", []):
                    c[cap] += 1
        return c

    def stats_totals(self) -> dict[str, Any]:
        """Sums of the additive I/O counters tests attached, and how many tests reported figures.

        Only counters add up across tests (``ADDITIVE_FIGURES``); a ratio, a depth or a setting
        summed over tests means nothing, so those stay per test in the report.
        """
        totals: dict[str, float] = {}
        reporting = 0
        for t in self.tests.values():
            if t.stats:
                reporting += 1
            for entry in t.stats:
                for k, v in entry.items():
                    if k in ADDITIVE_FIGURES and isinstance(v, (int, float)) and not isinstance(v, bool):
                        totals[k] = totals.get(k, 0) + v
        out: dict[str, Any] = {k: totals[k] for k in sorted(totals)}
        out["tests_reporting"] = reporting
        return out

    # ------------------------------------------------------------------------------ outputs
    def as_report(
        self,
        *,
        implementation: dict[str, Any],
        seed: int,
        exitstatus: int,
        interrupted: bool,
        plugin_version: str,
    ) -> dict[str, Any]:
        counts = self.counts()
        families: dict[str, dict[str, dict[str, int]]] = {}
        for (family, tier), c in self.by_family().items():
            families.setdefault(family, {})[tier or "-"] = {o: c.get(o, 0) for o in OUTCOMES}
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "plugin_version": plugin_version,
            "implementation": implementation,
            "seed": seed,
            "exitstatus": int(exitstatus),
            "interrupted": interrupted,
            "summary": {o: counts.get(o, 0) for o in OUTCOMES} | {"total": len(self.tests)},
            "families": families,
            "missing_capabilities": dict(sorted(self.missing_capabilities().items())),
            "stats_totals": self.stats_totals(),
            "tests": [self.tests[k].as_dict() for k in sorted(self.tests)],
        }

    def summary_lines(self, *, impl_line: str, seed_line: str) -> list[str]:
        lines = [impl_line, seed_line]
        table = self.pytest_counts_by_family()
        if table:
            cols = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
            width = max(len("invariant family"), *(len(f) for f, _ in table))
            header = f"{'invariant family':<{width}}  {'tier':<6}" + "".join(f"{c:>9}" for c in cols)
            lines += ["", header]
            for (family, tier), c in table.items():
                lines.append(
                    f"{family:<{width}}  {tier or '-':<6}" + "".join(f"{c.get(col, 0):>9}" for col in cols)
                )
        missing = self.missing_capabilities()
        if missing:
            lines.append("")
            lines.append(
                "skipped for missing capabilities: "
                + ", ".join(f"{cap} ({n})" for cap, n in sorted(missing.items()))
            )
        totals = self.stats_totals()
        if totals["tests_reporting"]:
            lines.append("")
            lines.append(_io_line(totals))
        return lines


def _fmt_number(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def _io_line(totals: dict[str, Any]) -> str:
    parts = []
    reads = totals.get("reads")
    if reads is not None:
        parts.append(f"reads {_fmt_number(reads)}")
        blocks = totals.get("read_blocks")
        if blocks is None and "read_bytes" in totals:
            blocks = totals["read_bytes"] / 8192
        if blocks is not None and reads:
            parts.append(f"blocks/read {blocks / reads:.2f}")
    if "hits" in totals:
        parts.append(f"hits {_fmt_number(totals['hits'])}")
    if "waits" in totals:
        parts.append(f"waits {_fmt_number(totals['waits'])}")
    if "elapsed_us" in totals:
        parts.append(f"simulated time {totals['elapsed_us'] / 1000:,.1f} ms")
    return f"I/O figures from {totals['tests_reporting']} test(s): " + ("; ".join(parts) or "none numeric")


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    # Created as a plain write would be (0666 less the umask), not mkstemp's private 0600: a
    # report is read like any file the user writes. The random name keeps concurrent writers apart.
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
