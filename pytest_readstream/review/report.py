"""The review's report: built from a run's result, rendered for a terminal, a mail, or a program.

What it says, in this order:

1. **the verdict of each side** (:func:`..verdict.verdict` of each suite report);
2. **the tests whose outcome changed**, each with its first violation (the failure's message)
   and its reproduction (the command that reruns it), in three groups:

   * *broken invariants*: a test that passed on the base and fails on the patched side, and
     states what PostgreSQL promises a stream's callers (a *contract*);
   * *changed expectations*: the same, but the test states what one version merely does (an
     *implementation* expectation: a patch is free to change it, and the reviewer should know it
     did), and a known failure of the version (``xfailed``) that the patch makes pass;
   * *fixed* and *ran on one side only*.

   Which kind a test is comes from the test itself when it says so (``readstream_kind`` =
   ``"contract"`` | ``"implementation"``, in its report entry or its invariant marker), or from
   the check that failed (the harness raises ``ImplementationExpectation`` for a per-version
   expectation, ``ConformanceViolation`` for a contract); otherwise a test whose parameters name a version (``pg18-``, ``pg19-``,
   ``pg20devel-``) is an implementation expectation, and any other test a contract (the report
   says which rule decided: ``kind_from``);
3. **per compare scenario**, the first read that differs and the totals (reads, bytes, pins,
   waits) of each side;
4. **time under each latency profile**, with the ratio patched / base;
5. the plots (:mod:`.plots`) and the phases' times.

"No change" means: the same verdict, no test outcome changed, no scenario differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "SCHEMA",
    "build_report",
    "regroup",
    "changed_tests",
    "format_markdown",
    "format_text",
    "kind_of",
]

SCHEMA = "pytest-readstream/review"
SCHEMA_VERSION = 1
_BLCKSZ = 8192
_FAILING = ("failed", "error")
_PASSING = ("passed", "xpassed")
_VERSION_PARAM = re.compile(r"\[(?:[^\]]*-)?pg(18|19|20devel)\b")
_KINDS = ("contract", "implementation")


def kind_of(test: dict[str, Any]) -> tuple[str, str]:
    """``(kind, where from)`` of a report's test entry: ``contract`` or ``implementation``.

    In this order: the entry's own ``readstream_kind`` (the kind of the check that failed, as
    the plugin reports it); the failure's exception (``ImplementationExpectation`` or
    ``ConformanceViolation``, with the interim table's implementation checks); the test's marker
    (``readstream_invariant(..., kind=...)``, or the interim table); a version in its parameters;
    else a contract."""
    from ._interim_kinds import IMPLEMENTATION_CHECKS, IMPLEMENTATION_TESTS

    inv = test.get("invariant") or {}
    if not isinstance(inv, dict):
        inv = {}
    for value in (test.get("failure_kind"), test.get("readstream_kind"), test.get("kind")):
        if value in _KINDS:
            return str(value), "readstream_kind"
    first = (test.get("message") or "").split("\n", 1)[0]
    if "ImplementationExpectation" in first:
        return "implementation", "ImplementationExpectation"
    if any(words in first for words in IMPLEMENTATION_CHECKS):
        return "implementation", "interim table (check)"
    if "ConformanceViolation" in first:
        return "contract", "ConformanceViolation"  # the check that failed states a contract
    for value in (inv.get("kind"), inv.get("readstream_kind")):
        if value in _KINDS:
            return str(value), "readstream_kind"
    nodeid = test.get("nodeid", "")
    function = nodeid.split("[", 1)[0].split("/")[-1]
    if function in IMPLEMENTATION_TESTS:
        return "implementation", "interim table (test)"
    if _VERSION_PARAM.search(nodeid):
        return "implementation", "version-parameter"
    return "contract", "default"


def _rerun(test: dict[str, Any]) -> str | None:
    scenario = test.get("scenario") or {}
    return scenario.get("rerun") if isinstance(scenario, dict) else None


def _entry(nodeid: str, b: dict[str, Any] | None, p: dict[str, Any] | None) -> dict[str, Any]:
    ob = (b or {}).get("outcome", "absent")
    op = (p or {}).get("outcome", "absent")
    source = p if op in _FAILING else (b or p or {})
    inv = (source or {}).get("invariant") or {}
    kind, kind_from = kind_of(source or {"nodeid": nodeid})
    return {
        "nodeid": nodeid,
        "base": ob,
        "patched": op,
        "family": inv.get("family") if isinstance(inv, dict) else None,
        "tier": inv.get("tier") if isinstance(inv, dict) else None,
        "kind": kind,
        "kind_from": kind_from,
        "first_violation": (source or {}).get("message"),
        "reproduction": _rerun(source or {}),
    }


def _unstable(runs: dict[str, list[str]] | None) -> bool:
    """Whether reruns show the difference is timing's: one side varied, or both saw one outcome."""
    if not runs:
        return False
    # A rerun that did not report the test ("absent") tells nothing either way.
    b = {o for o in runs.get("base") or [] if o != "absent"}
    p = {o for o in runs.get("patched") or [] if o != "absent"}
    return len(b) > 1 or len(p) > 1 or bool(b & p)


def changed_tests(
    base: dict[str, Any], patched: dict[str, Any], reruns: dict[str, dict[str, list[str]]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The tests whose outcome differs between two suite reports, grouped (module docstring);
    a difference the reruns show to depend on timing goes to ``timing_dependent``."""
    bt = {t["nodeid"]: t for t in base.get("tests") or []}
    pt = {t["nodeid"]: t for t in patched.get("tests") or []}
    groups: dict[str, list[dict[str, Any]]] = {
        "broken_invariants": [],
        "changed_expectations": [],
        "fixed": [],
        "one_side_only": [],
        "timing_dependent": [],
    }
    for nodeid in sorted(set(bt) | set(pt)):
        b, p = bt.get(nodeid), pt.get(nodeid)
        ob, op = (b or {}).get("outcome"), (p or {}).get("outcome")
        if ob == op:
            continue
        e = _entry(nodeid, b, p)
        runs = (reruns or {}).get(nodeid)
        if runs:
            e["runs"] = runs
        if _unstable(runs):
            groups["timing_dependent"].append(e)
            continue
        if op in _FAILING and ob in _PASSING:
            groups["broken_invariants" if e["kind"] == "contract" else "changed_expectations"].append(e)
        elif ob == "xfailed" and op in _PASSING:
            e["note"] = "a known failure of this version passes with the patch (its expectation changed)"
            groups["changed_expectations"].append(e)
        elif op in _FAILING and ob == "xfailed":
            continue  # a known failure still fails (strict xfails report it as xfailed on both)
        elif ob in _FAILING and op in _PASSING:
            groups["fixed"].append(e)
        elif op in _FAILING:
            groups["broken_invariants" if e["kind"] == "contract" else "changed_expectations"].append(e)
        else:
            groups["one_side_only"].append(e)
    return groups


def _scenario_rows(comparison: dict[str, Any] | None) -> list[dict[str, Any]]:
    from ..postgres.fidelity.compare import first_divergence

    rows = []
    for rec in (comparison or {}).get("scenarios") or []:
        row: dict[str, Any] = {"scenario": rec["scenario"], "description": rec.get("description")}
        if "skipped" in rec:
            row["skipped"] = rec["skipped"]
            rows.append(row)
            continue
        for label, key in (("base", "base"), ("patched", "patch")):
            side = rec.get(key) or {}
            row[label] = {
                "reads": side.get("reads"),
                "bytes": (side.get("blocks") or 0) * _BLCKSZ,
                "pins": side.get("pins"),
                "waits": side.get("waits"),
                "time_ms": side.get("time_ms"),
                "error": side.get("error"),
            }
        b, p = rec.get("base") or {}, rec.get("patch") or {}
        if "read_sequence" in b and "read_sequence" in p:
            row["first_difference"] = first_divergence(b["read_sequence"], p["read_sequence"])
        row["differences"] = list(rec.get("differences") or [])
        timing = rec.get("timing_dependent")
        if timing:
            row["timing_dependent"] = timing
        rows.append(row)
    return rows


def build_report(result: dict[str, Any]) -> dict[str, Any]:
    """The report of a run's result (:func:`.run.run_review`): what the renderers print."""
    from ..verdict import verdict

    suites = result.get("suites") or {}
    verdicts = {}
    for label in ("base", "patched"):
        rep = suites.get(label)
        if rep and rep.get("tests"):
            v = verdict(rep)
            verdicts[label] = {"verdict": v.word, "line": v.line, "summary": rep.get("summary")}
        elif rep is not None:
            verdicts[label] = {
                "verdict": "ERROR",
                "line": f"the suite did not run (pytest exit {rep.get('exit_code')})",
                "summary": None,
                "output_tail": rep.get("output_tail"),
            }
    changed = (
        changed_tests(suites["base"], suites["patched"], result.get("reruns"))
        if "base" in suites and "patched" in suites
        else {
            k: []
            for k in (
                "broken_invariants",
                "changed_expectations",
                "fixed",
                "one_side_only",
                "timing_dependent",
            )
        }
    )
    scenarios = _scenario_rows(result.get("compare"))
    differing = [s["scenario"] for s in scenarios if s.get("differences")]
    same_verdict = len({v["verdict"] for v in verdicts.values()}) <= 1
    counted = {k: v for k, v in changed.items() if k != "timing_dependent"}
    any_change = any(counted.values()) or bool(differing) or not same_verdict
    conclusion = "no change" if not any_change else "changes"
    reasons = []
    if not same_verdict:
        reasons.append(f"verdict {verdicts['base']['verdict']} -> {verdicts['patched']['verdict']}")
    for key, text in (
        ("broken_invariants", "broken invariant"),
        ("changed_expectations", "changed expectation"),
        ("fixed", "fixed test"),
        ("one_side_only", "test run on one side only"),
    ):
        if changed[key]:
            n = len(changed[key])
            reasons.append(f"{n} {text}{'s' if n != 1 else ''}")
    if result.get("no_code_change"):
        reasons.append("the patch changes no code: every touched C file has the base's tokens (nothing run)")
    if differing:
        reasons.append(f"{len(differing)} scenario{'s' if len(differing) != 1 else ''} differ")
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        **{k: result.get(k) for k in ("base", "patched", "patch", "patched_tree_given", "plan", "build")},
        "conclusion": conclusion,
        "conclusion_reasons": reasons,
        "verdicts": verdicts,
        "changed_tests": changed,
        "scenarios": scenarios,
        "differing_scenarios": differing,
        "no_code_change": bool(result.get("no_code_change")),
        "timing": result.get("timing"),
        "plots": result.get("plots") or [],
        "seconds": result.get("seconds"),
        "suites": {
            label: {k: v for k, v in (rep or {}).items() if k != "tests"} for label, rep in suites.items()
        },
    }


def regroup(report: dict[str, Any]) -> dict[str, Any]:
    """A saved report with its changed tests classified again by today's :func:`kind_of` (an
    older report, or one made before the suite said a test's kind), its conclusion kept."""
    groups = report.get("changed_tests") or {}
    timing = groups.get("timing_dependent", [])
    # Today's rule of what reruns show (a rerun that did not report a test tells nothing).
    steady = [t for t in timing if not _unstable(t.get("runs"))]
    groups = {**groups, "timing_dependent": [t for t in timing if t not in steady]}
    moving = [*groups.get("broken_invariants", []), *groups.get("changed_expectations", []), *steady]
    kept = [t for t in moving if t.get("note")]  # a known failure that passes: an expectation
    broken: list[dict[str, Any]] = []
    changed = list(kept)
    for t in moving:
        if t in kept:
            continue
        if t.get("kind_from") == "readstream_kind":
            kind, source = t["kind"], "readstream_kind"  # the test said so: nothing to classify
        else:
            kind, source = kind_of({"nodeid": t["nodeid"], "message": t.get("first_violation")})
        t = {**t, "kind": kind, "kind_from": source}
        (broken if kind == "contract" else changed).append(t)
    out = {
        **report,
        "changed_tests": {**groups, "broken_invariants": broken, "changed_expectations": changed},
    }
    old = report.get("conclusion_reasons") or []
    first = [r for r in old if r.startswith("verdict ")]
    rest = [
        r
        for r in old
        if not r.startswith("verdict ") and "broken invariant" not in r and "changed expectation" not in r
    ]
    counts = [
        f"{len(items)} {text}{'s' if len(items) != 1 else ''}"
        for items, text in ((broken, "broken invariant"), (changed, "changed expectation"))
        if items
    ]
    out["conclusion_reasons"] = first + counts + rest
    return out


# ------------------------------------------------------------------------------ renderers
def _read_text(r: Iterable[int] | None) -> str:
    if r is None:
        return "(none: the sequence ended)"
    first, n = list(r)
    return f"{first}" if n == 1 else f"{first}-{first + n - 1} ({n} blocks)"


def _totals(side: dict[str, Any]) -> str:
    if side.get("error"):
        return f"error: {side['error']}"
    kb = (side.get("bytes") or 0) // 1024
    pins = "-" if side.get("pins") is None else side["pins"]
    waits = "-" if side.get("waits") is None else side["waits"]
    return f"{side.get('reads')} reads, {kb} kB, {pins} pins, {waits} waits"


def _lines(report: dict[str, Any], md: bool) -> list[str]:
    h = (lambda t: f"### {t}") if md else (lambda t: f"== {t}")
    code = (lambda t: f"`{t}`") if md else (lambda t: t)
    bullet = "- " if md else "  "
    sub = "  - " if md else "    "  # a test's details: nested bullets in Markdown
    out: list[str] = []
    plan = report.get("plan") or {}
    title = f"readstream review: {report['conclusion'].upper() if report['conclusion'] == 'no change' else 'changes'}"
    out.append(f"## {title}" if md else title)
    if report.get("conclusion_reasons"):
        out.append(f"{bullet}{'; '.join(report['conclusion_reasons'])}")
    out.append(
        f"{bullet}base {code(report['base']['tree'])} (PostgreSQL {report['base']['version']}); "
        + (
            f"patch {code(report['patch'])}"
            if report.get("patch")
            else f"patched tree {code(report.get('patched_tree_given') or '?')}"
        )
    )
    out.append(f"{bullet}plan: {plan.get('mode')}: {plan.get('reason')}")
    build = report.get("build") or {}
    if build.get("patched"):
        out.append(f"{bullet}patched server: {build['patched']}")
    out.append("")
    if report.get("verdicts"):
        out.append(h("Verdicts"))
    for label in ("base", "patched"):
        v = (report.get("verdicts") or {}).get(label)
        if v:
            out.append(f"{bullet}{label}: **{v['verdict']}**" if md else f"  {label:<8} {v['verdict']}")
            out.append(f"{'  ' if md else '           '}{v['line']}")
    if report.get("verdicts"):
        out.append("")
    groups = report.get("changed_tests") or {}
    titles = (
        ("broken_invariants", "Broken invariants (a contract the patched side no longer keeps)"),
        ("changed_expectations", "Changed expectations (what a version does, changed by the patch)"),
        ("fixed", "Fixed (failed on the base, pass patched)"),
        ("one_side_only", "Ran on one side only"),
        ("timing_dependent", "Timing-dependent, not counted (the outcome varied between runs of one side)"),
    )
    any_changed = False
    for key, title in titles:
        tests = groups.get(key) or []
        if not tests:
            continue
        any_changed = True
        out.append(h(f"{title}: {len(tests)}"))
        for t in tests:
            tier = f" [{t['family']} {t['tier']}]" if t.get("family") else ""
            out.append(f"{bullet}{code(t['nodeid'])}{tier}: {t['base']} -> {t['patched']}")
            if t.get("runs"):
                out.append(
                    f"{sub}runs: base {', '.join(t['runs']['base'])}; patched {', '.join(t['runs']['patched'])}"
                )
            if t.get("note"):
                out.append(f"{sub}{t['note']}")
            if t.get("first_violation"):
                out.append(f"{sub}first violation: {t['first_violation'].splitlines()[0][:300]}")
            if t.get("reproduction"):
                out.append(f"{sub}reproduction: {code(t['reproduction'])}")
            if t.get("kind_from") != "readstream_kind":
                out.append(
                    f"{sub}kind: {t['kind']} (from {t['kind_from']}; the test states no readstream_kind)"
                )
        out.append("")
    if not any_changed and report.get("verdicts"):
        out += ["no test changed its outcome", ""]
    if report.get("scenarios"):
        out.append(h("Scenarios (readstream compare)"))
    if md and report.get("scenarios"):
        out += ["| scenario | base | patched | first read that differs |", "| --- | --- | --- | --- |"]
    for s in report.get("scenarios") or []:
        if "skipped" in s:
            out.append(
                f"| {s['scenario']} | skipped: {s['skipped']} | | |"
                if md
                else f"  {s['scenario']}: skipped: {s['skipped']}"
            )
            continue
        div = s.get("first_difference")
        first = (
            f"read #{div['index'] + 1}: base {_read_text(div['base'])}, patched {_read_text(div['patch'])}"
            if div
            else "none"
        )
        if (s.get("base") or {}).get("error") or (s.get("patched") or {}).get("error"):
            first = "- (a side failed: its error is its totals)"
        if s.get("timing_dependent"):
            first += " (timing-dependent: not judged)"
        if md:
            out.append(f"| {s['scenario']} | {_totals(s['base'])} | {_totals(s['patched'])} | {first} |")
        else:
            out.append(f"  {s['scenario']:<24} base {_totals(s['base'])}; patched {_totals(s['patched'])}")
            if div or s.get("differences"):
                out.append(f"  {'':<24} first read that differs: {first}")
            for d in s.get("differences") or []:
                out.append(f"  {'':<24} differs: {d}")
    if report.get("scenarios"):
        out.append("")
    timing = report.get("timing") or {}
    if timing.get("rows"):
        out.append(
            h(
                f"Time under the seed threads' latency profiles ({timing['pages']} pages, median of {timing['repeats']})"
            )
        )
        if md:
            out += [
                "| profile | device | what | base ms | patched ms | patched / base |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
        for r in timing["rows"]:
            ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}"
            if r.get("within_noise"):
                ratio += " (runs overlap)"
            if md:
                out.append(
                    f"| {r['profile']} | {r['device']} | {r['what']} | {r['base_ms']:.1f} | {r['patched_ms']:.1f} | {ratio} |"
                )
            else:
                out.append(
                    f"  {r['profile']:<32} {r['what']:<14} base {r['base_ms']:>8.1f} ms  patched {r['patched_ms']:>8.1f} ms  x{ratio}"
                )
        out.append("")
    if report.get("plots"):
        out.append(h("Plots"))
        out += [f"{bullet}{code(p)}" for p in report["plots"]]
        out.append("")
    secs = report.get("seconds") or {}
    if secs:
        out.append(
            f"time: {secs.get('total', 0):.0f} s ("
            + ", ".join(f"{k} {v:.0f} s" for k, v in secs.items() if k != "total")
            + ")"
        )
    return out


def format_text(report: dict[str, Any]) -> str:
    """The report for a terminal."""
    return "\n".join(_lines(report, md=False)).replace("**", "")


def format_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown, fit to paste into a mailing-list reply."""
    return "\n".join(_lines(report, md=True))
