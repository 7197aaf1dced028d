"""The named reasons for the scenarios that cannot agree exactly, each checked to be true.

``backend-prng-seed``: ANALYZE, SYSTEM_ROWS and SYSTEM_TIME take their seed from the backend's
PRNG. The model shows that the compared figure (blocks read) does not depend on that seed while
the block set does; the server shows that REPEATABLE is refused for the stride methods, so the
seed cannot be given. ``real-time-limit``: SYSTEM_TIME's block count depends on how fast time
passes (the model's device), never its order. The checks the oracle runs for a reason are
themselves tested to fail on data that breaks them. ``read-ahead-timing`` (19 and later, an
asynchronous io_method): how far the stream has read ahead follows the device's timing in the
model, and not under io_method=sync.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pytest_readstream._reference_scans import run_scan as model_run
from pytest_readstream.postgres.fidelity.oracle import _is_stride_order, reason_checks, run_model
from pytest_readstream.postgres.fidelity.scenarios import (
    REASONS,
    RELATIONS,
    SCENARIOS,
    Scenario,
)
from pytest_readstream.protocol import ScanRequest
from reference_impl import Settings


def _by_name(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def test_every_reason_used_and_every_check_defined() -> None:
    used = {s.reason for s in SCENARIOS if s.reason} | {r for s in SCENARIOS for _, r in s.reasons_from}
    assert used == set(REASONS)
    from pytest_readstream.postgres.fidelity.oracle import _CHECKS

    for reason in REASONS.values():
        assert set(reason.checks) <= set(_CHECKS)


@pytest.mark.parametrize("seed", [0, 1])
def test_analyze_sample_size_does_not_depend_on_the_seed(seed: int) -> None:
    base = ScanRequest(
        "analyze", relation=RELATIONS["bulk"], params={"statistics_target": 2, "sampler_seed": 5}
    )
    other = ScanRequest(
        "analyze", relation=RELATIONS["bulk"], params={"statistics_target": 2, "sampler_seed": seed}
    )
    a, b = model_run(base), model_run(other)
    assert a.read_bytes == b.read_bytes == (600 + 1) * 8192  # 600 sampled blocks and the VM page
    assert a.reads != b.reads  # the grouping into reads follows the sample


def test_system_rows_block_set_depends_on_the_seed_not_its_size() -> None:
    req = {"relation": RELATIONS["onerow"], "variant": "unstreamed", "params": {"rows": 200}}
    a = model_run(ScanRequest("tablesample_system_rows", **{**req, "params": {"rows": 200, "seed": 1}}))
    b = model_run(ScanRequest("tablesample_system_rows", **{**req, "params": {"rows": 200, "seed": 2}}))
    assert a.read_bytes == b.read_bytes == 200 * 8192
    assert set(a.result["blocks"]) != set(b.result["blocks"])
    assert _is_stride_order(a.result["blocks"], 1500) and _is_stride_order(b.result["blocks"], 1500)


def test_system_time_block_count_follows_the_clock() -> None:
    sc = _by_name("system_time-1ms")
    outs = [
        model_run(
            ScanRequest(sc.scan, relation=sc.relation, variant="unstreamed", params=sc.params, device=d)
        )
        for d in ("nvme", "cloud-1ms")
    ]
    assert outs[0].reads != outs[1].reads
    for out in outs:
        assert out.reads * 8192 == out.read_bytes
        assert _is_stride_order(out.result["blocks"], sc.relation.nblocks)


def _sides(**changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    model = {"reads": 10, "read_bytes": 81920, "io": {"normal": {}}, "visited": [1, 4, 7, 10]}
    server = {"reads": 10, "read_bytes": 81920, "io": {"normal": {}}, "visited": [2, 5, 8, 11]}
    server.update(changes)
    return model, server


def test_reason_checks_fail_when_broken() -> None:
    seed = Scenario("x", "analyze", RELATIONS["onerow"], reason="backend-prng-seed")
    assert all(reason_checks(seed, *_sides()).values())
    assert not reason_checks(seed, *_sides(read_bytes=90112))["read_bytes_equal"]
    assert not reason_checks(seed, *_sides(io={"vacuum": {}}))["contexts_equal"]
    clock = Scenario("y", "tablesample_system_time", RELATIONS["onerow"], reason="real-time-limit")
    assert all(reason_checks(clock, *_sides()).values())
    assert not reason_checks(clock, *_sides(visited=[2, 5, 9]))["stride_order"]
    assert not reason_checks(clock, *_sides(visited=[2, 5, 5]))["stride_order"]
    assert not reason_checks(clock, *_sides(reads=5))["one_block_reads"]


def test_model_side_of_a_reason_scenario_is_a_stride_order() -> None:
    model = run_model(_by_name("system_rows-200"))
    assert len(model["visited"]) == 200 and _is_stride_order(model["visited"], 1500)


@pytest.mark.postgres
@pytest.mark.parametrize("method", ["SYSTEM_ROWS (5)", "SYSTEM_TIME (5)"])
def test_server_refuses_repeatable_for_stride_methods(pg_impl: Any, method: str) -> None:
    with pg_impl.server.connect(pg_impl.database.name) as conn:
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="does not support REPEATABLE"):
            conn.execute(f"SELECT count(*) FROM pg_class TABLESAMPLE {method} REPEATABLE (1)")


def test_read_ahead_timing_applies_from_19_with_asynchronous_io() -> None:
    for name in ("cursor-rollback-worker", "cursor-mixed-worker", "seqscan-limit-ring"):
        sc = _by_name(name)
        assert sc.reason_for() is None and sc.reason_for("18") is None
        assert sc.reason_for("19") == sc.reason_for("master") == "read-ahead-timing"
    assert _by_name("cursor-rollback-sync").reason_for("20devel") is None


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_read_ahead_of_19_follows_the_device_under_worker_not_under_sync(version: str) -> None:
    """From 19 the distance grows only after a real wait: with io_method=worker the blocks read
    ahead of a cursor's rollback follow the device's speed; under sync (every read waited for)
    they do not. The rows returned are the same everywhere."""

    def reads(name: str, device: str) -> tuple[int, Any]:
        sc = _by_name(name)
        out = model_run(
            ScanRequest(
                sc.scan,
                relation=sc.relation,
                params=sc.params,
                settings=Settings(version=version, **sc.settings),
                device=device,
            )
        )
        return out.read_bytes, out.result["rows_per_command"]

    worker = {d: reads("cursor-rollback-worker", d) for d in ("nvme", "ram")}
    sync = {d: reads("cursor-rollback-sync", d) for d in ("nvme", "ram")}
    assert worker["nvme"][0] != worker["ram"][0]
    assert sync["nvme"] == sync["ram"]
    assert {w[1] == s[1] for w in worker.values() for s in sync.values()} == {True}


def test_read_ahead_timing_checks_fail_when_broken() -> None:
    sc = _by_name("cursor-rollback-worker")
    model = {
        "reads": 30,
        "read_bytes": 8192 * 415,
        "io": {"normal": {}},
        "answer": {"rows_per_command": [1000, 0]},
    }
    server = dict(model, reads=25, read_bytes=8192 * 335)
    assert all(reason_checks(sc, model, server, "19").values())
    assert reason_checks(sc, model, server, "18") == {}
    far = dict(server, read_bytes=8192 * (415 - 94))  # GetPinLimit() = 94 blocks at the defaults
    assert not reason_checks(sc, model, far, "19")["read_ahead_bounded"]
    rows = dict(server, answer={"rows_per_command": [999, 0]})
    assert not reason_checks(sc, model, rows, "19")["rows_equal"]
    assert not reason_checks(sc, model, dict(server, io={"bulkread": {}}), "19")["contexts_equal"]


def test_from_19_the_read_ahead_scenarios_run_on_an_imposed_device() -> None:
    """Both sides of a cursor under worker run on 1 ms reads from 19 on (the server through its
    read interposer), none on 18 or under sync."""
    from pytest_readstream.postgres.fidelity.oracle import _request, _server_variant

    sc = _by_name("cursor-rollback-worker")
    for version, device in (("18", None), ("19", "cloud-1ms"), ("20devel", "cloud-1ms")):
        assert sc.device_for(version) == device
        req = _request(sc, _server_variant(sc.scan, version), version)
        assert (req.device, req.impose_device) == ((device, True) if device else ("nvme", False))
    assert _by_name("cursor-rollback-sync").device_for("20devel") is None
    assert _by_name("seqscan-limit-ring").device_for("19") == "cloud-1ms"
