"""The scripts under ``bench/`` refuse bad values with one usage error, before any simulation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    "script, args, fragment",
    [
        ("readahead.py", ["--scale", "0"], "argument --scale: 0.0 is out of range: allowed 0 < scale <= 1"),
        ("readahead.py", ["--json", "{missing}/x.json"], "directory {missing} does not exist"),
        ("readahead.py", ["--plot", "{missing}/x.png"], "directory {missing} does not exist"),
        ("seed_streamify.py", ["--scale", "1.5"], "argument --scale: 1.5 is out of range"),
        ("seed_sample_scan.py", ["--jobs", "0"], "argument --jobs: 0 is invalid: allowed >= 1"),
        ("seed_online_checksums.py", ["--json", "{tmp}"], "is a directory; give a file path"),
        ("seed_online_checksums.py", ["--plot", "{missing}"], "not a directory (create it first)"),
        ("model.py", ["--nblocks", "0"], "argument --nblocks: 0 is invalid: allowed >= 1"),
        ("model.py", ["--rss-blocks", "-1"], "argument --rss-blocks: -1 is invalid: allowed >= 0"),
        ("model.py", ["--json", "{missing}/m.json"], "directory {missing} does not exist"),
    ],
)
def test_bad_values_end_with_one_usage_error(
    script: str, args: list[str], fragment: str, tmp_path: Path
) -> None:
    if not (_BENCH / script).is_file():
        pytest.skip("the bench scripts are part of a checkout, not of the wheel")
    names = {"missing": str(tmp_path / "missing"), "tmp": str(tmp_path)}
    argv = [a.format(**names) for a in args]
    proc = subprocess.run(
        [sys.executable, str(_BENCH / script), *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}: error: ") and fragment.format(**names) in last, proc.stderr
    assert "Traceback" not in proc.stderr
