"""Index bulk delete (``reference_impl.scans.index_vacuum``): btree, hash and GiST.

Property: on random tables, settings and cache states, each AM's streamed and unstreamed bulk
delete remove the same entries, keep the same ones and consume the same pages, and the streamed
one issues no more reads. Exact tests follow ``scans.md`` §6.3 and §6.4: the btree stream's full
``io_combine_limit`` reads from block 1 and the cleanup metapage read without strategy; the hash
read order (metapage, each bucket then its overflow chain, the bitmap page at the first freed
overflow page, the metapage at the end when cached), the patch's streamed bucket pages; GiST
from the root; ring writes of dirtied index pages.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream import strategies as rs
from reference_impl import Instance, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.index_vacuum import HASH_ITEMS_PER_PAGE
from reference_impl.storage.relation import ForkNumber

MAIN = ForkNumber.MAIN
_SCAN = {"btree": "btvacuumscan", "hash": "hashbulkdelete", "gist": "gistvacuumscan"}


def _bulkdelete(
    spec: RelationSpec, variant: str, cfg: Settings | None = None, warm: Any = None, **params: Any
):
    inst = Instance(cfg if cfg is not None else Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, spec)
    if warm is not None:
        warm(inst, srel)
    be = inst.backend()
    index = srel.index()
    res = run_scan(_SCAN[index.content.kind], be, index, variant=variant, **params)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return inst, srel, res


def _oracle_removed(srel: Any) -> tuple[int, int]:
    """Entries pointing to dead heap tuples, and the others, counted from the heap alone."""
    heap = srel.content
    dead = sum(heap.heap_page(b).ndead for b in range(srel.spec.nblocks))
    return dead, heap.total_entries() - dead


# ------------------------------------------------------------------------------------ property
@st.composite
def _cases(draw: Any) -> tuple[RelationSpec, Settings, int, float, dict[str, Any]]:
    kind = draw(st.sampled_from(("btree", "hash", "gist")))
    if kind == "hash":
        ispec = IndexSpec(
            "hash",
            overflow=draw(st.sampled_from((0, 1, 3, ("uniform", 0, 2)))),
            overflow_layout=draw(st.sampled_from(("grouped", "interleaved"))),
        )
    else:
        ispec = IndexSpec(kind, correlation=draw(st.sampled_from((1.0, 0.3, 0.0))))
    spec = RelationSpec(
        name="t",
        nblocks=draw(st.integers(1, 120)),
        tuples_per_page=draw(st.sampled_from((None, 20, ("poisson", 30)))),
        dead_fraction=draw(st.sampled_from((0.0, 0.05, 0.5, 1.0))),
        indexes=(ispec,),
        seed=draw(st.integers(0, 2**31)),
    )
    cfg = draw(rs.settings(io_methods=("sync", "worker"), max_shared_buffers=4096))
    cfg = cfg.replace(shared_buffers=max(cfg.shared_buffers, 2048))
    params: dict[str, Any] = {"buffer_usage_limit": draw(st.sampled_from((None, 0, 128)))}
    if kind == "hash":
        params["hash_metapage_cached"] = draw(st.booleans())
    return spec, cfg, draw(st.integers(0, 2**31)), draw(st.sampled_from((0.0, 0.5))), params


def _warm(seed: int, fraction: float) -> Any:
    def warm(inst: Instance, srel: Any) -> None:
        rng = random.Random(seed)
        index = srel.index()
        inst.prewarm(index, [b for b in range(index.nblocks(MAIN)) if rng.random() < fraction])

    return warm


@settings(max_examples=15)
@given(case=_cases())
def test_streamed_and_unstreamed_bulk_delete_agree(case: Any) -> None:
    spec, cfg, seed, fraction, params = case
    _, srel, plain = _bulkdelete(spec, "unstreamed", cfg, _warm(seed, fraction), **params)
    _, _, stream = _bulkdelete(spec, "streamed", cfg, _warm(seed, fraction), **params)
    assert stream.result == plain.result
    assert stream.blocks == plain.blocks
    assert stream.read_count <= plain.read_count
    removed, kept = _oracle_removed(srel)
    assert plain.result["tuples_removed"] == removed
    assert plain.result["num_index_tuples"] == kept


# ------------------------------------------------------------------------------------ btree
def test_btree_stream_reads_full_combined_reads_from_block_1() -> None:
    spec = RelationSpec(name="t", nblocks=400, dead_fraction=0.05, indexes=(IndexSpec("btree"),), seed=4)
    _, srel, stream = _bulkdelete(spec, "streamed", Settings(io_method="worker"))
    _, _, plain = _bulkdelete(spec, "unstreamed", Settings(io_method="worker"))
    n = srel.index().nblocks(MAIN)
    ring_reads = [(r.start, r.nblocks) for r in stream.reads if r.context == "vacuum"]
    sizes = [k for _, k in ring_reads]
    assert ring_reads[0][0] == 1
    assert sizes == [16] * ((n - 1) // 16) + ([(n - 1) % 16] if (n - 1) % 16 else [])
    assert [r.start for r in plain.reads if r.context == "vacuum"] == list(range(1, n))
    # btvacuumcleanup: the metapage, without strategy, after the scan.
    for res in (stream, plain):
        assert [(r.start, r.context) for r in res.reads if r.context == "normal"] == [(0, "normal")]
        assert res.reads[-1].start == 0


# ------------------------------------------------------------------------------------ hash
def _hash_spec(nblocks: int, dead: float, **ispec: Any) -> RelationSpec:
    return RelationSpec(
        name="t", nblocks=nblocks, dead_fraction=dead, indexes=(IndexSpec("hash", **ispec),), seed=8
    )


def test_hash_read_order_and_the_bitmap_page() -> None:
    # Every entry dead: each bucket's overflow page empties in the squeeze and is freed, which
    # reads the bitmap page (without strategy) once, at the first freed page.
    _, srel, res = _bulkdelete(_hash_spec(20, 1.0, overflow=1), "unstreamed")
    content = srel.index().content
    nb = content.nbuckets
    order = [(r.start, r.context) for r in res.reads]
    expected = [(0, "normal")]
    for b in range(nb):
        expected.append((b + 1, "vacuum"))
        expected.append((nb + 2 + b, "vacuum"))
        if b == 0:
            expected.append((content.bitmap_block, "normal"))
    assert order == expected
    assert res.result["tuples_removed"] == content.entries.total


def test_hash_cached_metapage_is_read_at_the_first_freed_page_or_at_the_end() -> None:
    _, srel, freed = _bulkdelete(_hash_spec(20, 1.0, overflow=1), "unstreamed", hash_metapage_cached=True)
    content = srel.index().content
    order = [r.start for r in freed.reads]
    assert order[:4] == [1, content.nbuckets + 2, 0, content.bitmap_block]
    _, _, clean = _bulkdelete(_hash_spec(20, 0.0, overflow=1), "unstreamed", hash_metapage_cached=True)
    assert [r.start for r in clean.reads][-1] == 0 and [r.start for r in clean.reads].count(0) == 1
    assert clean.result["tuples_removed"] == 0


def test_hash_squeeze_keeps_full_chains() -> None:
    # Few deletions and chains fuller than a page can take: nothing is freed, no bitmap read.
    _, srel, res = _bulkdelete(_hash_spec(60, 0.02, buckets=8, overflow=1), "unstreamed")
    content = srel.index().content
    assert content.entries.total * 0.98 / 8 > HASH_ITEMS_PER_PAGE  # each bucket needs >1 page
    assert content.bitmap_block not in [r.start for r in res.reads]


def test_hash_patch_streams_the_primary_bucket_pages() -> None:
    spec = _hash_spec(200, 0.1)
    _, srel, base = _bulkdelete(spec, "unstreamed", Settings(io_method="worker"))
    _, _, patch = _bulkdelete(spec, "streamed", Settings(io_method="worker"))
    nb = srel.index().content.nbuckets
    bucket_reads = [r.nblocks for r in patch.reads if r.context == "vacuum"]
    assert sum(bucket_reads) == nb and max(bucket_reads) == 16
    assert len(bucket_reads) < nb
    assert base.read_count == nb + 1  # one read per bucket, plus the metapage
    assert patch.result == base.result


def test_hash_ring_writes_dirty_bucket_pages() -> None:
    # 600 buckets, each losing entries: the 256-buffer ring writes every dirtied page it reuses.
    spec = _hash_spec(300, 0.2, buckets=600)
    _, _, res = _bulkdelete(spec, "unstreamed")
    assert res.io["vacuum"]["writes"] == 600 - 256
    assert res.io["vacuum"]["reuses"] == 600 - 256


# ------------------------------------------------------------------------------------ GiST
def test_gist_scans_from_the_root_and_deletes_empty_leaves() -> None:
    spec = RelationSpec(name="t", nblocks=120, dead_fraction=1.0, indexes=(IndexSpec("gist"),), seed=6)
    _, srel, res = _bulkdelete(spec, "streamed", Settings(io_method="worker"))
    content = srel.index().content
    first = res.reads[0]
    assert (first.start, first.context) == (0, "vacuum")
    leaves = content.nleaves
    internal = content.nblocks - leaves
    assert res.result["num_index_tuples"] == 0
    # Each parent keeps one downlink: all but one empty leaf per inner page can go.
    parents_of_leaves = len(content.level_blocks[1]) if content.levels > 1 else 0
    assert res.result["pages_deleted"] == leaves - parents_of_leaves
    assert internal >= 1


def test_gist_cleanup_scans_when_no_bulk_delete_ran() -> None:
    # A VACUUM of a table without dead tuples still scans a GiST index (gistvacuumcleanup).
    spec = RelationSpec(name="t", nblocks=50, indexes=(IndexSpec("gist"),), seed=6)
    inst = Instance(Settings(io_method="sync"))
    srel = build_relation(inst, spec)
    res = run_scan("vacuum", inst.backend(), srel.heap, variant="streamed")
    gist_blocks = sum(r.nblocks for r in res.reads if r.relation == "t_gist")
    assert gist_blocks == srel.index().nblocks(MAIN)
    assert res.result["indexes"]["t_gist"]["num_index_tuples"] == srel.content.total_entries()


@pytest.mark.parametrize("kind", ["btree", "hash", "gist"])
def test_no_dead_tuples_removes_nothing(kind: str) -> None:
    spec = RelationSpec(name="t", nblocks=30, indexes=(IndexSpec(kind),), seed=1)
    _, srel, res = _bulkdelete(spec, "streamed")
    assert res.result["tuples_removed"] == 0
    assert res.result["num_index_tuples"] == srel.content.total_entries()
    assert np.isclose(res.io.get("vacuum", {}).get("writes", 0), 0)
