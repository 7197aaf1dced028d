"""The ``readstream`` console script.

Subcommands::

    readstream check    [--impl NAME] [-n N] [--json PATH] [-- PYTEST-ARGS...]
    readstream mutants  [--impl reference|postgres] [--json PATH] [-n N] [--only NAME ...] [--seed N] [-k EXPR]
                        [--pg-source DIR | --pg-fetch-source] [--pg-bindir DIR] [--fail-fast]
                        [--systematic [--sample N] [--seed S] [--no-cache] [--time-limit MIN] [--report-only]
                                      [--only-file PATH]]
    readstream trace    --scan NAME (--nblocks N | --relation SHAPE) [--setting NAME=VALUE ...]
                        [--device PROFILE] [--cached-fraction F] [--seed S] [--unstreamed]
                        [--json PATH] [--plot FILE.png] [scan parameters such as --limit N]
    readstream bench    seeds [--json PATH] [--plot DIR] | model [--json PATH] [--profile] [--opcodes] [--bounds]
    readstream bench    seeds --server [--table KEY] [--repeats R] [--scale F] [--json PATH] [--markdown PATH]
    readstream oracle   [--pg-dsn URI] [--pg-bindir DIR] [--json PATH] [--only SUBSTRING]
    readstream oracle --timing [--latency US] [--scan NAME] [--nblocks N] [--repeats R] [--direct]
    readstream compare  --base BINDIR --patch BINDIR [--base-source DIR] [--patch-source DIR]
                        [--base-mutant NAME] [--patch-mutant NAME] [--scan NAME ...] [--repeat N]
                        [--json PATH]
    readstream pg-build [--pg-version X.Y | --source DIR | --build-dir DIR] [--no-cassert]
                        [--no-injection-points] [--jobs N] [--check]
    readstream review   --base TREE (--patch FILE | --patched TREE) [--json PATH] [--markdown PATH]
                        [--plot-dir DIR] [-n N] [--repeat N] [--timing-repeats N] [--no-timing]
    readstream scans    (list every scan and its parameters)
    readstream devices  (list device profiles)

Every subcommand that measures takes ``--json PATH``. Bad input ends with one line naming the
bad value and what is allowed, and exit status 2; a command whose checks fail exits 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._cli_args import output_problem, positive_int
from .hypothesis_profiles import OWN_PROFILES

__all__ = ["main"]


class CliError(Exception):
    """A bad command line: printed as one line, exit status 2."""


def _check_output(option: str, path: str | None) -> None:
    """Refuse an output path that cannot be written, before any work (no report half made)."""
    problem = output_problem(option, path)
    if problem:
        raise CliError(problem)


def _check_outputs(args: argparse.Namespace) -> None:
    """Every file option of a subcommand: ``--json`` (all of them) and ``trace --plot``."""
    _check_output("--json", getattr(args, "json", None))


def _write_json(path: str | None, data: Any) -> None:
    """Write JSON atomically (a temporary file renamed into place)."""
    if not path:
        return
    _check_output("--json", path)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".readstream-", suffix=".json", dir=str(target.parent or "."))
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------- trace
def _scan_param_type(kind: type) -> Any:
    if kind is bool:

        def parse_bool(text: str) -> bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (allowed on/off, true/false, 1/0)")

        return parse_bool
    return kind


def _cmd_trace(argv: Sequence[str]) -> int:
    from reference_impl import SettingError, Settings
    from reference_impl.errors import ModelUsageError
    from reference_impl.scans import SCANS
    from reference_impl.storage.device import DEVICE_PROFILES
    from reference_impl.trace import format_trace, trace_scan

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--scan", default="seqscan")
    known, _ = pre.parse_known_args(argv)
    if known.scan not in SCANS:
        raise CliError(f"--scan {known.scan!r} is unknown: available {', '.join(sorted(SCANS))}")
    spec = SCANS[known.scan]
    p = argparse.ArgumentParser(
        prog="readstream trace",
        description=f"I/O timeline of one scan ({spec.name}: {spec.description}; models {spec.models}).",
    )
    p.add_argument("--scan", default="seqscan", help="scan name (see `readstream scans`)")
    p.add_argument("--nblocks", type=int, help="relation size in blocks")
    p.add_argument("--relation", help="a named synthetic relation shape instead of --nblocks")
    p.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", help="a GUC (repeatable)")
    p.add_argument("--device", default="nvme", help=f"device profile: {', '.join(DEVICE_PROFILES)}")
    p.add_argument("--cached-fraction", type=float, default=0.0, help="fraction of blocks resident before")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--unstreamed", action="store_true", help="the one-block-at-a-time variant")
    p.add_argument("--json", help="write the trace as JSON to this path")
    p.add_argument("--plot", help="write an I/O timeline PNG (needs the 'plot' extra)")
    p.add_argument("--limit-lines", type=int, default=60, help="reads printed (the JSON has all)")
    group = p.add_argument_group(f"parameters of {spec.name}")
    global_options = {a.dest for a in p._actions}
    for prm in spec.params:
        if prm.name in global_options:
            continue  # e.g. --seed: the trace's own option is passed to the scan as well
        group.add_argument(
            "--" + prm.name.replace("_", "-"),
            dest="param_" + prm.name,
            type=_scan_param_type(prm.type),
            default=None,
            help=f"{prm.help} (default {prm.default})",
        )
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.plot:
        _check_output("--plot", args.plot)
        if importlib.util.find_spec("matplotlib") is None:
            raise CliError(
                "--plot needs matplotlib, which is not installed: pip install 'pytest-readstream[plot]'"
            )
    params = {
        prm.name: getattr(args, prm.name if prm.name in global_options else "param_" + prm.name)
        for prm in spec.params
    }
    params = {k: v for k, v in params.items() if v is not None}
    if spec.name not in SCANS or ("unstreamed" if args.unstreamed else "streamed") not in spec.variants:
        raise CliError(f"scan {spec.name!r} has no {'unstreamed' if args.unstreamed else 'streamed'} variant")
    if args.device not in DEVICE_PROFILES:
        raise CliError(f"--device {args.device!r} is unknown: allowed {', '.join(DEVICE_PROFILES)}")
    try:
        settings = Settings.parse_assignments(args.setting)
        trace = trace_scan(
            spec.name,
            nblocks=args.nblocks,
            relation_shape=args.relation,
            settings=settings,
            device=args.device,
            cached_fraction=args.cached_fraction,
            seed=args.seed,
            streamed=not args.unstreamed,
            params=params,
        )
    except (SettingError, ModelUsageError) as exc:
        raise CliError(str(exc)) from None
    print(format_trace(trace, limit=args.limit_lines))
    _write_json(args.json, trace)
    if args.plot:
        from .bench.plots import plot_trace

        plot_trace(trace, args.plot)
        print(f"plot written to {args.plot}")
    return 0


# ---------------------------------------------------------------------------------------- check
def _run_pytest(args: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "pytest", *args])


def _check_impl_name(name: str) -> None:
    """Refuse an implementation that cannot be loaded before the suite starts (exit 2).

    The plugin would refuse it too, but its message names ``--readstream-impl``, an option
    this user never typed, and pytest exits 4 for it where ``readstream`` promises 2.
    """
    from .implementations import ImplementationNotFound, load_implementation

    try:
        impl = load_implementation(name, search_dirs=[Path.cwd()])
    except ImplementationNotFound as err:
        raise CliError(f"--impl {name}: {' '.join(str(err).split())}") from None
    close = getattr(impl, "close", None)
    if callable(close):
        close()


def _cmd_check(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream check",
        description="Run the conformance suite and summarise it.",
        epilog=(
            "exit status: 0 conforms (every MUST test ran and passed); 1 does not conform (a MUST "
            "test failed, or is a listed known failure); 2 usage error; 3 incomplete (no MUST "
            "failure, but not every MUST test ran); 130 interrupted"
        ),
    )
    p.add_argument("--impl", default=None, help="implementation under test (default: reference)")
    p.add_argument(
        "--model-version",
        default=None,
        help="model version of the tests that name none: 18 (default), 19, 20devel or master "
        "(--readstream-model-version)",
    )
    p.add_argument("-n", dest="workers", default="2", help="pytest-xdist workers (default 2; 0 = serial)")
    p.add_argument("--json", help="write the per-test report to this path")
    p.add_argument("--profile", default="ci", choices=OWN_PROFILES, help="hypothesis profile (default: ci)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.impl:
        _check_impl_name(args.impl)
    if args.json:
        return _check_with_report(args, args.json, kept=True)
    # The summary needs the per-test report; without --json it lives only as long as the run,
    # so the suite is told not to announce it.
    with tempfile.TemporaryDirectory(prefix="readstream-check-") as tmp:
        return _check_with_report(args, os.path.join(tmp, "report.json"), kept=False)


def _check_with_report(args: argparse.Namespace, report: str, *, kept: bool) -> int:
    """Run the suite writing its report to ``report``, then print the verdict from it."""
    from pytest import ExitCode

    from .verdict import EXIT_USAGE

    cmd = ["--pyargs", "readstream_conformance", "-q", "-p", "no:cacheprovider"]
    cmd += [f"--hypothesis-profile={args.profile}", f"--readstream-report={report}"]
    if not kept:
        cmd += ["-o", "readstream_report_announce=false"]
    if args.impl:
        cmd.append(f"--readstream-impl={args.impl}")
    if args.model_version:
        cmd.append(f"--readstream-model-version={args.model_version}")
    if args.workers not in ("0", ""):
        cmd += ["-n", args.workers]
    cmd += list(args.pytest_args)
    rc = _run_pytest(cmd)
    if rc == int(ExitCode.USAGE_ERROR):
        return EXIT_USAGE  # pytest printed the one line naming the bad value; no test ran
    if not Path(report).exists():
        print(f"readstream check: pytest ended with status {rc} before writing its report", file=sys.stderr)
        return rc if rc else 1
    return _print_check_summary(json.loads(Path(report).read_text()))


def _print_check_summary(report: dict[str, Any]) -> int:
    """The per-tier table and the verdict line (the plugin has printed the family table);
    returns the verdict's exit status."""
    from .verdict import tier_counts, tier_table, verdict

    print()
    for line in tier_table(tier_counts(report)):
        print(line)
    result = verdict(report)
    print(result.line)
    return result.exit_status


def check_verdict(report: dict[str, Any]) -> str:
    """The verdict line of a report (:func:`pytest_readstream.verdict.verdict`)."""
    from .verdict import verdict

    return verdict(report).line


# ---------------------------------------------------------------------------------------- others
def _cmd_mutants(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream mutants",
        description=(
            "Run the suite against every known-bug mutant: the reference model's Python mutants, or "
            "with --impl postgres the C mutants of the server's traced read_stream.c."
        ),
        epilog=(
            "exit status with --systematic: 0 every reached mutant killed or equivalent; 1 a mutant "
            "survived; 2 usage error, or the unmutated copy failed; 3 no survivor so far but some "
            "mutants unfinished (--time-limit, --report-only): the score is not final"
        ),
    )
    p.add_argument("--impl", choices=("reference", "postgres"), default="reference", help="whose mutants")
    p.add_argument("--json", help="write the kill matrix to this path")
    p.add_argument("-n", dest="workers", default="2", help="pytest-xdist workers (default 2)")
    p.add_argument("--only", action="append", default=[], help="run only these mutants (repeatable)")
    p.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the runs' --readstream-seed (hypothesis' seed under the ci profile); with --systematic "
        "also the sample's (default 1)",
    )
    p.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="only the suite's tests matching EXPR (pytest -k)"
    )
    p.add_argument("--pg-source", metavar="DIR", help="--impl postgres: the server's source tree")
    p.add_argument(
        "--pg-fetch-source", action="store_true", help="--impl postgres: fetch the embedded server's source"
    )
    p.add_argument(
        "--pg-bindir", metavar="DIR", help="--impl postgres: the build to start (default: embedded)"
    )
    p.add_argument(
        "--fail-fast",
        action="store_true",
        help="--impl postgres: stop each mutant's run at its first failing test (the unmutated copy runs whole)",
    )
    p.add_argument(
        "--systematic",
        action="store_true",
        help="--impl postgres: every mutation operator at every site of read_stream.c (docs/mutation.md)",
    )
    p.add_argument("--sample", type=int, metavar="N", help="--systematic: only N mutants chosen at random")
    p.add_argument("--no-cache", action="store_true", help="--systematic: judge every mutant again")
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="MIN",
        help="--systematic: start no full run of a first-pass survivor after MIN minutes",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="--systematic: judge nothing; report the cached verdicts (the others unfinished)",
    )
    p.add_argument(
        "--only-file",
        metavar="PATH",
        help="--systematic: run only the mutants whose ids this file lists, one per line "
        "(blank lines and lines starting with # are skipped; with --only, both)",
    )
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.only_file is not None:
        if not args.systematic:
            raise CliError("--only-file needs --systematic (--only names the other mutants)")
        args.only = [*args.only, *_ids_of(args.only_file)]
    if args.fail_fast and args.impl != "postgres":
        raise CliError("--fail-fast needs --impl postgres (the model's mutants run in every mode whole)")
    if args.systematic:
        return _systematic_mutants(args)
    if args.sample is not None or args.no_cache or args.time_limit is not None or args.report_only:
        raise CliError("--sample, --no-cache, --time-limit and --report-only need --systematic")
    pytest_args = ["-p", "hypothesis", "--hypothesis-profile=ci"]
    if args.seed is not None:
        if args.seed < 0:
            raise CliError(f"--seed {args.seed}: a seed is a non-negative integer")
        pytest_args.append(f"--readstream-seed={args.seed}")
    if args.keyword is not None:
        if not args.keyword.strip():
            raise CliError("-k '': give a pytest -k expression naming the tests to run")
        # With --impl postgres the scan tests stay left out (cmutants.py): one -k for both.
        expr = f"not test_scans and ({args.keyword})" if args.impl == "postgres" else args.keyword
        pytest_args += ["-k", expr]
    if args.workers not in ("0", ""):
        pytest_args = ["-n", args.workers, *pytest_args]
    if args.impl == "postgres":
        return _c_mutants(args, pytest_args)
    if args.pg_source or args.pg_fetch_source or args.pg_bindir:
        raise CliError("--pg-source, --pg-fetch-source and --pg-bindir need --impl postgres")
    from .mutants import MUTANTS, format_kill_matrix, run_kill_matrix

    unknown = [m for m in args.only if m not in MUTANTS]
    if unknown:
        raise CliError(f"--only {unknown[0]!r} is not a mutant: allowed {', '.join(sorted(MUTANTS))}")
    matrix = run_kill_matrix(args.only or None, pytest_args, None)
    print(format_kill_matrix(matrix))
    _write_json(args.json, matrix)
    return 0 if matrix["all_killed"] and matrix["reference_clean"] else 1


def _ids_of(path: str) -> list[str]:
    """The mutant ids of an ``--only-file``: one per line, blank and ``#`` lines skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"--only-file {path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    ids = [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith("#")]
    if not ids:
        raise CliError(f"--only-file {path}: lists no mutant id (one per line; # starts a comment)")
    return ids


def _systematic_mutants(args: argparse.Namespace) -> int:
    """``readstream mutants --impl postgres --systematic``: the systematic score (docs/mutation.md)."""
    if args.impl != "postgres":
        raise CliError("--systematic needs --impl postgres (the mutants are C edits of read_stream.c)")
    if args.sample is not None and args.sample < 1:
        raise CliError(f"--sample {args.sample}: give a positive number of mutants")
    if args.report_only and (args.no_cache or args.sample is not None or args.time_limit is not None):
        raise CliError(
            "--report-only reports the cached verdicts: it takes no --no-cache, --sample or --time-limit"
        )
    if args.time_limit is not None and not args.time_limit > 0:
        raise CliError(f"--time-limit {args.time_limit}: give a positive number of minutes")
    try:
        workers = int(args.workers)
    except ValueError:
        workers = 0
    if workers < 1:
        raise CliError(f"-n {args.workers}: --systematic runs N mutants at once, give a positive integer")
    try:
        from .postgres.builds.systematic_run import format_systematic, run_systematic
    except ImportError as exc:
        raise CliError(
            f"--systematic needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    if bool(args.pg_source) == bool(args.pg_fetch_source):
        raise CliError(
            "--systematic needs the server's source: give either --pg-source DIR or --pg-fetch-source"
        )
    if args.pg_source and not Path(args.pg_source).is_dir():
        raise CliError(f"--pg-source {args.pg_source}: not a directory")
    if args.pg_bindir:
        _check_c_build_bindir(args.pg_bindir)
    from .postgres import PgHarnessError
    from .postgres.builds._cbuild import server_headers
    from .postgres.builds.pgsource import TracedSource
    from .postgres.servers._cluster import embedded_bindir

    try:
        bindir = Path(args.pg_bindir).resolve() if args.pg_bindir else Path(embedded_bindir())
        tree = TracedSource(
            bindir, Path(args.pg_source).resolve() if args.pg_source else None, fetch=args.pg_fetch_source
        ).tree()
        version = server_headers(bindir).version
    except (PgHarnessError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    try:
        result = run_systematic(
            tree,
            version=version,
            bindir=bindir if args.pg_bindir else None,
            workers=workers,
            only=args.only or None,
            sample=args.sample,
            seed=1 if args.seed is None else args.seed,
            use_cache=not args.no_cache,
            time_limit=None if args.time_limit is None else 60.0 * args.time_limit,
            report_only=args.report_only,
        )
    except ValueError as exc:  # --only naming no mutant of this file, a malformed equivalents line
        raise CliError(str(exc)) from None
    print(format_systematic(result))
    _write_json(args.json, result)
    if result["reference"]["failed"] or result["reference"]["harness_errors"]:
        print("readstream mutants: ERROR: the unmutated copy failed: no mutant judged", file=sys.stderr)
        return 2
    totals = result["totals"]
    if totals.get("survived"):
        return 1
    # No survivor so far, but mutants without a verdict: incomplete, as readstream check's 3.
    return 3 if totals.get("unfinished") else 0


def _check_c_build_bindir(bindir: str) -> None:
    """A build the C mutants compile against: its programs and headers, or one line (exit 2)."""
    from .postgres.builds._cbuild import CBuildUnavailable, server_headers
    from .postgres.errors import PgNotAvailable
    from .postgres.servers.server import build_bindir

    try:
        server_headers(build_bindir(bindir))
    except CBuildUnavailable as err:
        raise CliError(
            f"--pg-bindir {bindir}: {err}; the C mutants are compiled against its headers"
        ) from None
    except PgNotAvailable as err:
        raise CliError(f"--pg-bindir {bindir}: {err}") from None


def _c_mutants(args: argparse.Namespace, pytest_args: list[str]) -> int:
    try:
        from .mutants import format_kill_matrix
        from .postgres.builds.cmutants import run_c_kill_matrix
        from .postgres.builds.traced_copy import MUTANTS
    except ImportError as exc:
        raise CliError(
            f"--impl postgres needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    unknown = [m for m in args.only if m not in MUTANTS]
    if unknown:
        raise CliError(f"--only {unknown[0]!r} is not a C mutant: allowed {', '.join(MUTANTS)}")
    if bool(args.pg_source) == bool(args.pg_fetch_source):
        raise CliError(
            "--impl postgres needs the server's source: give either --pg-source DIR or --pg-fetch-source"
        )
    if args.pg_source and not Path(args.pg_source).is_dir():
        raise CliError(f"--pg-source {args.pg_source}: not a directory")
    server_args = []
    if args.pg_bindir:
        _check_c_build_bindir(args.pg_bindir)  # its programs and headers, one line each
    # The tree (fetched once here) and the server's bufmgr.h: each mutant is checked against them.
    from .postgres import PgHarnessError
    from .postgres.builds._cbuild import server_headers
    from .postgres.builds.pgsource import TracedSource
    from .postgres.servers._cluster import embedded_bindir

    try:
        bindir = Path(args.pg_bindir).resolve() if args.pg_bindir else Path(embedded_bindir())
        tree = TracedSource(
            bindir, Path(args.pg_source).resolve() if args.pg_source else None, fetch=args.pg_fetch_source
        ).tree()
        headers = server_headers(bindir)
        bufmgr_h = (headers.include_dir / "storage" / "bufmgr.h").read_text()
    except (PgHarnessError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    server_args.append(f"--readstream-pg-source={tree}")
    if args.pg_bindir:
        server_args.append(f"--readstream-pg-bindir={bindir}")
    matrix = run_c_kill_matrix(
        server_args,
        pytest_args,
        args.only or None,
        source=tree,
        bufmgr_h=bufmgr_h,
        version=headers.version,
        fail_fast=args.fail_fast,
    )
    print(format_kill_matrix(matrix, reference="unmutated copy"))
    for why in matrix["not_applicable"].values():
        print(why)  # "C mutant NAME does not apply to PostgreSQL V's read_stream.c: ..."
    print(f"time: {matrix['seconds']:.0f} s for {1 + len(matrix['mutants'])} runs of the suite")
    ref = matrix["reference"]
    if "output_tail" in ref:
        print(ref["output_tail"].strip().splitlines()[-1], file=sys.stderr)
    _write_json(args.json, matrix)
    from .harness_errors import main_harness_error

    harness = main_harness_error(ref.get("harness_error_lines") or [])
    if harness is not None:
        line, n, _total = harness
        # The unmutated copy could not be run: no mutant is judged, and that is no verdict.
        print(
            f"readstream mutants: ERROR: {line} ({n} tests of the unmutated copy; no mutant judged)",
            file=sys.stderr,
        )
        return 2
    return 0 if matrix["all_killed"] and matrix["reference_clean"] else 1


def _cmd_bench(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="readstream bench", description="Benchmarks on latency storage.")
    sub = p.add_subparsers(dest="what", required=True)
    seeds = sub.add_parser("seeds", help="reproduce the seed threads' tables")
    seeds.add_argument("--json", help="write the rows to this path")
    seeds.add_argument("--plot", help="write published-vs-simulated plots into this directory")
    seeds.add_argument("--table", action="append", default=[], help="only this table (repeatable)")
    seeds.add_argument("--jobs", type=positive_int, default=None, help="worker processes (default 2)")
    seeds.add_argument(
        "--server",
        action="store_true",
        help="run the unpatched rows on the embedded PostgreSQL under the thread's latency, beside the model",
    )
    seeds.add_argument("--repeats", type=int, default=5, help="--server: runs per row, the median is used")
    seeds.add_argument(
        "--scale", type=float, default=None, help="--server: shrink every table by this factor"
    )
    seeds.add_argument("--markdown", help="--server: also write the table as Markdown to this path")
    model = sub.add_parser("model", help="the model's own speed and memory")
    model.add_argument("--json", help="write the figures to this path")
    model.add_argument(
        "--profile", action="store_true", help="also print where the model spends its time (cProfile)"
    )
    model.add_argument(
        "--opcodes",
        action="store_true",
        help="also count bytecode instructions per block (exact, whatever the machine's load)",
    )
    model.add_argument(
        "--bounds",
        action="store_true",
        help="also time scans that do less than the model (a floor, a fused lane): how low the ratio can go",
    )
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.what == "seeds" and args.server:
        return _bench_seeds_server(args)
    if args.what == "seeds":
        for option, value in (
            ("--repeats", args.repeats != 5),
            ("--scale", args.scale),
            ("--markdown", args.markdown),
        ):
            if value:
                raise CliError(f"{option} is valid only with --server")
        from .bench.seeds import run_seed_benchmarks

        if args.plot and not Path(args.plot).is_dir():
            # One rule for every output: its directory must exist (as for --json and
            # --readstream-report), so a typo never scatters new directories.
            raise CliError(f"--plot {args.plot}: not a directory (create it first)")
        from ._progress import Progress

        progress = Progress("readstream bench seeds")
        try:
            rows = run_seed_benchmarks(
                json_path=None,
                plot_dir=args.plot,
                jobs=args.jobs,
                tables=args.table or None,
                progress=progress,
            )
        except ValueError as exc:
            raise CliError(str(exc)) from None
        finally:
            progress.close()
        _write_json(args.json, rows)
        return 0
    from .bench.model import count_opcodes, format_opcodes, format_profile, profile_model, run_model_benchmark

    figures = run_model_benchmark(json_path=None)
    if args.opcodes:
        figures["opcodes"] = count_opcodes()
    if args.bounds:
        from .bench.bounds import run_bounds_benchmark

        print()
        figures["bounds"] = run_bounds_benchmark()
    _write_json(args.json, figures)
    if args.profile:
        print()
        print(format_profile(profile_model(100_000)))
    if args.opcodes:
        print()
        print(format_opcodes(figures["opcodes"]))
    return 0


def _bench_seeds_server(args: argparse.Namespace) -> int:
    """``bench seeds --server``: the unpatched seed rows on the embedded server (``postgres.seed_timing``)."""
    if args.plot or args.jobs:
        raise CliError(
            f"{'--plot' if args.plot else '--jobs'} is not valid with --server (one server runs the rows)"
        )
    if not 1 <= args.repeats <= 99:
        raise CliError(f"--repeats {args.repeats} is not valid; allowed: 1..99")
    if args.scale is not None and not 0 < args.scale <= 1:
        raise CliError(f"--scale {args.scale:g} is not valid; allowed: 0 < scale <= 1")
    _check_output("--markdown", args.markdown)
    try:
        from .postgres import PgHarnessError
        from .postgres.fidelity import seed_timing
    except ImportError as exc:
        raise CliError(
            f"--server needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    try:
        cases, skipped = seed_timing.seed_cases(args.table or None, args.scale)
    except ValueError as exc:
        raise CliError(str(exc)) from None

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    progress(f"{len(cases)} rows to time, {len(skipped)} left out; {args.repeats} interleaved rounds")
    try:
        result = seed_timing.run_seed_server(cases, repeats=args.repeats, progress=progress)
    except PgHarnessError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    result["skipped"] = skipped
    print(seed_timing.format_seed_server(result))
    if args.markdown:
        Path(args.markdown).write_text(seed_timing.markdown_seed_server(result) + "\n", encoding="utf-8")
    _write_json(args.json, result)
    return 0


def _cmd_oracle(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream oracle", description="The model's predictions beside a real PostgreSQL."
    )
    p.add_argument("--pg-dsn", help="use this server (default: start the embedded PostgreSQL 18)")
    p.add_argument("--pg-bindir", help="start a server from this build's bin/ directory")
    p.add_argument("--json", help="write the scenario table to this path")
    p.add_argument("--only", action="append", default=[], help="only scenarios whose name contains this")
    p.add_argument("--allow-nonempty", action="store_true", help="accept a DSN database holding user tables")
    p.add_argument(
        "--timing",
        action="store_true",
        help="time scans under imposed read latencies on a server the harness starts (read interposer) "
        "and print the model's elapsed time beside the server's",
    )
    p.add_argument(
        "--latency", type=int, action="append", default=[], help="--timing: imposed µs per read (repeatable)"
    )
    p.add_argument("--scan", action="append", default=[], help="--timing: only this scan (repeatable)")
    p.add_argument("--nblocks", type=int, default=256, help="--timing: table size in blocks (default 256)")
    p.add_argument(
        "--repeats", type=int, default=5, help="--timing: runs per case, the median is used (default 5)"
    )
    p.add_argument(
        "--direct", action="store_true", help="--timing: also run the server with debug_io_direct=data"
    )
    p.add_argument("--no-calibrate", action="store_true", help="--timing: keep the model's default CpuCosts")
    p.add_argument("--markdown", help="--timing: also write the table as Markdown to this path")
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.timing:
        return _oracle_timing(args)
    try:
        from .postgres.fidelity.oracle import run_oracle, select
    except ImportError as exc:
        raise CliError(
            f"the oracle needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    from ._server_args import dsn_problem
    from .postgres import PgHarnessError

    # Every input is checked before a server is started or a scenario runs.
    if args.only and not select(args.only):
        from .postgres.fidelity.scenarios import scenario_names

        raise CliError(
            f"--only {args.only if len(args.only) > 1 else args.only[0]!r} matches no scenario: allowed "
            f"substrings of {', '.join(scenario_names())}"
        )
    if args.pg_dsn and args.pg_bindir:
        raise CliError("--pg-dsn and --pg-bindir exclude each other: a running server or a build to start")
    problem = dsn_problem("--pg-dsn", args.pg_dsn) if args.pg_dsn else None
    if problem:
        raise CliError(problem)

    try:
        result = run_oracle(
            dsn=args.pg_dsn, bindir=args.pg_bindir, only=args.only or None, allow_nonempty=args.allow_nonempty
        )
    except PgHarnessError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    _write_json(args.json, result)
    return 0 if all(s.get("agree") or s.get("explained") for s in result.get("scenarios", [])) else 1


def _oracle_timing(args: argparse.Namespace) -> int:
    if args.pg_dsn:
        raise CliError("--timing needs a server the harness starts (its reads are interposed): drop --pg-dsn")
    try:
        from .postgres.fidelity import timing
    except ImportError as exc:
        raise CliError(
            f"the oracle needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    from .postgres import PgHarnessError

    try:
        chosen = timing.cases(
            scans=args.scan or tuple(timing.TIMED_SCANS),
            latencies=args.latency or timing.DEFAULT_LATENCIES,
            direct=(False, True) if args.direct else (False,),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 16 <= args.nblocks <= 131072:
        raise CliError(f"--nblocks {args.nblocks} is not valid; allowed: 16..131072")
    if not 1 <= args.repeats <= 99:
        raise CliError(f"--repeats {args.repeats} is not valid; allowed: 1..99")
    _check_output("--markdown", args.markdown)

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    try:
        result = timing.run_timing(
            chosen,
            nblocks=args.nblocks,
            repeats=args.repeats,
            calibrate=not args.no_calibrate,
            bindir=args.pg_bindir,
            progress=progress,
        )
    except PgHarnessError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    print(timing.format_timing(result))
    if args.markdown:
        Path(args.markdown).write_text(timing.markdown_timing(result) + "\n", encoding="utf-8")
    _write_json(args.json, result)
    ok = all(r["ratio"] is not None and 0.8 <= r["ratio"] <= 1.25 for r in result["rows"]) and all(
        abs(s["deviation"]) <= 0.15 for s in result["speedups"]
    )
    return 0 if ok else 1


def _cmd_compare(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream compare",
        description=(
            "The same scenarios (relation, settings, cold cache) on two PostgreSQL builds, side by side. "
            "Exit status 0: they agree; 1: some scenario differs."
        ),
    )
    p.add_argument(
        "--base", required=True, metavar="BINDIR", help="the unpatched build's bin/ ('embedded': the wheel's)"
    )
    p.add_argument(
        "--patch", required=True, metavar="BINDIR", help="the patched build's bin/ ('embedded': the wheel's)"
    )
    p.add_argument(
        "--base-source", metavar="DIR", help="the base build's source tree: adds the traced stream scenarios"
    )
    p.add_argument("--patch-source", metavar="DIR", help="the patched build's source tree")
    p.add_argument(
        "--base-mutant", metavar="NAME", help="build the base side's traced copy with this C mutant"
    )
    p.add_argument(
        "--patch-mutant", metavar="NAME", help="build the patch side's traced copy with this C mutant"
    )
    p.add_argument(
        "--scan", action="append", default=[], metavar="NAME", help="only this scenario (repeatable)"
    )
    p.add_argument(
        "--repeat", type=positive_int, default=3, help="runs per scenario and side (median time; default 3)"
    )
    p.add_argument("--json", help="write the comparison to this path")
    args = p.parse_args(argv)
    _check_outputs(args)
    try:
        from .postgres import PgHarnessError
        from .postgres.builds.traced_copy import MUTANTS
        from .postgres.fidelity.compare import (
            format_comparison,
            make_side,
            run_compare,
            scenario_list,
        )
    except ImportError as exc:
        raise CliError(
            f"compare needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    for option, name in (("--base-mutant", args.base_mutant), ("--patch-mutant", args.patch_mutant)):
        if name is not None and name not in MUTANTS:
            raise CliError(f"{option} {name!r} is not a C mutant: allowed {', '.join(MUTANTS)}")
    try:
        scenarios = scenario_list(args.scan)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    try:
        base = make_side("base", args.base, args.base_source, args.base_mutant)
        patch = make_side("patch", args.patch, args.patch_source, args.patch_mutant)
    except PgHarnessError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    try:
        result = run_compare(
            base, patch, scenarios, repeat=args.repeat, progress=lambda m: print(m, file=sys.stderr)
        )
    except PgHarnessError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    print(format_comparison(result))
    _write_json(args.json, result)
    return 0 if result["same"] else 1


def _cmd_review(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream review",
        description=(
            "What a patch does to the read path: the conformance suite, compare's scenarios and the "
            "time under the seed threads' latency profiles, on the base tree and on the base with the "
            "patch applied; a report for the terminal, as Markdown and as JSON (docs/review.md)."
        ),
        epilog="exit status: 0 no change; 1 the patch changes something; 2 bad input or a harness error (one line)",
    )
    p.add_argument("--base", metavar="TREE", help="the PostgreSQL source tree the patch is for")
    p.add_argument(
        "--render",
        metavar="REPORT.json",
        help="instead of a review: print a saved review's report again (its tests classified anew)",
    )
    p.add_argument("--patch", metavar="FILE", help="a unified diff (git diff, git format-patch, diff -u)")
    p.add_argument("--patched", metavar="TREE", help="instead of --patch: a patched tree of the same version")
    p.add_argument("--json", help="write the report as JSON to this path")
    p.add_argument("--markdown", help="write the report as Markdown (for a mailing-list reply) to this path")
    p.add_argument(
        "--plot-dir", metavar="DIR", help="write the plots (PNG) into this directory (needs matplotlib)"
    )
    p.add_argument(
        "-n", dest="workers", default="2", help="pytest-xdist workers of each suite run (default 2)"
    )
    p.add_argument(
        "--repeat", type=positive_int, default=2, help="compare: runs per scenario and side (default 2)"
    )
    p.add_argument(
        "--timing-repeats", type=positive_int, default=3, help="timed runs per profile and side (default 3)"
    )
    p.add_argument("--jobs", type=positive_int, default=None, help="ninja's parallel jobs for a rebuild")
    p.add_argument("--seed", type=int, default=1, help="the suite's --readstream-seed (default 1)")
    p.add_argument("--no-suite", action="store_true", help="leave the conformance suite out")
    p.add_argument("--no-compare", action="store_true", help="leave compare's scenarios out")
    p.add_argument("--no-timing", action="store_true", help="leave the timing out")
    p.add_argument(
        "--allow-other-base",
        action="store_true",
        help="apply a git patch whose 'index' lines name other file contents than the base's",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="run both sides even when the patch changes no code (only comments, white space, tests, docs)",
    )
    args = p.parse_args(argv)
    _check_outputs(args)
    _check_output("--markdown", args.markdown)
    if args.render:
        return _render_review(args)
    if not args.base:
        raise CliError("--base TREE is required (or --render REPORT.json)")
    if args.plot_dir:
        if not Path(args.plot_dir).is_dir():
            raise CliError(f"--plot-dir {args.plot_dir}: not a directory (create it first)")
        if importlib.util.find_spec("matplotlib") is None:
            raise CliError(
                "--plot-dir needs matplotlib, which is not installed: pip install 'pytest-readstream[plot]'"
            )
    try:
        from .postgres import PgHarnessError
        from .review.inputs import ReviewInputError, check_inputs
    except ImportError as exc:
        raise CliError(
            f"review needs the 'postgres' extra (pip install 'pytest-readstream[postgres,pgbuild]'): {exc}"
        ) from None
    from .review.report import format_markdown, format_text
    from .review.run import ReviewOptions, prepare, run_review

    started = time.monotonic()  # the review's time includes making the patched copy
    try:
        inputs = check_inputs(args.base, args.patch, args.patched)
        prepared = prepare(
            inputs, allow_other_base=args.allow_other_base
        )  # the patched copy: a patch that does not apply is one line
    except ReviewInputError as exc:
        raise CliError(str(exc)) from None

    options = ReviewOptions(
        workers=args.workers,
        seed=args.seed,
        compare_repeat=args.repeat,
        timing_repeats=args.timing_repeats,
        skip_suite=args.no_suite,
        skip_compare=args.no_compare,
        skip_timing=args.no_timing,
        full=args.full,
        jobs=args.jobs,
        plot_dir=Path(args.plot_dir) if args.plot_dir else None,
    )
    try:
        report = run_review(
            inputs,
            options,
            prepared=prepared,
            started=started,
            progress=lambda m: print(f"readstream review: {m}", file=sys.stderr, flush=True),
        )
    except (ReviewInputError, PgHarnessError) as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    print(format_text(report))
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report) + "\n", encoding="utf-8")
    _write_json(args.json, report)
    errors = [v for v in report["verdicts"].values() if v["verdict"] == "ERROR"]
    if errors:
        print(f"readstream review: ERROR: {errors[0]['line']}", file=sys.stderr)
        return 2
    return 0 if report["conclusion"] == "no change" else 1


def _render_review(args: argparse.Namespace) -> int:
    """``readstream review --render REPORT.json``: a saved report, rendered again."""
    from .review.report import SCHEMA, format_markdown, format_text, regroup

    try:
        saved = json.loads(Path(args.render).read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"--render {args.render}: not a readable JSON report ({exc})") from None
    if not isinstance(saved, dict) or saved.get("schema") != SCHEMA:
        raise CliError(f"--render {args.render}: not a readstream review report (schema {SCHEMA})")
    report = regroup(saved)
    print(format_text(report))
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report) + "\n", encoding="utf-8")
    _write_json(args.json, report)
    return 0 if report["conclusion"] == "no change" else 1


def _cmd_pg_build(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="readstream pg-build",
        description=(
            "Build PostgreSQL with liburing, assertions and injection points into the harness's "
            "cache and print its bin/ directory: a release (Debian's upstream tarball, fetched and "
            "cached), or a source tree of your own (--source: an extracted tarball or a checkout of "
            "18.x, 19.x or master) or its meson build directory (--build-dir). A tree is built once "
            "per content and rebuilt incrementally. pytest --readstream-pg-build uses the default build."
        ),
        epilog="exit status: 0 built (or already built); 1 --check found no build; 2 refused or failed (one line)",
    )
    p.add_argument("--pg-version", default=None, help="the release to build (default: 18.6)")
    p.add_argument(
        "--source", metavar="DIR", default=None, help="a PostgreSQL source tree to build (18.x, 19.x, master)"
    )
    p.add_argument(
        "--build-dir",
        metavar="DIR",
        default=None,
        help="an existing meson build directory of the tree: built as configured, never reconfigured",
    )
    p.add_argument("--no-cassert", action="store_true", help="without assertions (-Dcassert=false)")
    p.add_argument(
        "--no-injection-points",
        action="store_true",
        help="without injection points (-Dinjection_points=false)",
    )
    p.add_argument("--jobs", type=positive_int, default=None, help="ninja's parallel jobs (default: CPUs)")
    p.add_argument(
        "--check", action="store_true", help="only say whether the build is in the cache (exit 1 if not)"
    )
    args = p.parse_args(argv)
    from .postgres.builds.pgbuild import (
        DEFAULT_VERSION,
        BuildOptions,
        PgBuildUnavailable,
        ensure_build,
        find_build,
    )

    if args.source or args.build_dir:
        return _pg_build_tree(args)

    try:
        options = BuildOptions(
            version=args.pg_version or DEFAULT_VERSION,
            cassert=not args.no_cassert,
            injection_points=not args.no_injection_points,
            jobs=args.jobs,
        )
    except PgBuildUnavailable as err:
        raise CliError(f"--pg-version {args.pg_version}: {err}") from None
    if args.check:
        found = find_build(options)
        if found is None:
            print(
                f"readstream pg-build: no build of PostgreSQL {options.version} with these options in the cache"
            )
            return 1
        print(found.bindir)
        return 0
    try:
        build = ensure_build(
            options, progress=lambda line: print(f"readstream pg-build: {line}", file=sys.stderr)
        )
    except PgBuildUnavailable as err:
        raise CliError(str(err)) from None
    print(build.bindir)
    print(
        f"readstream pg-build: {build.describe()}; built in {build.seconds / 60:.1f} min. Use it with "
        + (
            "pytest --readstream-impl=postgres --readstream-pg-build"
            if options == BuildOptions(version=options.version, jobs=options.jobs)
            and options.version == DEFAULT_VERSION
            else f"pytest --readstream-impl=postgres --readstream-pg-bindir={build.bindir}"
        ),
        file=sys.stderr,
    )
    return 0


def _pg_build_tree(args: argparse.Namespace) -> int:
    """``readstream pg-build --source DIR`` / ``--build-dir DIR``: a tree of one's own (pgtree)."""
    from .postgres.builds.pgbuild import BuildOptions, PgBuildUnavailable
    from .postgres.builds.pgtree import build_tree

    if args.pg_version:
        raise CliError(
            "--pg-version names a release to fetch; with --source or --build-dir the tree says its version"
        )
    if args.check:
        raise CliError(
            "--check applies to the fetched releases; a tree is looked up by building it (a no-op when built)"
        )
    try:
        result = build_tree(
            Path(args.source) if args.source else None,
            BuildOptions(
                cassert=not args.no_cassert, injection_points=not args.no_injection_points, jobs=args.jobs
            ),
            build_dir=Path(args.build_dir) if args.build_dir else None,
            progress=lambda line: print(f"readstream pg-build: {line}", file=sys.stderr),
        )
    except PgBuildUnavailable as err:
        raise CliError(str(err)) from None
    print(result.build.bindir)
    print(
        f"readstream pg-build: {result.describe()}. Use it with pytest --readstream-impl=postgres "
        f"--readstream-pg-bindir={result.build.bindir} --readstream-pg-source={result.build.source}",
        file=sys.stderr,
    )
    return 0


def _cmd_scans(argv: Sequence[str]) -> int:
    argparse.ArgumentParser(prog="readstream scans", description="List the scans of the model.").parse_args(
        argv
    )
    from reference_impl.scans import SCANS

    for name in sorted(SCANS):
        spec = SCANS[name]
        print(f"{name}  [{', '.join(spec.variants)}]  {spec.description}")
        print(f"    models: {spec.models}")
        for prm in spec.params:
            print(
                f"    --{prm.name.replace('_', '-')} ({prm.type.__name__}, default {prm.default}): {prm.help}"
            )
    return 0


def _cmd_devices(argv: Sequence[str]) -> int:
    argparse.ArgumentParser(prog="readstream devices", description="List device profiles.").parse_args(argv)
    from reference_impl.storage.device import DEVICE_PROFILES

    for p in DEVICE_PROFILES.values():
        print(
            f"{p.name:<10} read {p.read_latency_us} µs, write {p.write_latency_us} µs, "
            f"{p.bandwidth_mb_s:g} MB/s, {p.channels} channels — {p.description}"
        )
    return 0


COMMANDS = {
    "check": _cmd_check,
    "mutants": _cmd_mutants,
    "trace": _cmd_trace,
    "bench": _cmd_bench,
    "oracle": _cmd_oracle,
    "compare": _cmd_compare,
    "pg-build": _cmd_pg_build,
    "review": _cmd_review,
    "scans": _cmd_scans,
    "devices": _cmd_devices,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"readstream: unknown command {cmd!r}: allowed {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[cmd](rest)
    except CliError as exc:
        print(f"readstream {cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"readstream {cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # A bug of this tool is an error, never a verdict: Python's own exit status for it, 1,
        # is what `check` and `review` say for "does not conform" and "changes".
        if os.environ.get("READSTREAM_TRACEBACK"):
            traceback.print_exc()
        first = (str(exc).splitlines() or [""])[0]
        print(
            f"readstream {cmd}: internal error (a bug of pytest-readstream, not a verdict): "
            f"{type(exc).__name__}: {first}; READSTREAM_TRACEBACK=1 prints the traceback",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
