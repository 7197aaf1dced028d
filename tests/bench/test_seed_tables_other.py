"""The online-checksums and streamify tables, small: directions, read reductions, Amdahl's law."""

from __future__ import annotations

from ._seeds import assert_directions, by_row, run_small


def test_checksums_reads_and_speedups() -> None:
    rows = run_small(["checksums"], scale=1 / 64)
    assert_directions(rows)
    r = by_row(rows)
    for method in ("sync", "worker"):
        red = r[f"io_method={method} reads reduction"]
        assert red["ok"], red
        assert r[f"io_method={method} speedup"]["ok"]
    # Workers overlap the reads with the writes; sync only makes them fewer.
    assert r["io_method=worker speedup"]["simulated"] > r["io_method=sync speedup"]["simulated"]


def test_pgstattuple_reads_match_the_thread() -> None:
    rows = run_small(["streamify-pgstattuple"], scale=1.0)
    assert_directions(rows)
    r = by_row(rows)
    assert r["io_uring base reads"]["simulated"] == 4139
    assert r["io_uring patch reads"]["simulated"] == 260


def test_write_delay_hides_the_read_speedup() -> None:
    """The thread's point: with a 2 ms write delay VACUUM is write-bound and streaming reads help little."""
    rows = run_small(["streamify-hash-vacuum-medium"], scale=0.25)
    assert_directions(rows)
    r = by_row(rows)
    slow_writes = r["write-delay 2 ms speedup"]["simulated"]
    fast_writes = r["write-delay 0 ms speedup"]["simulated"]
    assert 1.0 < slow_writes < 1.5
    assert fast_writes > 1.5 * slow_writes
