"""The conformance suite's scan facts (``readstream_conformance.test_scan_facts``) on a real
PostgreSQL 18: the facts are PostgreSQL's, so a stock 18.6 server keeps every one it can run.

The one it cannot is the segment cut at scan level: a server reports no read ranges for a
statement (only ``pg_stat_io`` counts), so that test skips with that reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.postgres
def test_stock_18_keeps_every_scan_fact(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "readstream_conformance.test_scan_facts",
        "--readstream-impl=postgres", "--readstream-seed=1", "-p", "no:cacheprovider", "-q", "-rs",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    summary = out.stdout.strip().splitlines()[-1]
    if re.fullmatch(r"\d+ skipped in .*", summary):
        pytest.skip(f"no PostgreSQL server could run the scan facts: {tail[-500:]}")
    assert out.returncode == 0, tail
    assert re.fullmatch(r"\d+ passed, 1 skipped in .*", summary), tail
    assert int(summary.split()[0]) >= 18, tail
    assert "reports no read ranges" in out.stdout, tail
