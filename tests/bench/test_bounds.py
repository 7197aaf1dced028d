"""``readstream bench model --bounds``: scans that do less than the model, and bound its ratio.

The bounds are evidence only if they do the work they claim: the fused lane must leave the
buffer pool as the model's own scan does, and each variant must drop exactly what it names.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream.bench.bounds import (
    LANE_VARIANTS,
    _FusedLane,
    floor_scan,
    format_bounds,
    run_bounds_benchmark,
    run_lane,
)
from reference_impl import (
    BlockRangeReadStreamPrivate,
    ForkNumber,
    Instance,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.pool import InflightIO


def _model_backend(nblocks: int):  # type: ignore[no-untyped-def]
    """The model benchmark's scan (``bench.model.model_scan``), keeping its backend."""
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="nvme", record_reads=False)
    rel = inst.create_relation("bench", nblocks)
    be = inst.backend()
    stream = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, nblocks))
    while (buf := stream.next_buffer()) >= 0:
        be.release_buffer(buf)
    stream.end()
    return be


def _pool(be) -> dict[str, object]:  # type: ignore[no-untyped-def]
    p = be.pool
    return {
        "mapping": list(p.mapping.items()),  # in the table's order
        "tag": list(p.tag),
        "refcount": list(p.refcount),
        "flags": bytes(p.flags),
        "freelist": list(p.freelist),
        "next_victim": p.next_victim,
        "num_allocs": p.num_allocs,
        "complete_passes": p.complete_passes,
        "shared_blks_read": be.stats.shared_blks_read,
    }


@pytest.mark.parametrize("nblocks", [1000, 16_384, 20_000, 50_000])
def test_the_lane_leaves_the_pool_the_model_leaves(nblocks: int) -> None:
    """The free list phase, the pool exactly full, and one and three passes of the clock."""
    lane, _ = run_lane(nblocks)
    model = _model_backend(nblocks)
    assert _pool(lane) == _pool(model)
    # The usage counts differ only where the clock sweep met buffers that one scan still held
    # in flight and the other did not (the lane keeps 80 pins, the stream up to 94).
    differ = [b for b, (x, y) in enumerate(zip(lane.pool.usage, model.pool.usage)) if x != y]
    assert len(differ) <= 2 * 94
    # The lane's reads go through the device's timetable as the model's do (the model's stream
    # starts with shorter reads while its distance grows, so the counts of reads differ).
    assert lane.storage.device.stats.read_blocks == model.storage.device.stats.read_blocks == nblocks


@pytest.mark.parametrize("device", ["nvme", "hdd"])  # hdd: one channel, a sequential latency
@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 400), st.booleans(), st.integers(0, 2000), st.integers(1, 16)),
        min_size=1,
        max_size=40,
    )
)
def test_the_lanes_issue_is_the_models_worker_and_device(
    device: str, reads: list[tuple[int, bool, int, int]]
) -> None:
    """The lane's inline ``pgaio_worker_submit`` → ``smgrreadv`` → device path gives each read
    the completion time the model's own ``WorkerIOMethod.issue`` gives it, and leaves the worker
    queue and the device's timetable as the model's does, for reads at random times, each
    continuing the previous one (the device's sequential latency) or anywhere."""
    lane_be, lane_rel = _benchmark_backend(4000, device)
    lane = _FusedLane(lane_be, lane_rel, 4000, timetable=True, private_refcount=True, accounting=True)
    model_be, model_rel = _benchmark_backend(4000, device)
    end = 0
    for gap, sequential, anywhere, n in reads:
        start = end if sequential else anywhere
        end = start + n
        lane_be.clock.now += gap
        model_be.clock.now += gap
        done = lane._issue(lane_be.clock.now, start, n)
        ioh = InflightIO(
            model_be.id, model_rel, ForkNumber.MAIN, start, list(range(n)), "normal", False, False, False
        )
        model_be.io_method.issue(model_be.clock.now, ioh, False)
        assert done == ioh.complete_at
    assert _io_state(lane_be) == _io_state(model_be)


def _benchmark_backend(nblocks: int, device: str = "nvme"):  # type: ignore[no-untyped-def]
    inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device=device, record_reads=False)
    return inst.backend(), inst.create_relation("bench", nblocks)


def _io_state(be) -> dict[str, object]:  # type: ignore[no-untyped-def]
    worker = be.io_method
    device = be.storage.device
    return {
        "worker": (list(worker._free), list(worker._queued), worker.dispatched, worker.ios),
        "device": (
            list(device._svc_start),
            list(device._svc_end),
            list(device._bus_start),
            list(device._bus_end),
            list(device._channels),
            device._dense_from,
            dict(device._last_end),
            asdict(device.stats),
        ),
    }


def test_the_lane_charges_the_models_cpu() -> None:
    """Through ``Backend.cpu`` the lane charges what the model's steady state charges: each
    16-block read's allocations, its submission, its completion."""
    charged: dict[str, set[float]] = {"lane": set(), "model": set()}
    for who in charged:
        with pytest.MonkeyPatch.context() as mp:
            real = Backend.cpu

            def cpu(be: Backend, us: float, seen: set[float] = charged[who], real: Any = real) -> None:
                seen.add(us)
                real(be, us)

            mp.setattr(Backend, "cpu", cpu)
            if who == "lane":
                run_lane(20_000)
            else:
                _model_backend(20_000)
    be, _ = _benchmark_backend(10)
    costs = be.costs
    expected = {16 * costs.buffer_alloc_us, costs.io_submit_us, costs.io_complete_us}
    assert expected <= charged["model"]
    assert charged["lane"] == expected  # 20,000 blocks: whole reads only


def test_the_lane_keeps_the_models_time_and_counts() -> None:
    """The lane's simulated time trails the model's by the same amount however long the scan
    (the stream's start-up, whose first reads are shorter), and it counts the same evictions."""
    gaps = set()
    for nblocks in (1000, 20_000, 50_000):
        lane, _ = run_lane(nblocks)
        model = _model_backend(nblocks)
        gaps.add(model.clock.now - lane.clock.now)
        assert lane.stats.io["normal"].evictions == model.stats.io["normal"].evictions
        assert lane.stats.io["normal"].reads <= model.stats.io["normal"].reads
    assert len(gaps) == 1 and 0 < gaps.pop() < 1000


def test_each_variant_drops_what_it_names() -> None:
    n = 20_000
    full, _ = run_lane(n)
    assert full.stats.shared_blks_read == n and full.storage.device.stats.reads > 0
    no_timetable, _ = run_lane(n, timetable=False)
    assert no_timetable.storage.device.stats.reads == 0 and no_timetable.io_method.dispatched == 0
    no_array, _ = run_lane(n, private_refcount=False)
    # The array's clock moves only while the free list lasts (the model's own allocation).
    assert no_array.refs.clock < full.refs.clock
    no_accounting, _ = run_lane(n, accounting=False)
    assert no_accounting.stats.shared_blks_read == 0 and no_accounting.clock.now < full.clock.now
    # What a variant keeps it still does: the same pool either way.
    for be in (no_timetable, no_array, no_accounting):
        assert list(be.pool.mapping.items()) == list(full.pool.mapping.items())
    assert set(LANE_VARIANTS) >= {"lane", "lane without all three"}


def test_the_floor_maps_every_block_and_leaves_no_pin() -> None:
    assert floor_scan(40_000) >= 0  # it raises itself if it left a pin or missed a block


def test_bounds_table_and_json(tmp_path) -> None:
    printed = io.StringIO()
    result = run_bounds_benchmark(nblocks=2000, rounds=2, out=printed)
    text = printed.getvalue()
    assert text == format_bounds(result) + "\n"
    assert {"model", "floor", *LANE_VARIANTS} == set(result["scans"])
    for name, row in result["scans"].items():
        assert len(row["ratios"]) == 2 and all(r > 0 for r in row["ratios"])
        assert row["median_ratio"] == pytest.approx(sum(row["ratios"]) / 2, abs=0.01)
        assert name in text
    assert "round 2" in text.splitlines()[1]
    json.dumps(result)  # the CLI writes it under "bounds"


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="nblocks = 10 is too small"):
        run_bounds_benchmark(nblocks=10)
    with pytest.raises(ValueError, match="rounds = 0"):
        run_bounds_benchmark(nblocks=1000, rounds=0)


def test_cli_bounds(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    import pytest_readstream.bench.bounds as bounds
    import pytest_readstream.bench.model as bench_model
    from pytest_readstream.cli import main

    real_model = bench_model.run_model_benchmark
    real_bounds = bounds.run_bounds_benchmark
    monkeypatch.setattr(
        bench_model,
        "run_model_benchmark",
        lambda json_path=None: real_model(nblocks=1000, rounds=1, rss_nblocks=None),
    )
    monkeypatch.setattr(bounds, "run_bounds_benchmark", lambda: real_bounds(nblocks=1000, rounds=1))
    out_json = tmp_path / "m.json"
    assert main(["bench", "model", "--bounds", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "lane without all three" in out and "ratio to the bare pin/unpin loop" in out
    assert set(json.loads(out_json.read_text())["bounds"]["scans"]) == {"model", "floor", *LANE_VARIANTS}
