"""The systematic mutation score of the conformance suite on ``read_stream.c``
(``readstream mutants --impl postgres --systematic``).

Every mutant of :mod:`.systematic` runs through the traced copy (:mod:`.traced_copy`) in the
probe, on the server under test:

1. **Coverage and reference.** The unmutated file, instrumented by :mod:`.sitecov`, runs the
   stream-level suite once (``-n`` workers; the scan tests run the server's own compiled
   ``read_stream.c`` and are left out, as in :mod:`.cmutants`). No test may fail there; the tests
   that passed are the only ones a mutant can be killed by (:func:`pytest_readstream.mutants.judge`),
   and the statements that ran decide which mutants are *reached*. A mutant whose statement no
   test ran is *not reached* and is not run.
2. **Each reached mutant**: the mutated file goes into a tree of its own (symbolic links to the
   real tree, but for ``read_stream.c``), the probe is compiled from it here first (cached by
   its sources' hash, :func:`._cbuild.build_shared_object`, so the suite's process finds it
   built): a mutant that does not compile, or that the traced-copy builder refuses, is *not
   compiled* (stillborn) and never run. Then the suite runs in one process with ``-x``, the
   tests in order of how many mutants each killed so far, then quickest first
   (:mod:`._suite_order`): a killed mutant usually costs one test. ``workers`` mutants run at
   once.
3. **Verdicts**, cached per mutated file and suite in ``<cache>/systematic/``: *killed* (a test
   that passed on the reference failed), *timeout* (the run did not end within its limit: a
   mutant that makes the stream loop forever; counted as killed and listed apart), *survived*,
   *equivalent* (survived and reviewed by hand as a change of no observable meaning: the
   shipped file ``systematic_equivalents_<major>.txt`` keyed by the stable id, each with why),
   *not judged* (the harness failed; no verdict).

The score is killed / (reached - equivalent - not compiled - not judged).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...mutants import judge
from .pgsource import READ_STREAM_C, source_cache_dir
from .sitecov import instrument, read_hits
from .systematic import OPERATORS, SystematicMutant, generate_mutants

__all__ = [
    "STATUSES",
    "format_systematic",
    "load_equivalents",
    "mirror_tree",
    "run_systematic",
    "score",
]

#: Verdicts, in the order reports show them.
STATUSES = ("killed", "timeout", "survived", "equivalent", "not reached", "not compiled", "not judged")
_SCHEMA = 1
_SCAN_TESTS = ("test_scans.py", "test_scan_facts.py", "test_scan_faults.py")


# ------------------------------------------------------------------------------ reviewed equivalents
def equivalents_path(version: str) -> Path:
    """The reviewed equivalent mutants of PostgreSQL ``version``'s ``read_stream.c`` (by major)."""
    return Path(__file__).with_name(f"systematic_equivalents_{version.split('.')[0]}.txt")


def load_equivalents(version: str, path: Path | None = None) -> dict[str, str]:
    """``{stable id: why it is equivalent}`` from the shipped file (empty when there is none).

    Each line is ``ID | reason``; ``#`` starts a comment line.
    """
    p = path if path is not None else equivalents_path(version)
    if not p.is_file():
        return {}
    out: dict[str, str] = {}
    for n, raw in enumerate(p.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        ident, sep, why = line.partition(" | ")
        if not sep or not why.strip():
            raise ValueError(f"{p.name} line {n}: expected 'ID | reason', got {raw!r}")
        out[ident.strip()] = why.strip()
    return out


# ------------------------------------------------------------------------------ trees
def mirror_tree(tree: Path, dest: Path, text: str) -> Path:
    """A source tree at ``dest`` that is ``tree`` (symbolic links) except ``read_stream.c`` = ``text``."""
    parts = READ_STREAM_C.parts
    if not dest.is_dir():
        dest.mkdir(parents=True)
        here, there = dest, Path(tree)
        for i, part in enumerate(parts):
            for entry in there.iterdir():
                if entry.name != part:
                    (here / entry.name).symlink_to(entry)
            if i < len(parts) - 1:
                here, there = here / part, there / part
                here.mkdir()
    target = dest / READ_STREAM_C
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)
    return dest


def _suite_hashes() -> tuple[str, dict[str, str]]:
    """A hash of the whole conformance suite, and one per test module (by file name)."""
    import importlib.util

    # Located without importing it: the suite imports the harness, not the other way round.
    spec = importlib.util.find_spec("readstream_conformance")
    if spec is None or spec.origin is None:
        raise RuntimeError("the conformance suite (readstream_conformance) is not installed")
    per = {}
    whole = hashlib.sha256()
    for p in sorted(Path(spec.origin).parent.glob("*.py")):
        data = p.read_bytes()
        per[p.name] = hashlib.sha256(data).hexdigest()[:16]
        whole.update(p.name.encode() + b"\0" + data)
    return whole.hexdigest()[:16], per


# ------------------------------------------------------------------------------ one suite run
@dataclass
class _Run:
    outcomes: dict[str, str]
    harness_lines: dict[str, str]
    exit_code: int | None
    seconds: float
    timed_out: bool
    tail: str


def _kill_tree(pid: int) -> None:
    """Kill the process ``pid`` and its descendants (the suite, its servers and their backends),
    each by its id: a backend spinning in a mutated loop does not notice its postmaster's death."""
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - psutil is in the postgres extra
        os.kill(pid, 9)
        return
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def _run_suite(args: list[str], *, order: list[str] | None, times_out: Path | None, timeout_s: float) -> _Run:
    with tempfile.TemporaryDirectory(prefix="readstream-sys-") as tmp:
        record = Path(tmp) / "outcomes.json"
        env = dict(os.environ, READSTREAM_KILLMATRIX_OUT=str(record), READSTREAM_NO_SHRINK="1")
        env.pop("READSTREAM_IMPL", None)
        if order is not None:
            (Path(tmp) / "order.json").write_text(json.dumps(order))
            env["READSTREAM_SUITE_ORDER"] = str(Path(tmp) / "order.json")
        if times_out is not None:
            env["READSTREAM_SUITE_TIMES"] = str(times_out)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "readstream_conformance",
            "--readstream-impl=postgres",
            "-p",
            "readstream_conformance._killmatrix",
            "-p",
            "pytest_readstream.postgres.builds._suite_order",
            "-p",
            "no:cacheprovider",
            "-q",
            *args,
        ]
        t0 = time.monotonic()
        log = Path(tmp) / "log"
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_tree(proc.pid)
                proc.wait()
        seconds = time.monotonic() - t0
        outcomes: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
        side = record.with_name(record.name + ".harness.json")
        harness: dict[str, str] = json.loads(side.read_text()) if side.exists() else {}
        tail = log.read_text(errors="replace")[-3000:]
    return _Run(outcomes, harness, None if timed_out else proc.returncode, seconds, timed_out, tail)


def _as_result(run: _Run) -> dict[str, Any]:
    o = run.outcomes
    return {
        "failed": sorted(k for k, v in o.items() if v in ("failed", "self-check")),
        "passed": sum(1 for v in o.values() if v == "passed"),
        "passed_tests": sorted(k for k, v in o.items() if v == "passed"),
        "skipped": sum(1 for v in o.values() if v == "skipped"),
        "harness_errors": sorted(k for k, v in o.items() if v == "harness-error"),
        "exit_code": run.exit_code,
    }


# ------------------------------------------------------------------------------ the score
def score(counts: dict[str, int]) -> float | None:
    """killed (timeouts included) / (reached - equivalent - not compiled - not judged), in %."""
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = killed + counts.get("survived", 0)
    return None if judged == 0 else 100.0 * killed / judged


class _Progress:
    def __init__(self, total: int, emit: Callable[[str], None]) -> None:
        self.total = total
        self.done = 0
        self.emit = emit
        self.counts: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def step(self, mutant: SystematicMutant, status: str, seconds: float, cached: bool) -> None:
        with self.lock:
            self.done += 1
            self.counts[status] = self.counts.get(status, 0) + 1
            if cached:
                self.counts["_cached"] = self.counts.get("_cached", 0) + 1
            elapsed = time.monotonic() - self.t0
            ran = max(1, self.done - self.counts.get("_cached", 0))
            eta = (self.total - self.done) * elapsed / ran
            killed = self.counts.get("killed", 0) + self.counts.get("timeout", 0)
            self.emit(
                f"[{self.done}/{self.total}] {status:<12} {seconds:5.1f} s{' (cached)' if cached else ''}  "
                f"{mutant.id}  | killed {killed}, survived {self.counts.get('survived', 0)}, "
                f"ETA {eta / 60:.0f} min"
            )


def run_systematic(
    tree: Path,
    *,
    version: str,
    bindir: Path | None = None,
    workers: int = 2,
    only: Iterable[str] | None = None,
    sample: int | None = None,
    seed: int = 1,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    equivalents: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the systematic mutants of ``tree``'s ``read_stream.c``; the verdicts and counts.

    ``only`` restricts to these stable ids (or keys); ``sample`` to that many mutants chosen at
    random with ``seed`` (a first look at costs). ``bindir`` is the build to start (default:
    the embedded server). ``progress`` receives one line per step (default: stderr).
    """
    from ..servers._cluster import embedded_bindir
    from ._cbuild import CBuildUnavailable
    from .probe_build import build_probe
    from .traced_copy import TracedCopyError

    emit = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    t_start = time.monotonic()
    original = (Path(tree) / READ_STREAM_C).read_text()
    digest = hashlib.sha256(original.encode()).hexdigest()[:16]
    mutants = generate_mutants(original)
    generated = list(mutants)
    if only is not None:
        wanted = set(only)
        mutants = [m for m in mutants if m.id in wanted or m.key in wanted]
        missing = wanted - {m.id for m in mutants} - {m.key for m in mutants}
        if missing:
            raise ValueError(f"no systematic mutant {sorted(missing)[0]!r} in this read_stream.c")
    if sample is not None and sample < len(mutants):
        mutants = sorted(random.Random(seed).sample(mutants, sample), key=lambda m: m.start)
    equivalents = load_equivalents(version) if equivalents is None else equivalents
    root = (cache_dir or source_cache_dir().parent / "systematic") / f"{version}-{digest}"
    (root / "results").mkdir(parents=True, exist_ok=True)
    suite_hash, module_hashes = _suite_hashes()
    real_bindir = Path(bindir) if bindir is not None else Path(embedded_bindir())
    common = [f"--readstream-seed={seed}", "-p", "hypothesis", "--hypothesis-profile=ci"]
    if bindir is not None:
        common.append(f"--readstream-pg-bindir={bindir}")

    # 1. coverage and reference run (the instrumented, unmutated copy), cached per suite.
    ref_file = root / f"reference-{suite_hash}.json"
    if use_cache and ref_file.is_file():
        ref = json.loads(ref_file.read_text())
        emit(f"reference: cached ({ref['result']['passed']} passed, {len(ref['hits'])} statements ran)")
    else:
        cov_dir = Path(tempfile.mkdtemp(prefix="readstream-sitecov-"))
        cov_dir.chmod(0o1777)
        inst = instrument(original, cov_dir)
        ref_tree = mirror_tree(Path(tree), root / "trees" / f"reference-{os.getpid()}", inst.text)
        emit("reference: building the instrumented copy, running the stream-level suite ...")
        try:
            build_probe(real_bindir, traced_source=ref_tree / READ_STREAM_C)
        except (CBuildUnavailable, TracedCopyError) as err:
            raise RuntimeError(f"the instrumented unmutated copy does not build: {err}") from err
        times = root / f"times-{os.getpid()}.json"
        deselect = " and ".join(f"not {name[:-3]}" for name in _SCAN_TESTS)
        run = _run_suite(
            [f"--readstream-pg-source={ref_tree}", *common, "-k", deselect, "-n", str(workers)],
            order=None,
            times_out=times,
            timeout_s=3600,
        )
        hits = read_hits(cov_dir)
        shutil.rmtree(cov_dir, ignore_errors=True)
        shutil.rmtree(ref_tree, ignore_errors=True)
        result = _as_result(run)
        ref = {
            "result": result,
            "seconds": round(run.seconds, 1),
            "times": json.loads(times.read_text()) if times.is_file() else {},
            "hits": sorted(inst.statements[k] for k in hits if k < len(inst.statements)),
            "statements": len(inst.statements),
            "tail": run.tail
            if (result["failed"] or result["harness_errors"] or not result["passed"])
            else "",
        }
        times.unlink(missing_ok=True)
        clean = not result["failed"] and not result["harness_errors"] and result["passed"] > 0
        if clean:
            ref_file.write_text(json.dumps(ref))
        emit(
            f"reference: {result['passed']} passed, {len(result['failed'])} failed, "
            f"{len(result['harness_errors'])} harness errors in {run.seconds:.0f} s; "
            f"{len(ref['hits'])} of {ref['statements']} statements ran"
        )
    ref_result = ref["result"]
    ref_clean = not ref_result["failed"] and not ref_result["harness_errors"] and ref_result["passed"] > 0
    reached_stmts = {tuple(r) for r in ref["hits"]}
    durations: dict[str, float] = ref["times"]
    serial = sum(durations.get(t, 0.0) for t in ref_result["passed_tests"])
    timeout_s = max(300.0, 4 * serial + 120)

    kills: dict[str, int] = {}
    kills_lock = threading.Lock()

    def order() -> list[str]:
        with kills_lock:
            k = dict(kills)
        return sorted(ref_result["passed_tests"], key=lambda t: (-k.get(t, 0), durations.get(t, 0.0), t))

    verdicts: dict[str, dict[str, Any]] = {}
    todo: list[SystematicMutant] = []
    for m in mutants:
        if m.statement not in reached_stmts:
            verdicts[m.id] = {"status": "not reached", "seconds": 0.0}
        else:
            todo.append(m)
    bar = _Progress(len(todo), emit)
    emit(
        f"{len(generated)} mutants generated, {len(mutants)} selected, {len(mutants) - len(todo)} not reached, "
        f"{len(todo)} to judge ({workers} at a time, run limit {timeout_s:.0f} s)"
    )
    if not ref_clean:
        emit("reference run not clean: no mutant is judged")
        todo = []
    free_slots = list(range(workers))
    slots_lock = threading.Lock()

    def cached(m: SystematicMutant, mhash: str) -> dict[str, Any] | None:
        path = root / "results" / f"{m.key}.json"
        if not use_cache or not path.is_file():
            return None
        entry: dict[str, Any] = json.loads(path.read_text())
        if entry.get("source") != mhash or entry.get("schema") != _SCHEMA:
            return None
        if entry["status"] in ("killed",):
            # A kill stands while the killing test's module is unchanged.
            module = entry["killing_tests"][0].split("::", 1)[0]
            if entry.get("module_hash") == module_hashes.get(module):
                return entry
            return None
        if entry["status"] == "not compiled":
            return entry
        return entry if entry.get("suite") == suite_hash and entry["status"] != "not judged" else None

    def judge_one(m: SystematicMutant) -> None:
        text = m.apply(original)
        mhash = hashlib.sha256(text.encode()).hexdigest()[:16]
        hit = cached(m, mhash)
        if hit is not None:
            verdicts[m.id] = hit
            _finish(m, hit, cached_hit=True)
            return
        with slots_lock:
            slot = free_slots.pop()
        t0 = time.monotonic()
        try:
            mtree = mirror_tree(Path(tree), root / "trees" / f"worker-{os.getpid()}-{slot}", text)
            try:
                build_probe(real_bindir, traced_source=mtree / READ_STREAM_C)
            except (CBuildUnavailable, TracedCopyError) as err:
                entry: dict[str, Any] = {"status": "not compiled", "note": str(err).splitlines()[0][:300]}
            else:
                run = _run_suite(
                    [f"--readstream-pg-source={mtree}", *common, "-x", "-p", "no:xdist"],
                    order=order(),
                    times_out=None,
                    timeout_s=timeout_s,
                )
                res = _as_result(run)
                verdict = judge(res, ref_result)
                if verdict["killed"]:
                    entry = {"status": "killed", "killing_tests": verdict["killing_tests"]}
                    module = verdict["killing_tests"][0].split("::", 1)[0]
                    entry["module_hash"] = module_hashes.get(module)
                    with kills_lock:
                        for t in verdict["killing_tests"]:
                            kills[t] = kills.get(t, 0) + 1
                elif run.timed_out:
                    entry = {"status": "timeout", "note": f"no end within {timeout_s:.0f} s"}
                elif res["harness_errors"] or run.exit_code not in (0, 1) or not run.outcomes:
                    first = next(iter(run.harness_lines.values()), "") or run.tail.strip().splitlines()[-1:]
                    entry = {"status": "not judged", "note": str(first)[:300]}
                else:
                    entry = {"status": "survived", "passed": res["passed"]}
        finally:
            with slots_lock:
                free_slots.append(slot)
        entry.update(
            {
                "id": m.id,
                "schema": _SCHEMA,
                "source": mhash,
                "suite": suite_hash,
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
        (root / "results" / f"{m.key}.json").write_text(json.dumps(entry, indent=1))
        verdicts[m.id] = entry
        _finish(m, entry, cached_hit=False)

    def _finish(m: SystematicMutant, entry: dict[str, Any], *, cached_hit: bool) -> None:
        if entry["status"] == "survived" and m.id in equivalents:
            entry = {**entry, "status": "equivalent", "why": equivalents[m.id]}
            verdicts[m.id] = entry
        bar.step(m, entry["status"], float(entry.get("seconds", 0.0)), cached_hit)

    # Cached verdicts first (they cost nothing), and the kills they record order the tests.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(judge_one, todo))

    for m in mutants:
        v = verdicts[m.id]
        if v["status"] == "killed" and m.id in equivalents:
            v["review_error"] = "listed as equivalent, but killed: the review is wrong"
    stale = sorted(set(equivalents) - {m.id for m in generated})
    return _report(
        generated, mutants, verdicts, ref, version, digest, time.monotonic() - t_start, stale, timeout_s
    )


def _report(
    generated: list[SystematicMutant],
    mutants: list[SystematicMutant],
    verdicts: dict[str, dict[str, Any]],
    ref: dict[str, Any],
    version: str,
    digest: str,
    seconds: float,
    stale: list[str],
    timeout_s: float,
) -> dict[str, Any]:
    by_function: dict[str, dict[str, int]] = {}
    by_operator: dict[str, dict[str, int]] = {}
    for m in generated:
        by_operator.setdefault(m.operator, {"generated": 0}).__setitem__(
            "generated", by_operator[m.operator]["generated"] + 1
        )
    totals: dict[str, int] = {}
    for m in mutants:
        status = verdicts[m.id]["status"]
        for table, name in ((by_function, m.function), (by_operator, m.operator)):
            row = table.setdefault(name, {})
            row[status] = row.get(status, 0) + 1
            row["mutants"] = row.get("mutants", 0) + 1
        totals[status] = totals.get(status, 0) + 1
    totals["mutants"] = len(mutants)
    return {
        "schema": _SCHEMA,
        "version": version,
        "read_stream_c_sha256": digest,
        "generated": len(generated),
        "selected": len(mutants),
        "seconds": round(seconds, 1),
        "run_limit_seconds": round(timeout_s),
        "reference": {
            "passed": ref["result"]["passed"],
            "failed": ref["result"]["failed"],
            "harness_errors": ref["result"]["harness_errors"],
            "seconds": ref["seconds"],
            "statements": ref["statements"],
            "statements_run": len(ref["hits"]),
        },
        "totals": totals,
        "score_percent": score(totals),
        "by_function": by_function,
        "by_operator": by_operator,
        "stale_equivalents": stale,
        "mutants": {
            m.id: {"function": m.function, "operator": m.operator, "key": m.key, **verdicts[m.id]}
            for m in mutants
        },
    }


# ------------------------------------------------------------------------------ the table
def format_systematic(result: dict[str, Any]) -> str:
    """The terminal report: a table per function and per operator, then every survivor and
    equivalent by function with its reason, then the score and the time."""
    cols = ("mutants", *STATUSES)
    heads = (
        "mutants",
        "killed",
        "timeout",
        "survived",
        "equiv.",
        "not reached",
        "not compiled",
        "not judged",
    )

    def table(title: str, rows: dict[str, dict[str, int]], extra: dict[str, int] | None = None) -> list[str]:
        width = max([len(title), 5, *(len(n) for n in rows)])
        head = f"{title:<{width}}  " + "  ".join(f"{h:>{max(len(h), 5)}}" for h in heads) + "   score"
        out = [head, "-" * len(head)]
        for name in sorted(rows, key=lambda n: (-rows[n].get("mutants", 0), n)):
            r = rows[name]
            s = score(r)
            cells = "  ".join(f"{r.get(c, 0):>{max(len(h), 5)}}" for c, h in zip(cols, heads))
            gen = (
                f"  (of {extra[name]})" if extra and name in extra and extra[name] != r.get("mutants") else ""
            )
            out.append(f"{name:<{width}}  {cells}  {'-' if s is None else f'{s:5.1f} %'}{gen}")
        return out

    lines = table("function", result["by_function"])
    t = result["totals"]
    lines.append("-" * len(lines[0]))
    cells = "  ".join(f"{t.get(c, 0):>{max(len(h), 5)}}" for c, h in zip(cols, heads))
    s = result["score_percent"]
    lines.append(
        f"{'total':<{lines[0].index('mutants') - 2}}  {cells}  {'-' if s is None else f'{s:5.1f} %'}"
    )
    lines.append("")
    ops = {k: v for k, v in result["by_operator"].items() if v.get("mutants")}
    lines += table("operator", ops, {k: v["generated"] for k, v in result["by_operator"].items()})
    lines.append("  " + "; ".join(f"{k} {v}" for k, v in OPERATORS.items()))
    for status, title in (("survived", "survivors (suite gaps)"), ("equivalent", "judged equivalent")):
        rows = [(mid, v) for mid, v in result["mutants"].items() if v["status"] == status]
        if not rows:
            continue
        lines += ["", f"{title}: {len(rows)}"]
        for fn in sorted({v["function"] for _m, v in rows}):
            lines.append(f"  {fn}:")
            for mid, v in rows:
                if v["function"] == fn:
                    lines.append(f"    {mid}" + (f"  -- {v['why']}" if v.get("why") else ""))
    others = [
        (mid, v)
        for mid, v in result["mutants"].items()
        if v["status"] in ("timeout", "not compiled", "not judged") or v.get("review_error")
    ]
    if others:
        lines += ["", "timeouts, not compiled, not judged, review errors:"]
        for mid, v in others:
            lines.append(f"  {v['status']:<12} {mid}  {v.get('review_error') or v.get('note', '')}")
    for mid in result["stale_equivalents"]:
        lines.append(f"stale equivalent (no such mutant in this file): {mid}")
    ref = result["reference"]
    lines += [
        "",
        f"reference (instrumented unmutated copy): {ref['passed']} passed, {len(ref['failed'])} failed, "
        f"{len(ref['harness_errors'])} harness errors, {ref['seconds']:.0f} s; "
        f"{ref['statements_run']} of {ref['statements']} statements ran",
        f"score: {'-' if s is None else f'{s:.1f} %'} of the non-equivalent reached mutants killed "
        f"(killed {t.get('killed', 0)} + timeout {t.get('timeout', 0)} of "
        f"{t.get('killed', 0) + t.get('timeout', 0) + t.get('survived', 0)}); "
        f"{result['generated']} generated, {result['selected']} selected",
        f"time: {result['seconds'] / 60:.1f} min",
    ]
    return "\n".join(lines)
