"""Issue 15 item 3: a broken implementation's failures, condensed, and totals that agree.

A stream that leaks its queued pins on ``end()`` (the mutant ``end-leaks-queued-pins``) fails
most lifecycle tests in the call and again at teardown. The condensed view shows one full
report per invariant and phase; the family table counts what pytest's totals count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

SELECTION = ["--pyargs", "readstream_conformance.test_lifecycle", "readstream_conformance.test_order"]
IMPL = "--readstream-impl=mutant:end-leaks-queued-pins"


def _run(tmp_path: Path, *extra: str) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *SELECTION,
            IMPL,
            "-p",
            "no:cacheprovider",
            "--readstream-seed=7",
            *extra,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def _totals(text: str) -> Counter[str]:
    last = text.strip().splitlines()[-1]
    return Counter({word: int(n) for n, word in re.findall(r"(\d+) (failed|passed|errors?|skipped)", last)})


def _table(text: str) -> Counter[str]:
    """Sum of the family table's columns."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("invariant family"))
    cols = lines[start].split()[3:]  # after "invariant family tier"
    sums: Counter[str] = Counter()
    for line in lines[start + 1 :]:
        fields = line.split()
        if len(fields) != len(cols) + 2:
            break
        for col, value in zip(cols, fields[2:]):
            sums[col] += int(value)
    return sums


def test_condensed_view_and_totals(tmp_path: Path) -> None:
    condensed = _run(tmp_path, "-n", "2")
    totals = _totals(condensed)
    assert totals["failed"] > 10 and totals["errors"] > 10, totals
    table = _table(condensed)
    assert (table["passed"], table["failed"], table["error"]) == (
        totals["passed"],
        totals["failed"],
        totals["errors"],
    )
    # One full report per invariant and phase; every other case is one line naming it.
    summary = condensed[condensed.index("violations by invariant (condensed;") :]
    groups = re.findall(
        r"^  \w+ (?:MUST|SHOULD|MAY) (\S+): (\d+) (failed|error at \w+); shown in full: ", summary, re.M
    )
    assert groups and sum(int(n) for _, n, _ in groups) == totals["failed"] + totals["errors"]
    # Counted in the report body: with CI set, pytest repeats each message in its short summary.
    body = condensed.split("short test summary info", 1)[0]
    shortened = body.count("(condensed: the same invariant's ")
    assert shortened == totals["failed"] + totals["errors"] - len(groups)
    assert "rerun: " in summary

    full = _run(tmp_path, "-n", "2", "--readstream-failures=full")
    assert "(condensed: " not in full and "violations by invariant" not in full
    assert _totals(full) == totals
    assert len(condensed.splitlines()) * 3 < len(full.splitlines()), (
        len(condensed.splitlines()),
        len(full.splitlines()),
    )
