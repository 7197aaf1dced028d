"""Heuristic read-ahead on unstreamed paths: every workload without and with it.

Usage: ``python bench/readahead.py [--json PATH] [--plot FILE.png] [--scale S]``

Prints, per workload, simulated time and reads without → with read-ahead, and what the
read-ahead did: speculative blocks, blocks used, blocks wasted (evicted or never used), valid
pages it evicted. The workloads where it loses are part of the table.
"""

from __future__ import annotations

import argparse
import sys

from pytest_readstream._cli_args import output_problem, scale_fraction
from pytest_readstream.bench.readahead import format_readahead, run_readahead_evaluation


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the rows to this path")
    p.add_argument("--plot", help="write the evaluation plot (PNG) to this path")
    p.add_argument("--scale", type=scale_fraction, default=1.0, help="shrink the workloads (0 < scale <= 1)")
    args = p.parse_args()
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if problem := output_problem(option, path):
            p.error(problem)
    rows = run_readahead_evaluation(args.json, args.plot, scale=args.scale)
    print(format_readahead(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
