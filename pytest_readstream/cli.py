"""The ``readstream`` console script.

Subcommands::

    readstream check    [--impl NAME] [-n N] [--json PATH] [-- PYTEST-ARGS...]
    readstream mutants  [--json PATH] [-n N]
    readstream trace    --scan NAME (--nblocks N | --relation SHAPE) [--setting NAME=VALUE ...]
                        [--device PROFILE] [--cached-fraction F] [--seed S] [--unstreamed]
                        [--json PATH] [--plot FILE.png] [scan parameters such as --limit N]
    readstream bench    seeds [--json PATH] [--plot DIR] | model [--json PATH]
    readstream oracle   [--pg-dsn URI] [--pg-bindir DIR] [--json PATH] [--only SUBSTRING]
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
        prog="readstream mutants", description="Run the suite against every known-bug mutant."
    )
    p.add_argument("--json", help="write the kill matrix to this path")
    p.add_argument("-n", dest="workers", default="2", help="pytest-xdist workers (default 2)")
    p.add_argument("--only", action="append", default=[], help="run only these mutants (repeatable)")
    args = p.parse_args(argv)
    _check_outputs(args)
    from .mutants import MUTANTS, format_kill_matrix, run_kill_matrix

    unknown = [m for m in args.only if m not in MUTANTS]
    if unknown:
        raise CliError(f"--only {unknown[0]!r} is not a mutant: allowed {', '.join(sorted(MUTANTS))}")
    pytest_args = ["-p", "hypothesis", "--hypothesis-profile=ci"]
    if args.workers not in ("0", ""):
        pytest_args = ["-n", args.workers, *pytest_args]
    matrix = run_kill_matrix(args.only or None, pytest_args, None)
    print(format_kill_matrix(matrix))
    _write_json(args.json, matrix)
    return 0 if matrix["all_killed"] and matrix["reference_clean"] else 1


def _cmd_bench(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="readstream bench", description="Benchmarks on latency storage.")
    sub = p.add_subparsers(dest="what", required=True)
    seeds = sub.add_parser("seeds", help="reproduce the seed threads' tables")
    seeds.add_argument("--json", help="write the rows to this path")
    seeds.add_argument("--plot", help="write published-vs-simulated plots into this directory")
    seeds.add_argument("--table", action="append", default=[], help="only this table (repeatable)")
    seeds.add_argument("--jobs", type=positive_int, default=None, help="worker processes (default 2)")
    model = sub.add_parser("model", help="the model's own speed and memory")
    model.add_argument("--json", help="write the figures to this path")
    args = p.parse_args(argv)
    _check_outputs(args)
    if args.what == "seeds":
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
    from .bench.model import run_model_benchmark

    figures = run_model_benchmark(json_path=None)
    _write_json(args.json, figures)
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
    args = p.parse_args(argv)
    _check_outputs(args)
    try:
        from .postgres.oracle import run_oracle, select
    except ImportError as exc:
        raise CliError(
            f"the oracle needs the 'postgres' extra (pip install 'pytest-readstream[postgres]'): {exc}"
        ) from None
    from ._server_args import dsn_problem
    from .postgres import PgHarnessError

    # Every input is checked before a server is started or a scenario runs.
    if args.only and not select(args.only):
        from .postgres.scenarios import scenario_names

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


if __name__ == "__main__":
    raise SystemExit(main())
