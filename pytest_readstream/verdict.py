"""The verdict of ``readstream check``: per-tier counts, one line, and the exit status.

The verdict is computed from the run's JSON report (``--readstream-report``), never from pytest's
own exit status, because pytest fails a run for any failed test while conformance is decided by
the MUST tier alone (``read_stream.md`` §9). Four verdicts, each with its exit status:

* ``conforms`` (0): every MUST test of the suite ran and passed. SHOULD and MAY failures do not
  change the verdict but are named on the same line, with what they mean
  (``SHOULD 35/40 passed, 5 FAILED: reads 3 (read sequence unlike PostgreSQL's), ...``).
* ``DOES NOT CONFORM`` (1): a MUST test failed, errored, passed against a strict expectation,
  or is a known failure listed in the expectations file (xfailed).
* ``INCOMPLETE`` (3): no MUST test failed, but not every MUST test ran (skipped for a missing
  capability or otherwise, or deselected with ``-k``): the line says how many ran of how many
  exist, so a stream that only runs a tenth of the suite never reads as conforming.
* ``INTERRUPTED`` (130): the run was cut short (Ctrl-C); nothing is claimed.
* ``ERROR`` (2): the harness could not do its part for some test (the server did not start, its
  C code did not build, a relation could not be built as the model lays it out:
  :mod:`~pytest_readstream.harness_errors`). Such a test judged nothing, so no verdict is given:
  the line says ``ERROR: the harness could not ...`` with the most frequent reason and how many
  tests it stopped. It wins over every other verdict except INTERRUPTED.

Exit status 2 (a bad command line, implementation or server setting) is decided before any test
runs and never reaches this module.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from .harness_errors import main_harness_error

__all__ = [
    "EXIT_CONFORMS",
    "EXIT_DOES_NOT_CONFORM",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "TierCounts",
    "Verdict",
    "tier_counts",
    "tier_table",
    "verdict",
]

EXIT_CONFORMS = 0
EXIT_DOES_NOT_CONFORM = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130

_TIERS = ("MUST", "SHOULD", "MAY")
# What a failure below MUST means, per invariant family: the reader of one line should know
# whether the stream is wrong, slower, or merely shaped differently from PostgreSQL 18.
_FAMILY_MEANING = {
    "adaptivity": "look-ahead adapts unlike PostgreSQL",
    "reads": "read sequence unlike PostgreSQL's",
    "performance": "slower than PostgreSQL",
    "lifecycle": "end/reset unlike PostgreSQL 18",
    "strategy": "strategy statistics unlike PostgreSQL",
}


@dataclass
class TierCounts:
    """The tests of one tier: how many exist (collected or deselected) and what became of them."""

    exist: int = 0
    passed: int = 0
    failed: int = 0  # failed, errored, xpassed (strict) or cut short
    skipped_capability: int = 0
    skipped_other: int = 0
    xfailed: int = 0
    deselected: int = 0
    harness_errors: int = 0  # stopped by the harness (harness_errors.py): neither passed nor failed
    failed_families: Counter[str] | None = None

    @property
    def ran(self) -> int:
        """Tests that ran to an outcome of their own (passed or failed)."""
        return self.passed + self.failed

    @property
    def did_not_run(self) -> int:
        return self.skipped_capability + self.skipped_other + self.deselected

    def failures_by_family(self) -> Counter[str]:
        return self.failed_families if self.failed_families is not None else Counter()


@dataclass(frozen=True)
class Verdict:
    """The verdict line and its exit status."""

    word: str
    line: str
    exit_status: int


def tier_counts(report: dict[str, Any]) -> dict[str, TierCounts]:
    """Per tier counts from a report: from its ``tests`` when present, else from ``families``."""
    out: dict[str, TierCounts] = {}
    tests = report.get("tests")
    if tests:
        for t in tests:
            inv = t.get("invariant") or {}
            tier = inv.get("tier")
            if tier not in _TIERS:
                continue
            c = out.setdefault(tier, TierCounts(failed_families=Counter()))
            if t.get("harness_error"):
                c.exist += 1
                c.harness_errors += 1
                continue
            _add(
                c,
                t.get("outcome", "incomplete"),
                1,
                inv.get("family", "?"),
                bool(t.get("missing_capabilities")),
            )
    else:
        for family, tiers in (report.get("families") or {}).items():
            for tier, counts in tiers.items():
                if tier not in _TIERS:
                    continue
                c = out.setdefault(tier, TierCounts(failed_families=Counter()))
                for outcome, n in counts.items():
                    if n:
                        _add(c, outcome, int(n), family, False)
    for tier, n in (report.get("deselected") or {}).items():
        if tier in _TIERS and n:
            c = out.setdefault(tier, TierCounts(failed_families=Counter()))
            c.deselected += int(n)
            c.exist += int(n)
    return {tier: out[tier] for tier in _TIERS if tier in out}


def _add(c: TierCounts, outcome: str, n: int, family: str, capability_skip: bool) -> None:
    c.exist += n
    if outcome == "passed":
        c.passed += n
    elif outcome == "skipped":
        if capability_skip:
            c.skipped_capability += n
        else:
            c.skipped_other += n
    elif outcome == "xfailed":
        c.xfailed += n
    else:  # failed, error, xpassed (a strict expectation broken), incomplete
        c.failed += n
        assert c.failed_families is not None
        c.failed_families[family] += n


def tier_table(counts: dict[str, TierCounts]) -> list[str]:
    """The per-tier table ``readstream check`` prints above its verdict."""
    cols: tuple[str, ...] = (
        "tests",
        "ran",
        "passed",
        "failed",
        "xfailed",
        "skip:capability",
        "skip:other",
        "deselected",
    )
    harness = any(c.harness_errors for c in counts.values())
    if harness:
        cols += ("harness-error",)
    lines = [f"{'tier':<7}" + "".join(f"{c:>{max(8, len(c) + 2)}}" for c in cols)]
    for tier, c in counts.items():
        values: tuple[int, ...] = (
            c.exist,
            c.ran,
            c.passed,
            c.failed,
            c.xfailed,
            c.skipped_capability,
            c.skipped_other,
            c.deselected,
        )
        if harness:
            values += (c.harness_errors,)
        lines.append(f"{tier:<7}" + "".join(f"{v:>{max(8, len(c) + 2)}}" for v, c in zip(values, cols)))
    return lines


def _lower_tier_text(tier: str, c: TierCounts) -> str:
    text = f"{tier} {c.passed}/{c.ran} passed" if c.ran else f"{tier} none ran"
    if c.failed:
        parts = [
            f"{family} {n}" + (f" ({_FAMILY_MEANING[family]})" if family in _FAMILY_MEANING else "")
            for family, n in sorted(c.failures_by_family().items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        text += f", {c.failed} FAILED: " + ", ".join(parts)
    extra = []
    if c.xfailed:
        extra.append(f"{c.xfailed} xfailed")
    if c.skipped_capability + c.skipped_other:
        extra.append(f"{c.skipped_capability + c.skipped_other} skipped")
    if c.deselected:
        extra.append(f"{c.deselected} deselected")
    if extra:
        text += " (" + ", ".join(extra) + ")"
    return text


def _must_text(c: TierCounts, missing: dict[str, int]) -> str:
    parts = [f"{c.ran} of {c.exist} MUST tests ran", f"{c.passed} passed"]
    if c.failed:
        families = ", ".join(f"{f} {n}" for f, n in sorted(c.failures_by_family().items()))
        parts.append(f"{c.failed} FAILED ({families})")
    if c.xfailed:
        parts.append(f"{c.xfailed} known failures (xfailed)")
    if c.skipped_capability:
        caps = ", ".join(f"{cap} {n}" for cap, n in sorted(missing.items()))
        parts.append(
            f"{c.skipped_capability} skipped for missing capabilities" + (f" ({caps})" if caps else "")
        )
    if c.skipped_other:
        parts.append(f"{c.skipped_other} skipped")
    if c.deselected:
        parts.append(f"{c.deselected} deselected")
    return ", ".join(parts)


def _missing_must_capabilities(report: dict[str, Any]) -> dict[str, int]:
    missing: Counter[str] = Counter()
    for t in report.get("tests") or []:
        inv = t.get("invariant") or {}
        if inv.get("tier") == "MUST" and t.get("outcome") == "skipped":
            for cap in t.get("missing_capabilities") or []:
                missing[cap] += 1
    return dict(missing)


def verdict(report: dict[str, Any]) -> Verdict:
    """The verdict of a run from its JSON report (see the module docstring for the four forms)."""
    impl = report.get("implementation") or {}
    name = (impl.get("name") or impl.get("spec") or "?") if isinstance(impl, dict) else str(impl)
    prefix = f"readstream check: {name}"
    seed = f"seed {report.get('seed')}"
    counts = tier_counts(report)
    must = counts.get("MUST", TierCounts(failed_families=Counter()))
    lower = "; ".join(_lower_tier_text(t, c) for t, c in counts.items() if t != "MUST")
    tail = (f"; {lower}" if lower else "") + f"; {seed}"
    if report.get("interrupted"):
        return Verdict(
            "INTERRUPTED",
            f"{prefix} INTERRUPTED: nothing is claimed; {_must_text(must, {})}{tail}",
            EXIT_INTERRUPTED,
        )
    harness = main_harness_error(t.get("harness_error") for t in report.get("tests") or [])
    if harness is not None:
        line, n, total = harness
        others = f"; {total - n} more with other harness errors" if total > n else ""
        return Verdict(
            "ERROR",
            f"{prefix} ERROR: {line} ({n} test{'s' if n != 1 else ''}{others}; no verdict: "
            f"a test the harness could not run judged nothing){tail}",
            EXIT_USAGE,
        )
    if must.failed or must.xfailed:
        return Verdict(
            "DOES NOT CONFORM",
            f"{prefix} DOES NOT CONFORM: {_must_text(must, _missing_must_capabilities(report))}{tail}",
            EXIT_DOES_NOT_CONFORM,
        )
    if must.exist == 0 or must.did_not_run:
        what = (
            "no MUST test ran"
            if must.ran == 0
            else f"only {_must_text(must, _missing_must_capabilities(report))}"
        )
        if must.ran == 0 and must.exist:
            what += f" ({_must_text(must, _missing_must_capabilities(report))})"
        return Verdict("INCOMPLETE", f"{prefix} INCOMPLETE: {what}{tail}", EXIT_INCOMPLETE)
    return Verdict(
        "conforms",
        f"{prefix} conforms: all {must.exist} MUST tests ran and passed{tail}",
        EXIT_CONFORMS,
    )
