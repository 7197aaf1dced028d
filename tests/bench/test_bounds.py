"""``readstream bench model --bounds``: scans that do less than the model, and bound its ratio.

The bounds are evidence only if they do the work they claim: the fused lane must leave the
buffer pool as the model's own scan does, and each variant must drop exactly what it names.
"""

from __future__ import annotations

import io
import json

import pytest

from pytest_readstream.bench.bounds import (
    LANE_VARIANTS,
    floor_scan,
    format_bounds,
    run_bounds_benchmark,
    run_lane,
)
from reference_impl import (
    BlockRangeReadStreamPrivate,
    Instance,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)


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
