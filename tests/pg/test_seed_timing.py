"""``readstream bench seeds --server``: which seed rows a stock server runs, and a tiny one live.

The live test runs the hash-index VACUUM of the streamify thread (its 0 ms write-delay row) at
1/256 of the thread's size, one round. Its assertions do not depend on the machine's load: the
server's read requests (the interposer's ledger) equal the model's on the same relation, every
request waited at least the thread's latency, and the model, given the service time the reads
really had, is never more than 25 % slower than the server.
"""

from __future__ import annotations

import pytest

from pytest_readstream.postgres.fidelity import seed_timing


def test_the_unpatched_rows_a_stock_server_runs() -> None:
    cases, skipped = seed_timing.seed_cases()
    rows = {(c.key, c.row) for c in cases}
    # The sample scans' master rows, SYSTEM_TIME's unpatched rows but io_uring, pgstattuple_approx
    # and hash VACUUM with workers, and the medium table's pure read-delay row.
    assert ("sample-64gib", "SYSTEM(1) master") in rows
    assert ("sample-64gib", "BERNOULLI(100) LIMIT 100 master") in rows
    assert ("sample-system-time", "sync eic=16 unpatched") in rows
    assert ("streamify-pgstattuple", "worker=3 base") in rows
    assert ("streamify-hash-vacuum", "worker=12 base") in rows
    assert ("streamify-hash-vacuum-medium", "write-delay 0 ms base") in rows
    assert not any("patch" in row and "unpatched" not in row for _, row in rows)
    why = {(s["key"], s["row"]): s["reason"] for s in skipped}
    assert "io_uring" in why[("streamify-pgstattuple", "io_uring base")]
    assert "development branch" in why[("checksums", "io_method=sync HEAD")]
    assert "write delay" in why[("streamify-hash-vacuum-medium", "write-delay 2 ms base")]
    for c in cases:
        # Stock 18.6's variant, reads delayed only, and the scale each table states.
        assert c.scale == seed_timing.DEFAULT_SCALES[c.key]
        assert c.device.write_latency_us == 0 and c.device.sequential_latency_us is None
        assert c.request.settings.debug_io_direct == "" and c.model_request.settings.debug_io_direct == "data"
        assert c.calibration_request.settings.io_method == "sync"


def test_a_scale_shrinks_every_table() -> None:
    cases, _ = seed_timing.seed_cases(["sample-64gib"], scale=1 / 4096)
    assert {c.scale for c in cases} == {1 / 4096}
    assert {c.request.relation.nblocks for c in cases} == {2048}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tables": ["nope"]}, "unknown seed table(s) nope: allowed sample-64gib"),
        ({"scale": 2.0}, "scale = 2.0 is not valid; allowed: 0 < scale <= 1"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        seed_timing.seed_cases(**kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--server", "--repeats", "0"], "readstream bench: --repeats 0 is not valid; allowed: 1..99"),
        (["--server", "--scale", "3"], "readstream bench: --scale 3 is not valid; allowed: 0 < scale <= 1"),
        (["--server", "--plot", "."], "readstream bench: --plot is not valid with --server"),
        (["--server", "--table", "nope"], "readstream bench: unknown seed table(s) nope"),
        (["--repeats", "3"], "readstream bench: --repeats is valid only with --server"),
        (["--markdown", "x.md"], "readstream bench: --markdown is valid only with --server"),
    ],
)
def test_bad_server_options_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_readstream.cli import main

    assert main(["bench", "seeds", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_the_printed_rows() -> None:
    row = {
        "key": "sample-64gib",
        "table": "64 GiB table",
        "row": "SYSTEM(1) master",
        "scale": 1 / 1024,
        "published": 7530.0,
        "published_unit": "ms",
        "latency_us": 75.0,
        "service_us": 96.0,
        "requests": 85,
        "model_requests": 85,
        "overhead_ms": 1.5,
        "model_ms": 10.0,
        "server_ms": 8.0,
        "stalls_ms": 0.0,
        "ratio": 1.25,
    }
    result = {"server_version": "18.6", "repeats": 3, "rows": [row], "skipped": []}
    text = seed_timing.format_seed_server(result)
    assert "1/1024" in text and "7530 ms" in text and "outside" not in text
    result["rows"] = [{**row, "ratio": 1.3}]
    assert "<-- outside 0.8-1.25" in seed_timing.format_seed_server(result)
    md = seed_timing.markdown_seed_server(result)
    assert (
        "| sample-64gib | SYSTEM(1) master | 1/1024 | 75 µs | 96 µs | 85 | 1.50 | 10.00 | 8.00 | 1.30 | 0.00 | — | 7530 ms |"
        in md
    )


def test_tables_with_no_server_row_start_no_server() -> None:
    cases, skipped = seed_timing.seed_cases(["checksums"])
    assert cases == [] and len(skipped) == 2
    result = seed_timing.run_seed_server(cases, repeats=1)
    result["skipped"] = skipped
    text = seed_timing.format_seed_server(result)
    assert text.startswith("no row of these tables runs on a stock server") and "development branch" in text


@pytest.mark.postgres
def test_a_tiny_seed_row_live() -> None:
    from pytest_readstream.postgres import PgNotAvailable
    from pytest_readstream.postgres.impl.implementation import PostgresImplementation

    try:
        impl = PostgresImplementation(pytest_mode=False)
    except PgNotAvailable as err:
        pytest.skip(f"no PostgreSQL 18 available: {err}")
    if impl.fault_injection_unavailable is not None:
        impl.close()
        pytest.skip(impl.fault_injection_unavailable)
    cases, _ = seed_timing.seed_cases(["streamify-hash-vacuum-medium"], scale=1 / 256)
    try:
        result = seed_timing.run_seed_server(cases, repeats=1, impl=impl)
    finally:
        impl.close()
    (row,) = result["rows"]
    text = seed_timing.format_seed_server(result)
    assert row["requests"] == row["model_requests"] > 0, text
    assert row["service_us"] >= row["latency_us"], text
    assert row["server_ms"] > 0 and 0 < row["ratio"] <= 1.25, text
