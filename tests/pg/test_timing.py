"""``readstream oracle --timing``: a small live subset of the timing table, and its arithmetic.

The live test recomputes two rows on the embedded server (a 64-block table, 2 ms per read, median
of three cold runs). Its assertions are chosen so that a loaded machine cannot break them: load
only makes the server slower, and everything the model is given comes from the same interleaved
runs (the per-request service time the server's reads really had, from the interposer's ledger;
the statement's time outside its reads; the CPU between reads with no latency), so

* the model is never more than 25 % slower than the server (ratio <= 1.25) on any row, and
* on the unstreamed row, where 64 sequential 2 ms reads are nearly all of the time, the model is
  within 0.8-1.25 of the server: the CPU the model may miss is a few percent of it.

How a run is split (span, service, CPU between reads, time outside the reads, stalls) is checked
on made-up ledgers, without a server.
"""

from __future__ import annotations

import pytest

from pytest_readstream.postgres.fidelity import timing
from pytest_readstream.postgres.fidelity.timing import TimingCase

pytestmark = pytest.mark.postgres


@pytest.mark.postgres
def test_a_live_subset_of_the_timing_table() -> None:
    from pytest_readstream.postgres.impl.implementation import PostgresImplementation

    impl = PostgresImplementation(pytest_mode=False)
    if impl.fault_injection_unavailable is not None:
        pytest.skip(impl.fault_injection_unavailable)
    chosen = [TimingCase("pg_prewarm", 2000, "sync", 16), TimingCase("pg_prewarm_read", 2000, "sync", 16)]
    try:
        result = timing.run_timing(chosen, nblocks=64, repeats=3, impl=impl)
    finally:
        impl.close()
    rows = {r["scan"]: r for r in result["rows"]}
    table = timing.format_timing(result)
    # Both scans were calibrated with no imposed latency: a CPU factor and the statement's own time.
    assert set(result["calibration"]) == {"pg_prewarm", "pg_prewarm_read"}, table
    for cal in result["calibration"].values():
        assert cal["cpu_scale"] > 0 and cal["overhead_ms"] >= 0, table
    for r in result["rows"]:
        assert len(r["server_runs_ms"]) == 3 and r["server_ms"] in r["server_runs_ms"], table
        assert r["ratio"] <= 1.25, table
        # Every read request waited at least the imposed latency.
        assert r["service_us"] >= 2000, table
        # The statement's time outside its reads is a part of the server's time, not more.
        assert r["overhead_ms"] < r["server_ms"], table
        # The backend's wait for a CPU (the kernel's run-queue time) is a part of it too.
        assert r["runqueue_ms"] is None or 0 <= r["runqueue_ms"] <= r["server_ms"], table
    unstreamed = rows["pg_prewarm_read"]
    assert unstreamed["requests"] == 64, table  # one block per request
    assert 0.8 <= unstreamed["ratio"] <= 1.25, table
    # Streaming pays off on both sides (16 blocks per request against 1).
    (pair,) = result["speedups"]
    assert pair["server_speedup"] > 2 and pair["model_speedup"] > 2, table


def _row(scan: str, model: float, server: float) -> dict[str, object]:
    return {
        "scan": scan,
        "latency_us": 2000,
        "io_method": "sync",
        "eic": 16,
        "direct": False,
        "service_us": 2050.0,
        "requests": 1,
        "server_ms": server,
        "server_runs_ms": [server],
        "model_ms": model,
        "ratio": model / server,
    }


def test_speedups_and_the_printed_table() -> None:
    rows = [_row("pg_prewarm", 10.0, 12.5), _row("pg_prewarm_read", 100.0, 110.0)]
    (s,) = timing.speedups(rows)
    assert s["server_speedup"] == 8.8 and s["model_speedup"] == 10.0
    assert s["deviation"] == round(10.0 / 8.8 - 1, 3)
    result = {
        "server_version": "18.6",
        "nblocks": 64,
        "repeats": 1,
        "calibration": None,
        "rows": rows,
        "speedups": [s],
    }
    text = timing.format_timing(result)
    assert "pg_prewarm_read" in text and "0.91" in text and "more than 15 % apart" not in text
    md = timing.markdown_timing(result)
    assert md.count("\n| pg_prewarm") == 2 and "| 2 ms | sync | 16 | 8.80x | 10.00x | +13.6% |" in md


def test_cases_are_checked() -> None:
    assert len(timing.cases()) == 5 * 2 * 2 * 2
    with pytest.raises(ValueError, match=r"timed scan\(s\) \['indexscan'\] are not valid; allowed: seqscan"):
        timing.cases(scans=["indexscan"])
    with pytest.raises(ValueError, match=r"latency -5 µs is not valid"):
        timing.cases(latencies=[-5])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--timing", "--latency", "-1"],
            "readstream oracle: latency -1 µs is not valid; allowed: an int 0..1000000",
        ),
        (["--timing", "--scan", "indexscan"], "readstream oracle: timed scan(s) ['indexscan'] are not valid"),
        (["--timing", "--nblocks", "3"], "readstream oracle: --nblocks 3 is not valid; allowed: 16..131072"),
        (["--timing", "--repeats", "0"], "readstream oracle: --repeats 0 is not valid; allowed: 1..99"),
        (["--timing", "--pg-dsn", "host=x"], "readstream oracle: --timing needs a server the harness starts"),
    ],
)
def test_bad_timing_options_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_readstream.cli import main

    assert main(["oracle", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_direct_rows_are_marked() -> None:
    rows = [
        {**_row("pg_prewarm", 10.0, 12.5), "direct": True},
        {**_row("pg_prewarm_read", 100.0, 110.0), "direct": True},
    ]
    (s,) = timing.speedups(rows)
    assert s["direct"] is True
    result = {
        "server_version": "18.6",
        "nblocks": 64,
        "repeats": 1,
        "calibration": None,
        "rows": rows,
        "speedups": [s],
    }
    assert "0.80 direct" in timing.format_timing(result) and "eic 16, direct: server" in timing.format_timing(
        result
    )
    assert "| 2 ms (direct) | sync | 16 |" in timing.markdown_timing(result)


def _ns(us: float) -> int:
    return int(us * 1000)


def test_a_run_is_split_into_reads_cpu_statement_and_stalls() -> None:
    # Three 200 µs reads; 30 µs of CPU between the first two, a 1.5 ms stall before the third,
    # the middle read woke up 1.2 ms late; 2 ms of statement around them.
    iv = [(_ns(1000), _ns(1200)), (_ns(1230), _ns(2630)), (_ns(4130), _ns(4330))]
    f = timing.split_run(0.00533, iv, 200.0)
    assert f["requests"] == 3
    assert f["span"] == pytest.approx(3330.0)
    assert f["busy"] == pytest.approx(200 + 1400 + 200)
    assert f["outside"] == pytest.approx(5330 - 3330)
    assert f["mean_service"] == pytest.approx(600.0)
    # Only the part of a wait beyond STALL_US (1 ms) over the step's own time is a stall.
    assert f["stalls"] == pytest.approx((1400 - 200 - 1000) + (1500 - 1000))
    assert f["mean_unstalled_service"] == pytest.approx((1800 - 200) / 3)
    assert f["cpu"] == pytest.approx(30 + 1500 - 500)
    empty = timing.split_run(0.001, [], 200.0)
    assert empty["requests"] == 0 and empty["outside"] == pytest.approx(1000.0)


def test_the_model_side_adds_the_statement_and_scales_cpu() -> None:
    from dataclasses import fields

    from reference_impl.costs import CpuCosts

    doubled = timing.scaled_costs(2.0)
    assert all(getattr(doubled, f.name) == 2 * getattr(CpuCosts(), f.name) for f in fields(CpuCosts))
    case = TimingCase("seqscan", 200, "sync", 1)
    req = timing._request(case, timing._spec(32), model=True)
    slow = timing.model_ms(req, 200.0, doubled)
    fast = timing.model_ms(req, 200.0, None)
    assert slow > fast > 0
    # More latency per request, more time: the served figure drives the model.
    assert timing.model_ms(req, 400.0, None) > fast
