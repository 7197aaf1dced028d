"""A review, start to end: prepare the patched copy, build what the plan needs, run both sides.

The phases, each announced on stderr with its elapsed time:

1. the patched copy (``inputs``) and the plan (``plan``);
2. the servers: the base's ``pg-build --source`` install (a no-op when built) and, in
   ``rebuild`` mode, the patched server (``rebuild``);
3. the conformance suite on each side (``python -m pytest --pyargs readstream_conformance
   --readstream-impl=postgres`` with the side's ``bin/`` and source, its JSON report kept);
4. ``readstream compare``'s scenarios (traced streams; in ``rebuild`` mode the SQL ones too);
5. the traced stream under each latency profile (``timing``).

The result is the JSON-ready dict :mod:`.report` renders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .inputs import (
    ReviewInputs,
    apply_patch,
    changed_files,
    check_patched_version,
    copy_changes,
    copy_tree,
    read_only_safe,
)
from .plan import ReviewPlan, decide

__all__ = ["ReviewOptions", "prepare", "review_cache_dir", "run_review", "run_side_suite"]

#: The scan tests run the server's compiled stream: in ``traced`` mode both sides run the same.
STREAM_TESTS_ONLY = ("-k", "not test_scan")


@dataclass
class ReviewOptions:
    """How much to run: suite workers and hypothesis profile, compare repeats, timing repeats."""

    workers: str = "2"
    hypothesis_profile: str = "ci"
    seed: int = 1
    compare_repeat: int = 2
    timing_repeats: int = 3
    skip_suite: bool = False
    skip_compare: bool = False
    skip_timing: bool = False
    #: Run both sides even when the patch changes no code (comments, white space, tests, docs).
    full: bool = False
    jobs: int | None = None
    plot_dir: Path | None = None
    extra_pytest: list[str] = field(default_factory=list)


def review_cache_dir() -> Path:
    """Where patched copies live (``$XDG_CACHE_HOME`` or ``~/.cache``, ``pytest-readstream/review``)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pytest-readstream" / "review"


def prepare(
    inputs: ReviewInputs, *, cache: Path | None = None, allow_other_base: bool = False
) -> tuple[Path, ReviewPlan]:
    """The patched copy of the base (made again each time: the patch may have changed) and its plan."""
    root = (cache or review_cache_dir()) / inputs.key()
    tree = root / "tree"
    copy_tree(inputs.base, tree)
    read_only_safe(tree)
    if inputs.patch is not None:
        touched = apply_patch(tree, inputs.patch, allow_other_base=allow_other_base)
    else:
        assert inputs.patched is not None
        touched = changed_files(inputs.base, inputs.patched)
        copy_changes(inputs.patched, tree, touched)
    check_patched_version(tree, inputs.version, inputs.patch)
    return tree, decide(touched, inputs.base, tree)


def run_side_suite(
    bindir: Path,
    source: Path,
    report: Path,
    options: ReviewOptions,
    *,
    stream_tests_only: bool,
    tests: list[str] | None = None,
) -> dict[str, Any]:
    """The conformance suite against the server of ``bindir`` with ``source``'s traced read_stream.c;
    its JSON report (``--readstream-report``), with ``exit_code`` and ``output_tail`` added."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        *(["readstream_conformance"] if tests is None else []),
        "-q",
        "-p",
        "no:cacheprovider",
        "--readstream-impl=postgres",
        f"--readstream-pg-bindir={bindir}",
        f"--readstream-pg-source={source}",
        f"--readstream-report={report}",
        f"--readstream-seed={options.seed}",
        f"--hypothesis-profile={options.hypothesis_profile}",
        "-o",
        "readstream_report_announce=false",
    ]
    if options.workers not in ("0", ""):
        cmd += ["-n", options.workers]
    if tests is not None:
        cmd += [_pyarg(t) for t in tests]
    elif stream_tests_only:
        cmd += list(STREAM_TESTS_ONLY)
    cmd += list(options.extra_pytest)
    env = dict(os.environ)
    env.pop("READSTREAM_IMPL", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    data["exit_code"] = proc.returncode
    data["command"] = cmd[2:]
    if proc.returncode not in (0, 1) or not data.get("tests"):
        data["output_tail"] = (proc.stdout + proc.stderr)[-3000:]
    return data


def _pyarg(nodeid: str) -> str:
    """A report's ``conformance/test_x.py::name[p]`` as ``--pyargs`` takes it."""
    path, _, rest = nodeid.partition("::")
    module = path.removeprefix("conformance/").removesuffix(".py").replace("/", ".")
    return f"readstream_conformance.{module}::{rest}" if rest else f"readstream_conformance.{module}"


def _outcome_of(nodeid: str, results: list[tuple[str, str]]) -> str:
    """The outcome of ``nodeid`` among a rerun's results, ``absent`` if it is not there.

    pytest names a test relative to the run's rootdir, which follows its arguments: the whole
    suite gives ``test_x.py::name`` (or ``conformance/test_x.py::name``), one module alone gives
    ``::name``. So a test is matched by its module's file name and its name."""
    path, _, rest = nodeid.partition("::")
    stem = Path(path).stem
    for other, outcome in results:
        opath, _, orest = other.partition("::")
        if orest == rest and (not opath or Path(opath).stem == stem):
            return outcome
    return "absent"


def _suite_key(bindir: Path, source: Path, options: ReviewOptions, stream_tests_only: bool) -> str:
    """What a side's suite result depends on: the build, the source, the suite's and the harness's
    code, and the run's options (a base measured once is reused by every review of it)."""
    import hashlib
    import importlib.util

    from .. import __file__ as harness_init
    from ..postgres.builds.pgtree import tree_digest

    h = hashlib.sha256()
    manifest = Path(bindir).parent / "readstream-build.json"
    h.update(manifest.read_bytes() if manifest.is_file() else str(bindir).encode())
    h.update(tree_digest(source).digest.encode())
    spec = importlib.util.find_spec("readstream_conformance")
    suite_dir = Path(spec.origin).parent if spec is not None and spec.origin else Path(harness_init).parent
    for top in (suite_dir, Path(harness_init).parent):
        for path in sorted(top.rglob("*")):
            if path.suffix in (".py", ".c", ".h", ".txt", ".sql") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(top)).encode() + b"\0" + path.read_bytes())
    h.update(repr((options.workers, options.hypothesis_profile, options.seed, options.extra_pytest)).encode())
    h.update(b"stream-only" if stream_tests_only else b"all")
    return h.hexdigest()[:20]


def cached_side_suite(
    bindir: Path,
    source: Path,
    options: ReviewOptions,
    work: Path,
    *,
    stream_tests_only: bool,
    cache: Path | None = None,
) -> tuple[dict[str, Any], bool]:
    """The base's suite result from the cache when this build, source, code and options ran it
    before; else run and keep it. ``(report, whether it came from the cache)``."""
    key = _suite_key(bindir, source, options, stream_tests_only)
    where = (cache or review_cache_dir()) / "suites" / f"{key}.json"
    if where.is_file():
        try:
            return json.loads(where.read_text()), True
        except ValueError:
            pass
    data = run_side_suite(bindir, source, work / "base.json", options, stream_tests_only=stream_tests_only)
    if data.get("tests") and data.get("exit_code") in (0, 1):
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(where)
    return data, False


def confirm_changes(
    sides: dict[str, tuple[Path, Path]],
    suites: dict[str, Any],
    options: ReviewOptions,
    work: Path,
    say: Callable[[str], None],
    *,
    rounds: int = 1,
    limit: int = 40,
) -> dict[str, dict[str, list[str]]]:
    """Rerun each test whose outcome differs between the sides ``rounds`` more times on each side.

    A test whose outcome varies between runs of one side, or that was seen with one outcome on
    both sides, is timing-dependent (19+'s read-ahead grows only after a real wait): its
    difference is not the patch's (:func:`.report.changed_tests` sets it apart). Returns
    ``{nodeid: {"base": [outcomes], "patched": [outcomes]}}`` for the tests rerun (the first
    ``limit``).
    """
    bt = {t["nodeid"]: t["outcome"] for t in suites["base"].get("tests") or []}
    pt = {t["nodeid"]: t["outcome"] for t in suites["patched"].get("tests") or []}
    changed = sorted(n for n in set(bt) & set(pt) if bt[n] != pt[n])[:limit]
    seen: dict[str, dict[str, list[str]]] = {n: {"base": [bt[n]], "patched": [pt[n]]} for n in changed}
    if not changed:
        return seen
    say(f"{len(changed)} tests changed their outcome: rerunning them {rounds} more times on each side")
    for round_no in range(rounds):
        for label, (bindir, source) in sides.items():
            rep = run_side_suite(
                bindir,
                source,
                work / f"rerun-{label}-{round_no}.json",
                options,
                stream_tests_only=False,
                tests=changed,
            )
            got = [(t["nodeid"], t["outcome"]) for t in rep.get("tests") or []]
            for n in changed:
                seen[n][label].append(_outcome_of(n, got))
    return seen


class _Clock:
    def __init__(self, say: Callable[[str], None], start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.phases: dict[str, float] = {}
        self._say = say
        self._t = self.start

    def say(self, text: str) -> None:
        self._say(f"[{time.monotonic() - self.start:5.0f} s] {text}")

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(now - self._t, 1)
        self._t = now


def run_review(
    inputs: ReviewInputs,
    options: ReviewOptions,
    *,
    prepared: tuple[Path, ReviewPlan] | None = None,
    started: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The whole review; the result dict of :func:`.report.build_report`'s input."""
    from ..postgres.builds.pgbuild import BuildOptions
    from ..postgres.builds.pgtree import build_tree
    from .report import build_report

    clock = _Clock(progress or (lambda _m: None), started)
    given = f"patch {inputs.patch}" if inputs.patch else f"patched tree {inputs.patched}"
    clock.say(f"base {inputs.base} (PostgreSQL {inputs.version}); {given}")
    # The patch is applied before anything is said (a patch that does not apply is one line).
    tree, plan = prepared if prepared is not None else prepare(inputs)
    clock.say(f"patched copy {tree}: {len(plan.touched)} files touched; {plan.reason}")
    clock.done("prepare")
    if plan.no_code_change and not options.full:
        # Token-identical sources compile to the same code (only __LINE__ may move): there is
        # nothing the two sides could do differently, so nothing is built or run (--full runs).
        clock.say("no code changed (every touched C file has the base's tokens): nothing to build or run")
        return build_report(
            {
                "base": {"tree": str(inputs.base), "version": inputs.version},
                "patched": {"tree": str(tree)},
                "patch": str(inputs.patch) if inputs.patch else None,
                "patched_tree_given": str(inputs.patched) if inputs.patched else None,
                "plan": plan.to_dict(),
                "build": {"patched": "none: no code changed"},
                "no_code_change": True,
                "seconds": {**clock.phases, "total": round(time.monotonic() - clock.start, 1)},
            }
        )
    build_options = BuildOptions(version=inputs.version, jobs=options.jobs)
    base_build = build_tree(inputs.base, build_options, progress=lambda m: clock.say(f"pg-build (base): {m}"))
    base_bin = base_build.build.bindir
    build_info: dict[str, Any] = {"base": base_build.describe()}
    if plan.mode == "rebuild":
        from .rebuild import build_patched

        patched_build = build_patched(
            inputs.base, tree, build_options, progress=lambda m: clock.say(f"pg-build (patched): {m}")
        )
        patched_bin = patched_build.build.bindir
        build_info["patched"] = patched_build.describe()
        build_info["patched_seconds"] = round(patched_build.seconds, 1)
        build_info["patched_steps"] = patched_build.steps
    else:
        patched_bin = base_bin
        build_info["patched"] = "none: the base's server runs the patched read_stream.c as a traced copy"
    clock.done("build")
    sides = {"base": (base_bin, inputs.base), "patched": (patched_bin, tree)}
    suites: dict[str, Any] = {}
    reruns: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="readstream-review-") as tmp:
        work = Path(tmp)
        if not options.skip_suite:
            for label, (bindir, source) in sides.items():
                clock.say(
                    f"suite on the {label} side ({'stream tests' if plan.mode == 'traced' else 'all tests'})"
                )
                if label == "base":
                    suites[label], cached = cached_side_suite(
                        bindir, source, options, work, stream_tests_only=plan.mode == "traced"
                    )
                    if cached:
                        clock.say("suite on the base side: measured before for this build, source and code")
                else:
                    suites[label] = run_side_suite(
                        bindir,
                        source,
                        work / f"{label}.json",
                        options,
                        stream_tests_only=plan.mode == "traced",
                    )
                summary = suites[label].get("summary") or {}
                clock.say(
                    f"suite on the {label} side: "
                    + ", ".join(
                        f"{summary.get(k, 0)} {k}" for k in ("passed", "failed", "skipped", "xfailed")
                    )
                )
            if all(suites.get(k, {}).get("tests") for k in ("base", "patched")):
                reruns = confirm_changes(sides, suites, options, work, clock.say)
        clock.done("suite")
        comparison = None
        if not options.skip_compare:
            comparison = _compare(sides, plan, options, work, clock)
        plots: list[str] = []
        if comparison is not None and options.plot_dir is not None:
            from .plots import plot_read_sizes

            written = plot_read_sizes(comparison, options.plot_dir / "review-read-sizes.png")
            if written is not None:
                plots.append(str(written))
                clock.say(f"plot written to {written}")
        clock.done("compare")
        timing = None
        if not options.skip_timing:
            from .timing import TimedSide, latency_profiles, run_timing

            timing = run_timing(
                TimedSide("base", base_bin, inputs.base),
                TimedSide("patched", patched_bin, tree),
                latency_profiles(),
                workdir=work,
                repeats=options.timing_repeats,
                sql_scan=plan.mode == "rebuild",
                progress=clock.say,
            )
        clock.done("timing")
    result = {
        "base": {"tree": str(inputs.base), "version": inputs.version, "bindir": str(base_bin)},
        "patched": {"tree": str(tree), "bindir": str(patched_bin)},
        "patch": str(inputs.patch) if inputs.patch else None,
        "patched_tree_given": str(inputs.patched) if inputs.patched else None,
        "plan": plan.to_dict(),
        "build": build_info,
        "suites": suites,
        "reruns": reruns,
        "compare": comparison,
        "timing": timing,
        "plots": plots,
        "seconds": {**clock.phases, "total": round(time.monotonic() - clock.start, 1)},
    }
    return build_report(result)


def _compare(
    sides: dict[str, tuple[Path, Path]], plan: ReviewPlan, options: ReviewOptions, work: Path, clock: _Clock
) -> dict[str, Any]:
    from ..postgres.fidelity.compare import SCENARIOS, make_side, run_compare

    scenarios = [s for s in SCENARIOS.values() if s.traced or plan.mode == "rebuild"]
    clock.say(f"compare: {len(scenarios)} scenarios, {options.compare_repeat} runs a side")
    base = make_side("base", str(sides["base"][0]), str(sides["base"][1]), None)
    patch = make_side("patch", str(sides["patched"][0]), str(sides["patched"][1]), None)
    return run_compare(
        base,
        patch,
        scenarios,
        repeat=options.compare_repeat,
        workdir=work / "compare",
        progress=lambda m: clock.say(f"compare: {m}"),
    )
