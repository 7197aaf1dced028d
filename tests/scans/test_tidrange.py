"""TID range scan (``reference_impl.scans.tidrange``): streamed vs unstreamed, and scans.md §2.7.

Oracles: the bounds arithmetic of ``heap_set_tidrange`` redone here by hand, the read pattern of
read_stream.md §8.1 ([0] [1–2] [3–6] [7–14] [15–19] for 20 cold blocks), and the unstreamed
variant itself (same answer and pages, never fewer reads).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, Settings
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.tidrange import MAX_OFFSET_NUMBER, tidrange_limits

SPECS = st.builds(
    RelationSpec,
    nblocks=st.integers(0, 400),
    tuples_per_page=st.one_of(st.integers(0, 30), st.tuples(st.just("poisson"), st.floats(0, 20))),
    dead_fraction=st.sampled_from([0.0, 0.2]),
    seed=st.integers(0, 2**32),
)
SETTINGS = st.builds(
    Settings,
    io_method=st.sampled_from(["sync", "worker", "io_uring"]),
    effective_io_concurrency=st.sampled_from([0, 1, 16, 64]),
    io_combine_limit=st.sampled_from([1, 4, 16]),
    shared_buffers=st.sampled_from([1024, 4096]),
    debug_io_direct=st.sampled_from(["", "data"]),
)


def _run(spec, settings_, cached, variant, **params):
    inst = Instance(settings_)
    rel = build_relation(inst, spec)
    if cached:
        inst.prewarm(rel.heap, cached)
    return run_scan("tidrangescan", inst.backend(), rel.heap, variant=variant, **params)


@settings(max_examples=30, deadline=None)
@given(
    spec=SPECS,
    settings_=SETTINGS,
    data=st.data(),
)
def test_streamed_and_unstreamed_agree(spec, settings_, data) -> None:
    n = spec.nblocks
    start = data.draw(st.integers(0, n + 2), label="start_block")
    end = data.draw(st.one_of(st.none(), st.integers(0, n + 2)), label="end_block")
    params = {
        "start_block": start,
        "start_offset": data.draw(st.integers(0, 40), label="start_offset"),
        "end_block": end,
        "end_offset": data.draw(st.integers(0, 40), label="end_offset"),
        "limit": data.draw(st.one_of(st.none(), st.integers(0, 500)), label="limit"),
    }
    cached = (
        sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n), label="cached")) if n else []
    )
    s = _run(spec, settings_, cached, "streamed", **params)
    u = _run(spec, settings_, cached, "unstreamed", **params)
    assert s.error is None and u.error is None
    assert s.result == u.result
    assert s.blocks == u.blocks
    assert s.pinned_after == u.pinned_after == 0
    if params["limit"] is None:
        assert s.read_count <= u.read_count
    else:
        # A LIMIT ends the stream with its look-ahead read but not consumed.
        assert s.read_count <= u.read_count + max(st_["capacity"] for st_ in s.stream_stats)


def test_bounds_follow_heap_set_tidrange() -> None:
    assert tidrange_limits(0, (0, 1), (5, 5)) is None
    assert tidrange_limits(100, (0, 0), (1000, 1)) == (0, 100, (0, 1), (99, MAX_OFFSET_NUMBER))
    assert tidrange_limits(100, (10, 3), (20, 1)) == (10, 11, (10, 3), (20, 1))
    assert tidrange_limits(100, (20, 3), (20, 1)) == (0, 0, (20, 3), (20, 1))
    assert tidrange_limits(100, (150, 1), (200, 1)) == (0, 0, (150, 1), (99, MAX_OFFSET_NUMBER))


def test_read_pattern_and_filtering() -> None:
    spec = RelationSpec(nblocks=100, tuples_per_page=10)
    params = {"start_block": 3, "start_offset": 5, "end_block": 22, "end_offset": 2}
    s = _run(spec, Settings(io_method="sync"), [], "streamed", **params)
    u = _run(spec, Settings(io_method="sync"), [], "unstreamed", **params)
    # 20 cold blocks through the SEQUENTIAL stream: read_stream.md §8.1.
    assert [(r.start, r.nblocks) for r in s.reads] == [(3, 1), (4, 2), (6, 4), (10, 8), (18, 5)]
    assert [(r.start, r.nblocks) for r in u.reads] == [(b, 1) for b in range(3, 23)]
    assert s.result["rows"] == 6 + 18 * 10 + 2
    assert s.blocks == list(range(3, 23))


def test_no_strategy_even_on_a_large_table() -> None:
    spec = RelationSpec(nblocks=5000, tuples_per_page=1)
    s = _run(spec, Settings(), [], "streamed", start_block=100, end_block=4999)
    assert set(s.io) == {"normal"}
    assert s.io["normal"]["read_bytes"] == 4900 * 8192


def test_empty_range_reads_nothing() -> None:
    spec = RelationSpec(nblocks=50, tuples_per_page=3)
    for v in ("streamed", "unstreamed"):
        r = _run(spec, Settings(), [], v, start_block=30, end_block=20)
        assert (r.read_count, r.blocks, r.result["rows"]) == (0, [], 0)


@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_answer_matches_an_independent_count(variant: str) -> None:
    spec = RelationSpec(nblocks=60, tuples_per_page=("poisson", 8), dead_fraction=0.3, seed=5)
    inst = Instance()
    rel = build_relation(inst, spec)
    lo, hi = (7, 2), (40, 4)
    expected = 0
    for b in range(60):
        for o in rel.content.page(0, b).live_offsets.tolist():
            expected += lo <= (b, o) <= hi
    r = run_scan(
        "tidrangescan", inst.backend(), rel.heap, variant=variant,
        start_block=7, start_offset=2, end_block=40, end_offset=4,
    )  # fmt: skip
    assert r.result["rows"] == expected
    assert np.array_equal(r.blocks, np.arange(7, 41))
