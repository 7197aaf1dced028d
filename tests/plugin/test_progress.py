"""Issue 15 item 7: long commands show progress on stderr, whole lines when it is not a terminal."""

from __future__ import annotations

import io
import re

from pytest_readstream._progress import Progress
from pytest_readstream.bench.seeds import run_seed_benchmarks


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_flushed_line_per_step() -> None:
    log = io.StringIO()  # not a terminal: a redirected log
    progress = Progress("readstream bench seeds", log)
    progress.add(2)
    assert log.getvalue() == ""  # nothing before a step ends
    progress.step("calibrated checksums")
    progress.add(1)
    progress.step("ran seqscan (1.5 s)")
    progress.step("ran vacuum (0.2 s)")
    progress.close()
    lines = log.getvalue().splitlines()
    assert [re.sub(r"\(\d+ s\)$", "(T)", line) for line in lines] == [
        "readstream bench seeds: [1/2] calibrated checksums (T)",
        "readstream bench seeds: [2/3] ran seqscan (1.5 s) (T)",
        "readstream bench seeds: [3/3] ran vacuum (0.2 s) (T)",
    ]
    assert "\r" not in log.getvalue()


def test_a_terminal_gets_one_bar_redrawn_in_place() -> None:
    tty = _Tty()
    progress = Progress("readstream bench seeds", tty)
    progress.add(4)
    progress.step("calibrated checksums")
    progress.close()
    text = tty.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    last = text.rstrip("\n").split("\r")[-1]
    assert last.startswith("readstream bench seeds [" + "#" * 7 + "-" * 23 + "] 1/4 calibrated checksums")


def test_seed_benchmarks_report_every_calibration_and_run() -> None:
    log = io.StringIO()
    progress = Progress("readstream bench seeds", log)
    rows = run_seed_benchmarks(
        tables=["streamify-pgstattuple"], scale=0.5, jobs=1, out=io.StringIO(), progress=progress
    )
    lines = log.getvalue().splitlines()
    assert rows and lines
    assert (
        lines[0].startswith("readstream bench seeds: [1/")
        and " calibrated streamify-pgstattuple " in lines[0]
    )
    assert all(" ran " in line for line in lines[1:])
    done, total = re.match(r".*\[(\d+)/(\d+)\]", lines[-1]).groups()  # type: ignore[union-attr]
    assert done == total == str(len(lines))
