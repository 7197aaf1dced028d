"""Command-line plumbing shared by the benchmark scripts in this directory.

Each script reproduces one seed thread's tables (or measures the model itself, or evaluates the
heuristic read-ahead) in one run and prints the published figures beside the simulated ones
with their ratios. The calibration of devices lives in
``pytest_readstream.bench.calibration`` and the tables in ``pytest_readstream.bench.tables``,
so that ``readstream bench seeds`` and these scripts share them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from pytest_readstream._cli_args import output_problem, positive_int, scale_fraction
from pytest_readstream.bench.seeds import run_seed_benchmarks
from pytest_readstream.bench.tables import build_tables

__all__ = ["seed_script"]


def seed_script(thread: str, argv: Sequence[str] | None = None) -> int:
    """Run the seed tables of one thread; exit status 1 if a check failed."""
    keys = [t.key for t in build_tables() if t.thread == thread]
    p = argparse.ArgumentParser(description=f"Reproduce the {thread} thread's tables on the model.")
    p.add_argument("--json", help="write the rows to this path")
    p.add_argument("--plot", help="write published-vs-simulated PNGs into this directory")
    p.add_argument("--jobs", type=positive_int, default=None, help="worker processes (default 2)")
    p.add_argument("--scale", type=scale_fraction, default=1.0, help="shrink the tables (0 < scale <= 1)")
    p.add_argument("--table", action="append", choices=keys, help="only this table (repeatable)")
    args = p.parse_args(argv)
    if problem := output_problem("--json", args.json):
        p.error(problem)
    if args.plot and not os.path.isdir(args.plot):
        p.error(f"--plot {args.plot}: not a directory (create it first)")
    rows = run_seed_benchmarks(
        json_path=args.json, plot_dir=args.plot, scale=args.scale, jobs=args.jobs, tables=args.table or keys
    )
    return 1 if any(r.get("ok") is False for r in rows) else 0
