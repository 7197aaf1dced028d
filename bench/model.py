"""How fast and how small the model is (``readstream bench model``), with an optional profile.

Usage: ``python bench/model.py [--json PATH] [--nblocks N] [--rounds N] [--rss-blocks N] [--profile] [--opcodes] [--bounds]``

Prints the model's CPU time per block of a streamed all-miss sequential scan, a bare pin/unpin
loop's, their ratio, blocks per second, and the peak RSS of simulating a 64 GiB scan (in a
subprocess). ``--profile`` adds the model's hot spots (cProfile, own time per function);
``--opcodes`` the bytecode instructions per block of each side, by function (exact, whatever
the machine's load); ``--bounds`` times, in the same rounds, scans that do less than the model
(a floor of the buffer pool's per-block work, a fused lane of the read path, and the lane
without each of three obligations): how low the ratio can go.
"""

from __future__ import annotations

import argparse
import sys

from pytest_readstream._cli_args import non_negative_int, output_problem, positive_int
from pytest_readstream.bench.bounds import run_bounds_benchmark
from pytest_readstream.bench.model import (
    RSS_BLOCKS_64GIB,
    count_opcodes,
    format_opcodes,
    format_profile,
    profile_model,
    run_model_benchmark,
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the figures to this path")
    p.add_argument("--nblocks", type=positive_int, default=200_000, help="blocks of the timed scans")
    p.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds; the fastest is kept")
    p.add_argument(
        "--rss-blocks",
        type=non_negative_int,
        default=RSS_BLOCKS_64GIB,
        help="blocks of the RSS scan (0: skip)",
    )
    p.add_argument("--profile", action="store_true", help="print the model's hot spots")
    p.add_argument("--opcodes", action="store_true", help="print bytecode instructions per block")
    p.add_argument(
        "--bounds", action="store_true", help="time a floor and a fused lane against the bare loop"
    )
    args = p.parse_args()
    if problem := output_problem("--json", args.json):
        p.error(problem)
    run_model_benchmark(
        args.json, nblocks=args.nblocks, rounds=args.rounds, rss_nblocks=args.rss_blocks or None
    )
    if args.profile:
        print()
        print(format_profile(profile_model(min(args.nblocks, 100_000))))
    if args.opcodes:
        print()
        print(format_opcodes(count_opcodes()))
    if args.bounds:
        print()
        run_bounds_benchmark(nblocks=args.nblocks, rounds=args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
