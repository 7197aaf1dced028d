"""Bitmap heap scan (``reference_impl.scans.bitmapscan``) and its TID bitmap, scans.md §2.8.

Oracles: rows counted independently from the heap content and the index's key→TID map; the
read rules of scans.md §2.8 (index pages first, one per read, context normal; heap runs combined
with the ramp, a gap starts a new read, no strategy); tidbitmap.c's lossification rules; and the
unstreamed (PostgreSQL 17) variant.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, ModelUsageError, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans._heapfetch import TidDigest, key_range
from reference_impl.scans._tidbitmap import PAGES_PER_CHUNK, TIDBitmap, tbm_calculate_entries

SPECS = st.builds(
    RelationSpec,
    nblocks=st.integers(1, 300),
    tuples_per_page=st.one_of(st.integers(1, 30), st.tuples(st.just("poisson"), st.floats(1, 15))),
    dead_fraction=st.sampled_from([0.0, 0.2]),
    indexes=st.builds(lambda c: (IndexSpec("btree", correlation=c),), st.sampled_from([1.0, 0.95, 0.5, 0.0])),
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


def _run(spec, settings_, cached, variant, scan="bitmapscan", **params):
    inst = Instance(settings_)
    rel = build_relation(inst, spec)
    if cached:
        inst.prewarm(rel.heap, cached)
    return run_scan(scan, inst.backend(), rel.heap, variant=variant, **params), rel


def _expected(rel, lo: int, hi: int) -> tuple[int, int, list[int]]:
    bt = rel.index_content()
    blocks, offsets = bt.heap_tids_of_ranks(lo, hi)
    d = TidDigest()
    rows = 0
    for b in sorted(set(blocks.tolist())):
        live = rel.content.page(0, b).live_offsets
        mine = offsets[blocks == b]
        taken = mine[np.isin(mine, live)]
        d.add(b, taken)
        rows += taken.size
    return rows, d.value, sorted(set(blocks.tolist()))


@settings(max_examples=25, deadline=None)
@given(spec=SPECS, settings_=SETTINGS, data=st.data())
def test_streamed_and_unstreamed_agree(spec, settings_, data) -> None:
    params = {
        "key_start": data.draw(st.floats(0, 1), label="key_start"),
        "selectivity": data.draw(st.floats(0, 1), label="selectivity"),
        "work_mem_kb": data.draw(st.sampled_from([64, 4096]), label="work_mem_kb"),
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
    if params["limit"] is None:
        assert s.read_count <= u.read_count
        lo, hi = s.result["key_range"]
        rows, digest, blocks = _expected(rel, lo, hi)
        assert (s.result["rows"], s.result["tid_digest"], s.blocks) == (rows, digest, blocks)
    else:
        window = max(x["capacity"] for x in s.stream_stats)
        assert s.read_count <= u.read_count + window


def test_index_pages_first_then_heap_runs() -> None:
    spec = RelationSpec(nblocks=600, tuples_per_page=10, indexes=(IndexSpec("btree"),))
    s, rel = _run(
        spec,
        Settings(io_method="sync"),
        [],
        "streamed",
        key_start=0.1,
        selectivity=0.2,
        metapage_cached=False,
    )
    bt = rel.index_content()
    index_reads = [r for r in s.reads if r.relation == "t_btree"]
    heap_reads = [r for r in s.reads if r.relation == "t"]
    # Every index page is read before the first heap page, one page per read, context normal.
    assert s.reads[: len(index_reads)] == index_reads
    assert all(r.nblocks == 1 and r.context == "normal" for r in index_reads)
    lo, _hi = s.result["key_range"]
    first_leaf = bt.leaf_of_rank(lo)
    assert s.result["index_pages"][:3] == [0, *bt.descent(first_leaf)]
    assert [r.start for r in index_reads] == s.result["index_pages"]
    # Heap blocks 60..179 in one run: the ramp of a sequential stream.
    assert s.blocks == list(range(60, 180))
    assert [r.nblocks for r in heap_reads] == [1, 2, 4, 8, 16, 16, 16, 16, 16, 16, 9]
    assert all(r.context == "normal" for r in heap_reads)


def test_gaps_start_new_reads() -> None:
    spec = RelationSpec(nblocks=2000, tuples_per_page=4, indexes=(IndexSpec("btree", correlation=0.0),))
    s, _ = _run(spec, Settings(io_method="worker"), [], "streamed", selectivity=0.02)
    blocks = s.blocks
    heap_reads = [r for r in s.reads if r.relation == "t"]
    covered = [b for r in heap_reads for b in range(r.start, r.start + r.nblocks)]
    assert covered == blocks
    for r in heap_reads:
        assert list(range(r.start, r.start + r.nblocks)) == [
            b for b in blocks if r.start <= b < r.start + r.nblocks
        ]


def test_no_strategy_on_a_large_table() -> None:
    spec = RelationSpec(nblocks=5000, tuples_per_page=1, indexes=(IndexSpec("btree"),))
    s, _ = _run(spec, Settings(), [], "streamed", selectivity=0.5)
    assert set(s.io) == {"normal"}


def test_lossy_pages_give_the_same_rows() -> None:
    spec = RelationSpec(
        nblocks=3000, tuples_per_page=5, dead_fraction=0.1, indexes=(IndexSpec("btree", correlation=0.0),)
    )
    exact, _ = _run(spec, Settings(), [], "streamed", selectivity=0.3, work_mem_kb=4096)
    lossy, _ = _run(spec, Settings(), [], "streamed", selectivity=0.3, work_mem_kb=64)
    assert exact.result["lossy_pages"] == 0 and lossy.result["lossy_pages"] > 0
    assert lossy.result["exact_pages"] + lossy.result["lossy_pages"] == exact.result["exact_pages"]
    for key in ("rows", "tid_digest", "blocks", "index_pages"):
        assert lossy.result[key] == exact.result[key]


def test_tidbitmap_lossify_rules() -> None:
    assert tbm_calculate_entries(0) == 16
    assert tbm_calculate_entries(4 * 1024 * 1024) == 65536
    tbm = TIDBitmap(64 * 16)  # 16 entries
    blocks = np.arange(0, 40, dtype=np.int64) * 3
    tbm.add_tuples(blocks, np.ones(40, dtype=np.int64))
    assert tbm.lossify_calls >= 1
    assert tbm.nentries <= tbm.maxentries
    it = list(tbm.iterate())
    assert [r.blockno for r in it] == blocks.tolist()
    lossy = [r.blockno for r in it if r.lossy]
    # tbm_lossify skips chunk headers (blocks divisible by 256) but starts with the lowest page
    # otherwise; the exact header page is absorbed into the chunk that page creates.
    assert lossy[:2] == [0, 3]
    assert 0 < len(lossy) < 40
    assert all(r.offsets == (1,) for r in it if not r.lossy)


def test_tidbitmap_header_page_added_to_an_existing_chunk() -> None:
    tbm = TIDBitmap(64 * 16)
    tbm.add_tuples(np.array([1, 2, 3, *list(range(5, 40))], dtype=np.int64), np.ones(38, dtype=np.int64))
    before = tbm.nentries
    tbm.add_tuples(np.array([0, PAGES_PER_CHUNK], dtype=np.int64), np.array([4, 4], dtype=np.int64))
    # Block 0 is the header of a chunk that already exists: it becomes a lossy bit, no new entry.
    assert 0 in tbm.chunks[0]
    assert tbm.nentries == before + 1  # only block 256 adds an entry


def test_missing_index_is_a_clear_error() -> None:
    inst = Instance()
    rel = build_relation(inst, RelationSpec(nblocks=10))
    with pytest.raises(ModelUsageError, match="btree"):
        run_scan("bitmapscan", inst.backend(), rel.heap)


def test_key_range() -> None:
    assert key_range(1000, 0.25, 0.1) == (250, 350)
    assert key_range(1000, 0.95, 0.2) == (950, 1000)
    assert key_range(0, 0.5, 0.5) == (0, 0)
