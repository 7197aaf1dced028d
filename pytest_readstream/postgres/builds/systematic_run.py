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

import contextlib
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
STATUSES = (
    "killed",
    "timeout",
    "survived",
    "equivalent",
    "same code",
    "not reached",
    "not compiled",
    "not judged",
    "unfinished",
)
_SCHEMA = 1
_SCAN_TESTS = ("test_scans.py", "test_scan_facts.py", "test_scan_faults.py")
# Every this many mutants a worker runs the unmutated copy on the tests that kill most.
_CONTROL_EVERY = 20
_CONTROL_TESTS = 8
# The first pass runs a mutant with this many tests (most kills first); the rest come later.
_FIRST_PASS = 8


# ------------------------------------------------------------------------------ reviewed equivalents
def equivalents_path(version: str) -> Path:
    """The reviewed equivalent mutants of PostgreSQL ``version``'s ``read_stream.c`` (by major)."""
    return Path(__file__).with_name(f"systematic_equivalents_{version.split('.')[0]}.txt")


def gaps_path(version: str) -> Path:
    """The reviewed survivors that are gaps of the suite (``ID | what the suite does not check``)."""
    return Path(__file__).with_name(f"systematic_gaps_{version.split('.')[0]}.txt")


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
    # The harness's side of the probe is part of what a survivor survived.
    here = Path(__file__).resolve().parent
    for p in [*sorted((here / "probe").iterdir()), here.parent / "impl" / "remote_stream.py"]:
        whole.update(p.name.encode() + b"\0" + p.read_bytes())
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


class _WorkerDied(RuntimeError):
    """The worker's pytest process ended (or never became ready)."""


class _Worker:
    """A long-lived ``pytest`` process running jobs (:mod:`._systematic_worker`) on ``tree``."""

    def __init__(self, tree: Path, args: list[str], log: Path, startup_s: float = 900.0) -> None:
        self.tree = tree
        self.args = args
        self.log = log
        self.startup_s = startup_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.current = ""
        # The next job restarts the server (the stream sessions are closed for every job).
        self.fresh_next = False
        self._start()

    def _start(self) -> None:
        jobs_r, jobs_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(
            os.environ,
            READSTREAM_SYSTEMATIC_JOBS_FD=str(jobs_r),
            READSTREAM_SYSTEMATIC_RESULTS_FD=str(res_w),
            READSTREAM_NO_SHRINK="1",
        )
        env.pop("READSTREAM_IMPL", None)
        self.cwd = tempfile.mkdtemp(prefix="readstream-sysworker-")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "readstream_conformance",
            "--readstream-impl=postgres",
            f"--readstream-pg-source={self.tree}",
            "-p",
            "pytest_readstream.postgres.builds._systematic_worker",
            "-p",
            "no:cacheprovider",
            "-q",
            *self.args,
        ]
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, pass_fds=(jobs_r, res_w)
            )
        os.close(jobs_r)
        os.close(res_w)
        self.jobs = os.fdopen(jobs_w, "w", buffering=1)
        self.results = res_r
        self.buf = b""
        ready = self._read(self.startup_s)
        if ready is None or not ready.get("ready"):
            self._kill()
            raise _WorkerDied(f"the worker did not become ready (log: {self.log})")

    def _read(self, timeout: float, limit: Callable[[str], float] | None = None) -> dict[str, Any] | None:
        """The next reply line; ``None`` after ``timeout`` s without one, or, with ``limit``,
        after ``limit(test)`` s in one test (each ``{"start": test}`` line restarts the clock)."""
        import select

        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                ready, _, _ = select.select([self.results], [], [], min(left, 5.0))
                if ready:
                    chunk = os.read(self.results, 1 << 16)
                    if not chunk:
                        code = self.proc.wait() if self.proc else "?"
                        raise _WorkerDied(f"the worker ended (exit code {code})")
                    self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            reply: dict[str, Any] = json.loads(line)
            if "start" in reply:
                self.current = str(reply["start"])
                if limit is not None:
                    deadline = time.monotonic() + limit(self.current)
                continue
            return reply

    def run(
        self, job: dict[str, Any], timeout: float, limit: Callable[[str], float] | None = None
    ) -> dict[str, Any] | None:
        """The job's reply, or ``None`` when it did not end in time (``timeout`` until its first
        test starts, then ``limit(test)`` per test; the worker is then killed and started
        again). Raises :class:`_WorkerDied` (after a restart) when it died."""
        self.current = ""
        try:
            self.jobs.write(json.dumps(job) + "\n")
            reply = self._read(timeout, limit)
        except (_WorkerDied, BrokenPipeError) as err:
            self._kill()
            self._start()
            raise _WorkerDied(str(err)) from err
        if reply is None:
            self._kill()
            self._start()
        return reply

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_tree(self.proc.pid)
        if self.proc is not None:
            self.proc.wait()
        for closer in (self.jobs.close, lambda: os.close(self.results)):
            try:
                closer()
            except OSError:
                pass
        shutil.rmtree(self.cwd, ignore_errors=True)

    def restart(self) -> None:
        self._kill()
        self._start()

    def stop(self) -> None:
        try:
            self.jobs.write(json.dumps({"stop": True}) + "\n")
            self.jobs.flush()
            assert self.proc is not None
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        self._kill()


def _deselect_scans() -> str:
    return " and ".join(f"not {name[:-3]}" for name in _SCAN_TESTS)


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def worker_args_for(common: list[str]) -> list[str]:
    """The pytest arguments of a long-lived worker (the stream-level tests, no xdist)."""
    return [*common, "-k", _deselect_scans(), "-p", "no:xdist"]


def _per_test_coverage(
    root: Path,
    suite_hash: str,
    tree: Path,
    original: str,
    tests: list[str],
    workers: int,
    args: list[str],
    bindir: Path,
    emit: Callable[[str], None],
    use_cache: bool,
    timeout_s: float,
    test_limit: Callable[[str], float],
) -> dict[str, list[list[int]]]:
    """Which statements (byte ranges) each test runs: the instrumented copy in ``workers``
    long-lived workers, each running a share of ``tests`` serially and reading the markers
    after each test. Cached per suite; ``{}`` when it could not be had (every test then runs
    for every mutant)."""
    from .probe_build import build_probe

    cache = root / f"per-test-{suite_hash}.json"
    if use_cache and cache.is_file():
        cached: dict[str, list[list[int]]] = json.loads(cache.read_text())
        emit(f"per-test coverage: cached ({len(cached)} tests)")
        return cached
    emit(f"per-test coverage: {len(tests)} tests in {workers} workers ...")
    t0 = time.monotonic()
    out: dict[str, list[list[int]]] = {}
    lock = threading.Lock()
    failures: list[str] = []

    def share(slot: int) -> None:
        cov_dir = Path(tempfile.mkdtemp(prefix="readstream-sitecov-"))
        cov_dir.chmod(0o1777)
        inst = instrument(original, cov_dir)
        wtree = mirror_tree(tree, root / "trees" / f"coverage-{os.getpid()}-{slot}", inst.text)
        worker = None
        try:
            build_probe(bindir, traced_source=wtree / READ_STREAM_C)
            worker = _Worker(wtree, args, root / f"coverage-{slot}.log")
            mine = tests[slot::workers]
            reply = worker.run(
                {"id": "coverage", "tree": str(wtree), "order": mine, "coverage": str(cov_dir)},
                timeout_s,
                test_limit,
            )
            if reply is None:
                raise _WorkerDied(f"{worker.current} did not end")
            with lock:
                for test, marks in reply["per_test"].items():
                    out[test] = [list(inst.statements[k]) for k in marks if k < len(inst.statements)]
        except Exception as err:  # the coverage only narrows the tests: go on without it
            failures.append(f"{type(err).__name__}: {err}")
        finally:
            if worker is not None:
                worker.stop()
            shutil.rmtree(cov_dir, ignore_errors=True)
            shutil.rmtree(wtree, ignore_errors=True)

    threads = [threading.Thread(target=share, args=(i,), daemon=True) for i in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        emit(f"per-test coverage failed ({failures[0]}): every test runs for every mutant")
        return {}
    cache.write_text(json.dumps(out))
    emit(f"per-test coverage: {len(out)} tests in {time.monotonic() - t0:.0f} s")
    return out


# ------------------------------------------------------------------------------ the score
class _KillTally:
    """Which tests killed which mutants so far, counted per statement, per function and overall.

    Mutants of one statement (or one function) are mostly killed by the same tests: the advice
    flags of a start by the one test that compares them, say. So a mutant's tests go first by
    kills at its own statement, then in its function, then anywhere: once one mutant of a
    statement is killed by a test deep in the order, its neighbours meet that test first."""

    def __init__(self) -> None:
        self._total: dict[str, int] = {}
        self._by_function: dict[str, dict[str, int]] = {}
        self._by_statement: dict[tuple[int, int], dict[str, int]] = {}

    def add(self, m: SystematicMutant, tests: Iterable[str]) -> None:
        for t in tests:
            for tally in (
                self._total,
                self._by_function.setdefault(m.function, {}),
                self._by_statement.setdefault(m.statement, {}),
            ):
                tally[t] = tally.get(t, 0) + 1

    def ranking(self, m: SystematicMutant | None) -> Callable[[str], tuple[int, int, int]]:
        """A sort key (smaller first) over test ids for ``m``'s run; a snapshot of the counts."""
        total = dict(self._total)
        here = dict(self._by_statement.get(m.statement, {})) if m is not None else {}
        near = dict(self._by_function.get(m.function, {})) if m is not None else {}
        return lambda t: (-here.get(t, 0), -near.get(t, 0), -total.get(t, 0))


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
        self.ran_seconds = 0.0
        self.lock = threading.Lock()

    def undo(self, status: str) -> None:
        """A verdict taken back (to be judged again)."""
        with self.lock:
            self.done -= 1
            self.counts[status] = self.counts.get(status, 0) - 1

    def step(self, mutant: SystematicMutant, status: str, seconds: float, cached: bool) -> None:
        with self.lock:
            self.done += 1
            self.counts[status] = self.counts.get(status, 0) + 1
            if cached:
                self.counts["_cached"] = self.counts.get("_cached", 0) + 1
            else:
                self.ran_seconds = time.monotonic() - self.t0
            ran = self.done - self.counts.get("_cached", 0)
            eta = (self.total - self.done) * self.ran_seconds / ran if ran else 0.0
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
    time_limit: float | None = None,
    report_only: bool = False,
) -> dict[str, Any]:
    """Run the systematic mutants of ``tree``'s ``read_stream.c``; the verdicts and counts.

    ``only`` restricts to these stable ids (or keys); ``sample`` to that many mutants chosen at
    random with ``seed`` (a first look at costs). ``bindir`` is the build to start (default:
    the embedded server). ``progress`` receives one line per step (default: stderr). After
    ``time_limit`` seconds no full run starts: the mutants the first pass did not kill and that
    wait for one are *unfinished* (no verdict). ``report_only`` judges nothing: the report of the
    cached verdicts (with the reviews as they are now), the others unfinished.
    """
    from ..servers._cluster import embedded_bindir
    from ._cbuild import CBuildUnavailable
    from .probe_build import build_probe
    from .traced_copy import WRAPPED_CALLS, TracedCopyError

    emit = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    t_start = time.monotonic()
    original = (Path(tree) / READ_STREAM_C).read_text()
    digest = hashlib.sha256(original.encode()).hexdigest()[:16]
    mutants = generate_mutants(original, keep_calls=frozenset(WRAPPED_CALLS))
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
    gaps = load_equivalents(version, gaps_path(version))
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
    elif report_only:
        raise ValueError(
            "--report-only: no cached reference run for this suite and read_stream.c; run without it first"
        )
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
        run = _run_suite(
            [f"--readstream-pg-source={ref_tree}", *common, "-k", _deselect_scans(), "-n", str(workers)],
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
    # Until a job's first test starts (a server restart, the probe's load): generous; then each
    # test gets a minute plus five times what it took in the reference run.
    timeout_s = 300.0

    def test_limit(test: str) -> float:
        return 60.0 + 5.0 * durations.get(test, 1.0)

    per_test = (
        _per_test_coverage(
            root,
            suite_hash,
            Path(tree),
            original,
            ref_result["passed_tests"],
            workers,
            worker_args_for(common),
            real_bindir,
            emit,
            use_cache,
            timeout_s,
            test_limit,
        )
        if ref_clean and not report_only
        else {}
    )
    # statement -> the tests that ran it (a statement no test ran here, though the reference ran
    # it, gets every test)
    tests_of: dict[tuple[int, int], set[str]] = {}
    for test, stmts in per_test.items():
        for st in stmts:
            tests_of.setdefault(tuple(st), set()).add(test)  # type: ignore[arg-type]

    # The unmutated, uninstrumented probe: a mutant compiling to the same bytes changes nothing.
    baseline = ""
    if not report_only:
        base_tree = mirror_tree(Path(tree), root / "trees" / f"baseline-{os.getpid()}", original)
        baseline = _digest(build_probe(real_bindir, traced_source=base_tree / READ_STREAM_C).library)
        shutil.rmtree(base_tree, ignore_errors=True)

    kills = _KillTally()
    kills_lock = threading.Lock()

    def order(m: SystematicMutant | None = None) -> list[str]:
        """The tests for ``m`` (those that ran its statement): first those that killed mutants of
        the same statement, then of the same function, then anywhere, then quickest."""
        with kills_lock:
            rank = kills.ranking(m)
        tests = ref_result["passed_tests"]
        if m is not None and tests_of.get(m.statement):
            tests = [t for t in tests if t in tests_of[m.statement]]
        return sorted(tests, key=lambda t: (*rank(t), durations.get(t, 0.0), t))

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
        f"{len(todo)} to judge ({workers} at a time; each test limited to 60 s + 5 x its reference time; "
        f"the suite's serial time {serial:.0f} s)"
    )
    if not ref_clean:
        emit(
            f"reference run not clean ({', '.join([*ref_result['failed'], *ref_result['harness_errors']][:3])}): "
            "no mutant is judged"
        )
        for m in todo:
            verdicts[m.id] = {"status": "not judged", "note": "the unmutated copy failed", "seconds": 0.0}
        todo = []
    worker_args = worker_args_for(common)
    queue: list[tuple[SystematicMutant, bool]] = [(m, False) for m in todo]
    deadline = None if time_limit is None else t_start + time_limit
    deferred: list[tuple[int, SystematicMutant]] = []
    first_in_flight = [0]
    queue_lock = threading.Lock()

    def cached(m: SystematicMutant, mhash: str) -> dict[str, Any] | None:
        path = root / "results" / f"{m.key}.json"
        if not use_cache or not path.is_file():
            return None
        entry: dict[str, Any] = json.loads(path.read_text())
        if entry.get("source") != mhash or entry.get("schema") != _SCHEMA:
            return None
        if entry["status"] == "killed":
            # A kill stands while the killing test's module is unchanged.
            module = entry["killing_tests"][0].split("::", 1)[0]
            return entry if entry.get("module_hash") == module_hashes.get(module) else None
        if entry["status"] in ("not compiled", "same code"):
            return entry
        return entry if entry.get("suite") == suite_hash and entry["status"] != "not judged" else None

    def judge_one(m: SystematicMutant, worker: _Worker, full: bool) -> bool:
        """Judge ``m`` (from the cache, or in ``worker``); whether it ran in the worker.

        The first pass (``full`` false) runs only the ``_FIRST_PASS`` tests that killed most so
        far: a mutant they do not kill goes back to the end of the queue for a full run, so
        that every mutant gets its quick chance before any survivor's long run."""
        text = m.apply(original)
        mhash = hashlib.sha256(text.encode()).hexdigest()[:16]
        hit = cached(m, mhash)
        if hit is not None and hit["status"] == "first pass":
            if not full:
                with queue_lock:
                    deferred.append((int(hit["tests"]), m))
                return False
            hit = None  # its full run is due now
        if hit is not None:
            verdicts[m.id] = hit
            with kills_lock:
                kills.add(m, hit.get("killing_tests", ()) if hit["status"] == "killed" else ())
            _finish(m, hit, cached_hit=True)
            return False
        t0 = time.monotonic()
        mirror_tree(Path(tree), worker.tree, text)
        try:
            built = build_probe(real_bindir, traced_source=worker.tree / READ_STREAM_C)
        except (CBuildUnavailable, TracedCopyError) as err:
            entry: dict[str, Any] = {"status": "not compiled", "note": str(err).splitlines()[0][:300]}
        else:
            if _digest(built.library) == baseline:
                # Trivially compiler-equivalent: the same machine code as the unmutated file.
                entry = {
                    "status": "same code",
                    "note": "compiles to the unmutated file's shared object, byte for byte",
                }
            else:
                tests = order(m)
                partial = not full and len(tests) > _FIRST_PASS
                entry = _judge_in(worker, m, tests[:_FIRST_PASS] if partial else tests, timeout_s)
                if entry["status"] == "not judged" and entry.get("retry"):
                    # The worker itself died: once more in a fresh one.
                    entry = _judge_in(worker, m, tests[:_FIRST_PASS] if partial else tests, timeout_s)
                if partial and entry["status"] == "survived":
                    with queue_lock:
                        deferred.append((len(tests), m))
                    mark = {"status": "first pass", "tests": len(tests), "id": m.id, "schema": _SCHEMA}
                    mark.update({"source": mhash, "suite": suite_hash})
                    (root / "results" / f"{m.key}.json").write_text(json.dumps(mark, indent=1))
                    emit(
                        f"[first pass] {m.id}: passed the {_FIRST_PASS} most-killing tests of {len(tests)}; "
                        "the rest later"
                    )
                    return True
            entry.pop("retry", None)
            if entry["status"] == "killed":
                module = entry["killing_tests"][0].split("::", 1)[0]
                entry["module_hash"] = module_hashes.get(module)
                with kills_lock:
                    kills.add(m, entry["killing_tests"])
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
        return entry["status"] not in ("not compiled", "same code")

    def _judge_in(worker: _Worker, m: SystematicMutant, tests: list[str], limit: float) -> dict[str, Any]:
        try:
            job = {"id": m.id, "tree": str(worker.tree), "order": tests, "restart": worker.fresh_next}
            worker.fresh_next = False
            reply = worker.run(job, limit, test_limit)
        except _WorkerDied as err:
            return {"status": "not judged", "note": str(err)[:300], "retry": True}
        if reply is None:
            where = worker.current or "starting the server"
            return {
                "status": "timeout",
                "note": f"{where} did not end within {test_limit(where) if worker.current else limit:.0f} s "
                "(the worker was killed)",
                "killing_tests": [worker.current] if worker.current else [],
            }
        res = _as_result(_Run(reply["outcomes"], reply["harness"], 1, reply["seconds"], False, ""))
        verdict = judge(res, ref_result)
        if verdict["killed"]:
            return {
                "status": "killed",
                "killing_tests": verdict["killing_tests"],
                "test_seconds": reply["seconds"],
            }
        if res["harness_errors"]:
            return {"status": "not judged", "note": next(iter(reply["harness"].values()), "")[:300]}
        if res["failed"]:
            return {
                "status": "not judged",
                "note": f"failed only tests the reference did not pass: {res['failed'][:3]}",
            }
        return {"status": "survived", "passed": res["passed"], "test_seconds": reply["seconds"]}

    def _review_unfinished(ident: str) -> None:
        """An unfinished mutant's review, when it has one (shown beside it; no verdict)."""
        if ident in equivalents:
            verdicts[ident]["why"] = f"equivalent by review: {equivalents[ident]}"
        elif ident in gaps:
            verdicts[ident]["why"] = f"gap: {gaps[ident]}"

    def _finish(m: SystematicMutant, entry: dict[str, Any], *, cached_hit: bool) -> None:
        if entry["status"] == "survived" and m.id in equivalents:
            entry = {**entry, "status": "equivalent", "why": equivalents[m.id]}
            verdicts[m.id] = entry
        elif entry["status"] in ("survived", "unfinished") and m.id in gaps:
            entry = {**entry, "why": f"gap: {gaps[m.id]}"}
            verdicts[m.id] = entry
        bar.step(m, entry["status"], float(entry.get("seconds", 0.0)), cached_hit)

    def control(worker: _Worker) -> str | None:
        """The unmutated copy in this worker, on the tests that kill most: why it failed, or None."""
        mirror_tree(Path(tree), worker.tree, original)
        try:
            reply = worker.run(
                {"id": "control", "tree": str(worker.tree), "order": order()[:_CONTROL_TESTS]},
                timeout_s,
                test_limit,
            )
        except _WorkerDied as err:
            return str(err)
        if reply is None:
            return "the unmutated copy did not finish"
        bad = {t: v for t, v in reply["outcomes"].items() if v in ("failed", "harness-error")}
        if not bad:
            return None
        test = next(iter(bad))
        return f"{test} {bad[test]}: {reply.get('messages', {}).get(test, '')[:200]}"

    def drain(slot: int) -> None:
        worker: _Worker | None = None
        since: list[SystematicMutant] = []
        rejudged: set[str] = set()
        try:
            while True:
                with queue_lock:
                    if queue:
                        m, full = queue.pop(0)
                    elif deferred:
                        # The full runs, those with the fewest tests first (most verdicts per minute).
                        deferred.sort(key=lambda nm: (nm[0], nm[1].start))
                        m, full = deferred.pop(0)[1], True
                    else:
                        m, full = None, False
                    if m is not None and not full:
                        first_in_flight[0] += 1
                if m is None and first_in_flight[0] and not since:
                    # Another worker's first pass may still send a mutant to the full runs.
                    time.sleep(1.0)
                    continue
                if m is not None and full and deadline is not None and time.monotonic() > deadline:
                    # Out of time for full runs: no verdict (the first pass killed nothing).
                    verdicts[m.id] = {
                        "status": "unfinished",
                        "note": f"passed the {_FIRST_PASS} most-killing tests; the time limit came before the rest",
                        "seconds": 0.0,
                    }
                    _review_unfinished(m.id)
                    bar.step(m, "unfinished", 0.0, False)
                    continue
                if m is None and not (since and worker is not None):
                    return  # nothing left, and no judged mutant awaits a last control
                if worker is None:
                    wtree = mirror_tree(Path(tree), root / "trees" / f"worker-{os.getpid()}-{slot}", original)
                    worker = _Worker(wtree, worker_args, root / f"worker-{slot}.log")
                try:
                    if m is not None and judge_one(m, worker, full):
                        since.append(m)
                except Exception as err:
                    # A fault of the harness, not of the mutant: no verdict, said as one (and
                    # not cached), and the worker goes on with the next mutant.
                    assert m is not None
                    note = f"harness error: {type(err).__name__}: {err}".splitlines()[0][:300]
                    emit(f"{m.id}: not judged ({note})")
                    entry = {"status": "not judged", "note": note, "seconds": 0.0}
                    verdicts[m.id] = entry
                    _finish(m, entry, cached_hit=False)
                finally:
                    if m is not None and not full:
                        with queue_lock:
                            first_in_flight[0] -= 1
                if since and (m is None or len(since) >= _CONTROL_EVERY):
                    why = control(worker)
                    # The server has run up to 20 mutants: the next one starts a fresh one.
                    worker.fresh_next = True
                    if why is not None:
                        # State left by a mutant (or the machine) failed the unmutated copy: the
                        # verdicts since the last good control are judged again in a fresh worker.
                        again = [x for x in since if x.id not in rejudged]
                        emit(f"control of worker {slot} FAILED ({why}); judging {len(again)} mutants again")
                        rejudged.update(x.id for x in again)
                        worker.restart()
                        with queue_lock:
                            queue[:0] = [(x, False) for x in again]
                        for x in again:
                            (root / "results" / f"{x.key}.json").unlink(missing_ok=True)
                            bar.undo(verdicts[x.id]["status"])
                    since = []
        finally:
            if worker is not None:
                worker.stop()

    done = threading.Event()

    def prebuild() -> None:
        """Compile the probes of the mutants ahead of the workers (into the build cache), so
        that a worker's mutant usually finds its probe built."""
        ptree = root / "trees" / f"prebuild-{os.getpid()}"
        for m, _full in list(queue):
            if done.is_set():
                return
            text = m.apply(original)
            if cached(m, hashlib.sha256(text.encode()).hexdigest()[:16]) is not None:
                continue
            mirror_tree(Path(tree), ptree, text)
            # A mutant that does not build is judged "not compiled" by the worker that takes it
            # (its own build fails again at once); compiling ahead only fills the cache.
            with contextlib.suppress(CBuildUnavailable, TracedCopyError):
                build_probe(real_bindir, traced_source=ptree / READ_STREAM_C)

    if report_only:
        # The verdicts in the cache, nothing judged: the others are unfinished.
        for m in list(todo):
            text = m.apply(original)
            hit = cached(m, hashlib.sha256(text.encode()).hexdigest()[:16])
            if hit is None or hit["status"] == "first pass":
                why = "passed the first pass; no full run yet" if hit else "no cached verdict yet"
                verdicts[m.id] = {"status": "unfinished", "note": why, "seconds": 0.0}
                _review_unfinished(m.id)
                bar.step(m, "unfinished", 0.0, True)
            else:
                verdicts[m.id] = hit
                _finish(m, hit, cached_hit=True)
        queue.clear()
    # Cached verdicts cost nothing; the kills they record order the tests of the others.
    builder = threading.Thread(target=prebuild, daemon=True)
    builder.start()
    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    builder.join()

    for m in mutants:
        # A mutant its worker never came back from (the thread itself failed) has no verdict.
        v = verdicts.setdefault(m.id, {"status": "not judged", "note": "its worker stopped", "seconds": 0.0})
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
def _not_final(totals: dict[str, int]) -> str:
    """`` (not final: N unfinished[, M not judged])`` when mutants are unfinished, else ``""``
    (a complete run's "not judged" are harness errors, listed apart, not a pending verdict)."""
    parts = [f"{totals[k]} {k}" for k in ("unfinished", "not judged") if totals.get(k)]
    return f" (not final: {', '.join(parts)})" if totals.get("unfinished") else ""


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
        "same code",
        "not reached",
        "not compiled",
        "not judged",
        "unfinished",
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
    for status, title in (
        ("survived", "survivors (suite gaps)"),
        ("unfinished", "unfinished (passed the first pass; no full run in the time limit)"),
        ("equivalent", "judged equivalent"),
    ):
        rows = [(mid, v) for mid, v in result["mutants"].items() if v["status"] == status]
        if not rows:
            continue
        lines += ["", f"{title}: {len(rows)}"]
        for fn in sorted({v["function"] for _m, v in rows}):
            lines.append(f"  {fn}:")
            for mid, v in rows:
                if v["function"] == fn:
                    why = v.get("why") or ("not reviewed" if status == "survived" else "")
                    lines.append(f"    {mid}" + (f"  -- {why}" if why else ""))
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
    not_final = _not_final(t)
    lines += [
        "",
        f"reference (instrumented unmutated copy): {ref['passed']} passed, {len(ref['failed'])} failed, "
        f"{len(ref['harness_errors'])} harness errors, {ref['seconds']:.0f} s; "
        f"{ref['statements_run']} of {ref['statements']} statements ran",
        # Without a verdict for every mutant the share is of those judged so far, and says so.
        f"score{not_final}: {'-' if s is None else f'{s:.1f} %'} of the non-equivalent reached "
        f"mutants {'judged so far ' if not_final else ''}killed "
        f"(killed {t.get('killed', 0)} + timeout {t.get('timeout', 0)} of "
        f"{t.get('killed', 0) + t.get('timeout', 0) + t.get('survived', 0)}); "
        f"{result['generated']} generated, {result['selected']} selected",
        f"time: {result['seconds'] / 60:.1f} min",
    ]
    return "\n".join(lines)
