"""Index scan heap fetches (``reference_impl.scans.indexscan``), scans.md §2.9.

Oracles: rows recomputed from the index's key→TID map and the heap content; scans.md §2.9
(unstreamed: one single-block read per heap block change, even for consecutive blocks; index
pages one per read without strategy); the streamed prototype must fetch the same blocks in the
same order and never read more.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans._heapfetch import TidDigest

SPECS = st.builds(
    RelationSpec,
    nblocks=st.integers(1, 300),
    tuples_per_page=st.one_of(st.integers(1, 30), st.tuples(st.just("poisson"), st.floats(1, 15))),
    dead_fraction=st.sampled_from([0.0, 0.2]),
    indexes=st.builds(lambda c: (IndexSpec("btree", correlation=c),), st.sampled_from([1.0, 0.99, 0.8, 0.0])),
    seed=st.integers(0, 2**32),
)
SETTINGS = st.builds(
    Settings,
    io_method=st.sampled_from(["sync", "worker", "io_uring"]),
    effective_io_concurrency=st.sampled_from([0, 1, 16, 64]),
    io_combine_limit=st.sampled_from([1, 4, 16]),
    shared_buffers=st.sampled_from([2048, 4096]),
    debug_io_direct=st.sampled_from(["", "data"]),
)


def _run(spec, settings_, cached, variant, **params):
    inst = Instance(settings_)
    rel = build_relation(inst, spec)
    if cached:
        inst.prewarm(rel.heap, cached)
    return run_scan("indexscan", inst.backend(), rel.heap, variant=variant, **params), rel


@settings(max_examples=25, deadline=None)
@given(spec=SPECS, settings_=SETTINGS, data=st.data())
def test_streamed_and_unstreamed_agree(spec, settings_, data) -> None:
    params = {
        "key_start": data.draw(st.floats(0, 1), label="key_start"),
        "selectivity": data.draw(st.floats(0, 0.5), label="selectivity"),
        "metapage_cached": data.draw(st.booleans(), label="metapage_cached"),
        "limit": data.draw(st.one_of(st.none(), st.integers(0, 300)), label="limit"),
    }
    n = spec.nblocks
    cached = sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n), label="cached"))
    s, rel = _run(spec, settings_, cached, "streamed", **params)
    u, _ = _run(spec, settings_, cached, "unstreamed", **params)
    assert s.error is None and u.error is None
    assert s.result == u.result
    assert s.blocks == u.blocks
    assert s.pinned_after == u.pinned_after == 0
    s_index, u_index = s.notes["index_pages"], u.notes["index_pages"]
    if params["limit"] is None:
        assert s_index == u_index
        assert s.read_count <= u.read_count
        lo, hi = s.result["key_range"]
        blocks, offsets = rel.index_content().heap_tids_of_ranks(lo, hi)
        d = TidDigest()
        rows = 0
        for b, o in zip(blocks.tolist(), offsets.tolist()):
            if o in rel.content.page(0, b).live_offsets:
                d.add(b, [o])
                rows += 1
        assert (s.result["rows"], s.result["tid_digest"]) == (rows, d.value)
        changes = [b for i, b in enumerate(blocks.tolist()) if i == 0 or blocks[i - 1] != b]
        assert s.blocks == changes
    else:
        # After a LIMIT the stream has looked ahead: at most a window of heap blocks more, and
        # the leaves its callback walked to find them, which continue the unstreamed scan's
        # leaves in the order an unlimited scan reads them (scans.md §2.9; the streamed
        # prototype consumes the index ahead of the heap fetches).
        window = max(x["capacity"] for x in s.stream_stats)
        heap_reads = lambda r: sum(1 for x in r.reads if x.relation == rel.heap.name)  # noqa: E731
        assert heap_reads(s) <= heap_reads(u) + window
        full, _ = _run(spec, settings_, cached, "unstreamed", **{**params, "limit": None})
        assert s_index[: len(u_index)] == u_index
        assert s_index == full.notes["index_pages"][: len(s_index)]
        index_reads = lambda r: r.read_count - heap_reads(r)  # noqa: E731
        assert index_reads(s) <= index_reads(u) + len(s_index) - len(u_index)


def test_after_a_limit_the_stream_has_read_further_leaves() -> None:
    # Found by the property above: 28 tuples a page, one-block reads, LIMIT 113. The consumer
    # needs 5 heap blocks and leaves 0, 3, 1; the stream's callback has looked 22 blocks further
    # and walked leaves 2 and 4 to find them. More reads than unstreamed + window (32 > 8 + 23),
    # all of them accounted for.
    spec = RelationSpec(
        nblocks=53, tuples_per_page=28, indexes=(IndexSpec("btree", correlation=1.0),), seed=0
    )
    settings_ = Settings(io_method="sync", effective_io_concurrency=64, io_combine_limit=1)
    params = {"key_start": 0.0, "selectivity": 0.5, "metapage_cached": False, "limit": 113}
    s, _ = _run(spec, settings_, [], "streamed", **params)
    u, _ = _run(spec, settings_, [], "unstreamed", **params)
    assert s.result == u.result and s.blocks == u.blocks == [0, 1, 2, 3, 4]
    assert (u.notes["index_pages"], s.notes["index_pages"]) == ([0, 3, 1], [0, 3, 1, 2, 4])
    assert [x.start for x in s.reads if x.relation == "t"] == list(range(27))
    assert (s.read_count, u.read_count) == (32, 8)


def test_one_single_block_read_per_heap_block_unstreamed() -> None:
    spec = RelationSpec(nblocks=400, tuples_per_page=10, indexes=(IndexSpec("btree"),))
    u, _rel = _run(spec, Settings(io_method="worker"), [], "unstreamed", key_start=0.25, selectivity=0.25)
    heap = [r for r in u.reads if r.relation == "t"]
    index = [r for r in u.reads if r.relation == "t_btree"]
    assert [(r.start, r.nblocks) for r in heap] == [(b, 1) for b in range(100, 200)]
    assert all(r.synchronous and r.context == "normal" for r in heap)
    assert all(r.nblocks == 1 and r.context == "normal" for r in index)
    assert [r.start for r in index] == u.notes["index_pages"]
    # The streamed prototype turns the correlated index into a sequential stream.
    s, _ = _run(spec, Settings(io_method="worker"), [], "streamed", key_start=0.25, selectivity=0.25)
    assert [r.nblocks for r in s.reads if r.relation == "t"][:5] == [1, 2, 4, 8, 16]


def test_repeated_blocks_are_fetched_again_without_a_read() -> None:
    spec = RelationSpec(nblocks=50, tuples_per_page=20, indexes=(IndexSpec("btree", correlation=0.0),))
    for variant in ("streamed", "unstreamed"):
        r, _ = _run(spec, Settings(), [], variant, selectivity=0.5)
        assert r.result["heap_fetches"] > 50
        assert sum(x.nblocks for x in r.reads if x.relation == "t") == len(set(r.blocks))
        assert np.all(np.isin(r.blocks, np.arange(50)))


def _desc_run(scan: str, key_start: float, selectivity: float, descending: bool):
    inst = Instance(Settings(io_method="sync"), device="nvme")
    spec = RelationSpec(
        name="t", nblocks=1000, tuple_width=100, indexes=(IndexSpec("btree", descending=descending),), seed=46
    )
    srel = build_relation(inst, spec)
    res = run_scan(scan, inst.backend(), srel.heap, key_start=key_start, selectivity=selectivity)
    assert res.error is None, res.error
    return res


def test_descending_btree_lists_the_heap_backwards() -> None:
    # CREATE INDEX ... (id DESC): rank 0 is the largest key, the last heap tuple, so an index
    # scan fetches heap pages in descending order.
    res = _desc_run("indexscan", 0.2, 0.01, descending=True)
    heap = [r.start for r in res.reads if r.relation == "t"]
    # Ranks 12,200..12,809 in DESC order are the keys 48,190..48,799: heap blocks 790..799.
    assert heap == list(range(799, 789, -1))


def test_descending_range_starting_at_a_leaf_boundary_reads_the_leaf_before() -> None:
    # key_start 0.6 of 61,000 keys is rank 36,600 = 100 x 366, the first entry of leaf 100. On a
    # DESC column the range starts with "id < b": _bt_first lands on leaf 99 and steps right,
    # as PostgreSQL 18.6 does (bitmapscan-descending: 18 reads, not 17).
    desc = _desc_run("bitmapscan", 0.6, 0.05, descending=True)
    asc = _desc_run("bitmapscan", 0.6, 0.05, descending=False)
    index_reads = lambda r: [x.start for x in r.reads if x.relation == "t_btree"]  # noqa: E731
    assert len(index_reads(desc)) == len(index_reads(asc)) + 1
    assert desc.result["rows"] == asc.result["rows"] == 3050
    # Not at a boundary: the same leaves either way.
    assert len(index_reads(_desc_run("bitmapscan", 0.31, 0.01, True))) == len(
        index_reads(_desc_run("bitmapscan", 0.31, 0.01, False))
    )
