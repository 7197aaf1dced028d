"""The condensed failure view: one full report per violated invariant, then counts.

A broken implementation breaks the same invariant in every parametrized case: a stream that
keeps one pin fails the teardown of each test that begins one, and printing each traceback in
full buried the first useful one under tens of thousands of lines. With
``--readstream-failures=condensed`` (the default) the reports of readstream tests are grouped by
invariant family, tier, test function and phase (call, or setup/teardown as an error); the one with
the shortest reproduction keeps its full traceback and reproduction, the others become one line
naming that one and their own rerun command. ``--readstream-failures=full`` prints every
traceback as pytest would. Counts are untouched: pytest's totals and the family table still
count every failure and error.

It runs where every report arrives (a serial run, or the xdist controller), at the end of the
session, before pytest prints its failures section.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from .reporting import Results

__all__ = ["FAILURE_MODES", "Group", "condense"]

FAILURE_MODES = ("condensed", "full")
_REPRO_SECTION = "readstream reproduction"


@dataclass
class Group:
    """The failed or errored reports of one invariant in one phase."""

    family: str
    tier: str
    function: str
    phase: str
    shown: Any = None
    reports: list[Any] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "failed" if self.phase == "call" else f"error at {self.phase}"


def _repro_text(report: Any) -> str:
    return next((text for title, text in report.sections if title == _REPRO_SECTION), "")


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None and crash.message else str(report.longrepr)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else "(no message)"


def _rerun(report: Any) -> str:
    for line in _repro_text(report).splitlines():
        if line.startswith("rerun:"):
            return line.split(":", 1)[1].strip()
    return ""


def _size(report: Any) -> tuple[int, int, str]:
    """The order in which a group's representative is chosen: shortest reproduction first."""
    return (len(_repro_text(report)), len(str(report.longrepr)), report.nodeid)


def condense(reports: Iterable[Any], results: Results) -> list[Group]:
    """Group the failed/errored reports of readstream tests and shorten all but one per group.

    Returns the groups (largest first) for the summary; reports of other tests are left alone.
    """
    groups: dict[tuple[str, str, str, str], Group] = {}
    for report in reports:
        if not report.failed or not isinstance(report, pytest.TestReport):
            continue
        test = results.tests.get(report.nodeid)
        if test is None or not test.meta:
            continue
        function = report.nodeid.split("[", 1)[0]
        key = (test.family, test.tier, function, report.when)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(test.family, test.tier, function, report.when)
        group.reports.append(report)
    for group in groups.values():
        group.shown = min(group.reports, key=_size)
        for report in group.reports:
            if report is group.shown:
                continue
            rerun = _rerun(report)
            report.longrepr = (
                f"{_message(report)}\n"
                f"(condensed: the same invariant's {group.kind} is shown in full for {group.shown.nodeid}; "
                "--readstream-failures=full prints every traceback)" + (f"\nrerun: {rerun}" if rerun else "")
            )
            report.sections = []
    return sorted(groups.values(), key=lambda g: (-len(g.reports), g.family, g.function, g.phase))


def summary_lines(groups: list[Group]) -> list[str]:
    """The condensed view's summary: per invariant, the case shown in full and the count.

    Empty when nothing was condensed (no invariant failed more than once): every failure is
    then shown in full already, and a summary would only repeat it.
    """
    if all(len(g.reports) == 1 for g in groups):
        return []
    lines = ["violations by invariant (condensed; --readstream-failures=full prints every traceback):"]
    for g in groups:
        lines.append(
            f"  {g.family} {g.tier} {g.function.split('::')[-1]}: {len(g.reports)} {g.kind}; "
            f"shown in full: {g.shown.nodeid}: {_message(g.shown)}"
        )
        rerun = _rerun(g.shown)
        if rerun:
            lines.append(f"    rerun: {rerun}")
    return lines
