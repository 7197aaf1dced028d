"""amcheck's verify_heapam and bt_index_check (reference_impl/scans/amcheck.py).

Oracles: scans.md §7.1 (verify_heapam: BULKREAD always, SEQUENTIAL|FULL stream for skip='none',
a VM-consulting DEFAULT stream otherwise, VM pages read without a strategy) and §7.2
(bt_index_check: metapage read in context normal unless the relcache has it, then the metapage
again and every page through a BULKREAD ring in logical order, one block per read), with the
expected pages computed here from the synthetic relation's content (VM bits, btree levels).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import ForkNumber, Instance, ModelUsageError, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import SCANS, run_scan

_VM_PAGE = 32672


@st.composite
def _heap_cases(draw: st.DrawFn) -> tuple:
    nblocks = draw(st.integers(0, 300))
    vacuumed = draw(st.booleans())
    vis = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])) if vacuumed else 0.0
    spec = RelationSpec(
        nblocks=nblocks,
        all_visible_fraction=vis,
        all_frozen_fraction=draw(st.sampled_from([0.0, vis / 2, vis])),
        vm_pattern=draw(st.sampled_from(["random", "prefix", "runs"])),
        vacuumed=vacuumed,
        dead_fraction=draw(st.sampled_from([0.0, 0.1])),
        seed=draw(st.integers(0, 500)),
        payload=False,
    )
    cfg = {
        "io_method": draw(st.sampled_from(["sync", "worker"])),
        "io_combine_limit": draw(st.sampled_from([4, 16])),
        "effective_io_concurrency": draw(st.sampled_from([0, 2, 16])),
    }
    skip = draw(st.sampled_from(["none", "all-visible", "all-frozen"]))
    rng_range = None
    if nblocks and draw(st.booleans()):
        first = draw(st.integers(0, nblocks - 1))
        rng_range = (first, draw(st.integers(first, nblocks - 1)))
    cached = draw(st.sampled_from([0.0, 0.5]))
    return spec, cfg, skip, rng_range, cached, draw(st.integers(0, 1000))


def _expected_pages(rel, skip: str, first: int, last: int) -> list[int]:
    content = rel.content
    out = []
    vm_exists = rel.exists(ForkNumber.VM) and rel.nblocks(ForkNumber.VM) > 0
    for b in range(first, last + 1):
        vis, frz = (
            content.vm_status(b)
            if vm_exists and b // _VM_PAGE < rel.nblocks(ForkNumber.VM)
            else (False, False)
        )
        if (skip == "all-visible" and vis) or (skip == "all-frozen" and frz):
            continue
        out.append(b)
    return out


@settings(max_examples=20, deadline=None)
@given(_heap_cases())
def test_verify_heapam_variants_agree(case: tuple) -> None:
    spec, cfg, skip, rng_range, cached, seed = case
    params: dict = {"skip": skip}
    if rng_range is not None:
        params.update(first_block=rng_range[0], last_block=rng_range[1])
    out = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(**cfg))
        sr = build_relation(inst, spec)
        n = spec.nblocks
        if cached and n:
            rng = np.random.default_rng(seed)
            inst.prewarm(
                sr.heap, sorted(int(b) for b in rng.choice(n, size=round(cached * n), replace=False))
            )
        res = run_scan("verify_heapam", inst.backend(), sr.heap, variant=variant, **params)
        assert res.error is None and res.pinned_after == 0
        out[variant] = (res, sr.heap)
    s, u = out["streamed"][0], out["unstreamed"][0]
    rel = out["unstreamed"][1]
    assert s.result == u.result and s.blocks == u.blocks
    assert s.read_count <= u.read_count
    assert u.result["corruption"] == 0
    if spec.nblocks == 0:
        assert u.result["pages_checked"] == 0 and u.read_count == 0 and not s.stream_stats
        return
    first, last = rng_range if rng_range is not None else (0, spec.nblocks - 1)
    pages = _expected_pages(rel, skip, first, last)
    assert u.blocks == pages
    assert u.result["tuples"] == sum(rel.content.heap_page(b).nlive for b in pages)
    assert u.result["skipped"] == (last - first + 1) - len(pages)
    # Heap pages through the ring; only VM pages (skip != none) outside it.
    assert set(u.io) <= {"bulkread", "normal"}
    if skip == "none":
        assert "normal" not in u.io and "normal" not in s.io


def test_verify_heapam_bulkread_full_chunks_even_for_a_small_table() -> None:
    inst = Instance(Settings(io_method="sync"))
    sr = build_relation(inst, RelationSpec(nblocks=300, payload=False))
    res = run_scan("verify_heapam", inst.backend(), sr.heap)
    assert set(res.io) == {"bulkread"}
    assert res.read_sizes[0] == 16 and res.read_count == math.ceil(300 / 16)
    ring = 94  # default BULKREAD ring: min(256 + 8*16*16 kB, 94 pins * 8 kB) / 8 kB
    resident = inst.pool.resident_blocks(sr.heap)
    assert 299 in resident and len(resident) <= ring
    assert len(SCANS["verify_heapam"].variants) == 2


def test_verify_heapam_skip_reads_vm_pages_in_context_normal() -> None:
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="worker"))
        sr = build_relation(
            inst, RelationSpec(nblocks=70_000, all_visible_fraction=0.99, vm_pattern="runs", payload=False)
        )
        assert sr.heap.nblocks(ForkNumber.VM) == 3
        res = run_scan(
            "verify_heapam", inst.backend(), sr.heap, variant=variant, skip="all-visible", keep_blocks=False
        )
        assert res.io["normal"]["reads"] == 3  # each VM page once, kept pinned meanwhile
        assert res.reads is not None and {r.fork for r in res.reads if r.context == "normal"} == {"vm"}
        assert 0 < res.result["pages_checked"] < 70_000 * 0.05


def test_verify_heapam_never_vacuumed_table_skips_nothing_and_reads_no_vm() -> None:
    inst = Instance(Settings(io_method="sync"))
    sr = build_relation(inst, RelationSpec(nblocks=50, vacuumed=False, payload=False))
    assert not sr.heap.exists(ForkNumber.VM)
    res = run_scan("verify_heapam", inst.backend(), sr.heap, skip="all-visible")
    assert res.result["pages_checked"] == 50 and "normal" not in res.io


def test_verify_heapam_range_checks() -> None:
    inst = Instance()
    sr = build_relation(inst, RelationSpec(nblocks=10, payload=False))
    with pytest.raises(ModelUsageError, match="last_block 10 is invalid"):
        run_scan("verify_heapam", inst.backend(), sr.heap, last_block=10)


# ---------------------------------------------------------------------------------- bt_index_check
@st.composite
def _btree_cases(draw: st.DrawFn) -> tuple:
    spec = RelationSpec(
        nblocks=draw(st.integers(1, 120)),
        tuples_per_page=draw(st.sampled_from([None, 20, 180])),
        tuple_width=16,
        indexes=(IndexSpec("btree", correlation=draw(st.sampled_from([0.0, 0.5, 1.0]))),),
        seed=draw(st.integers(0, 500)),
        payload=False,
    )
    return spec, draw(st.booleans()), draw(st.sampled_from([0.0, 0.5])), draw(st.integers(0, 1000))


@settings(max_examples=20, deadline=None)
@given(_btree_cases())
def test_bt_index_check_walks_in_logical_order_one_block_per_read(case: tuple) -> None:
    spec, metapage_cached, cached, seed = case
    inst = Instance(Settings(io_method="worker"))
    sr = build_relation(inst, spec)
    idx = sr.index()
    content = idx.content
    order = content.logical_order()
    resident: set[int] = set()
    if cached:
        rng = np.random.default_rng(seed)
        n = idx.nblocks()
        resident = {int(b) for b in rng.choice(n, size=round(cached * n), replace=False)}
        inst.prewarm(idx, sorted(resident))
    res = run_scan(
        "bt_index_check", inst.backend(), sr.heap, variant="unstreamed", metapage_cached=metapage_cached
    )
    assert res.error is None and res.pinned_after == 0
    assert res.blocks == [0, *order]
    assert set(res.read_sizes) <= {1}
    assert res.result["corruption"] == 0
    assert res.result["levels"] == content.levels
    assert res.result["index_tuples"] == content.entries.total
    meta_normal = 0 if (metapage_cached or 0 in resident) else 1
    assert res.io.get("normal", {}).get("reads", 0) == meta_normal
    cold_tree_pages = sum(1 for b in order if b not in resident)
    meta_ring = 1 if (metapage_cached and 0 not in resident) else 0
    assert res.io.get("bulkread", {}).get("reads", 0) == cold_tree_pages + meta_ring
    # Reading in logical order is not reading in physical order once there are inner pages.
    if content.levels > 1:
        assert order != sorted(order)


def test_bt_index_check_cold_exact_counts() -> None:
    inst = Instance(Settings(io_method="sync"))
    sr = build_relation(
        inst,
        RelationSpec(
            nblocks=400, tuples_per_page=100, tuple_width=16, indexes=(IndexSpec("btree"),), payload=False
        ),
    )
    content = sr.index().content
    res = run_scan("bt_index_check", inst.backend(), sr.heap, variant="unstreamed")
    per_level = [len(lv) for lv in content.level_blocks]
    assert res.io["normal"] == {**res.io["normal"], "reads": 1, "hits": 0}
    assert res.io["bulkread"]["reads"] == sum(per_level)
    # Hits: the metapage once more, and each page the walk moves to after reading it as the
    # previous page's right sibling.
    assert res.io["bulkread"]["hits"] == 1 + sum(n - 1 for n in per_level)
    assert res.result["pages_checked"] == 1 + sum(per_level)
    assert res.result["leaf_pages"] == per_level[0]


def test_bt_index_check_heapallindexed_scans_the_table() -> None:
    inst = Instance(Settings(io_method="worker"))
    sr = build_relation(
        inst, RelationSpec(nblocks=200, dead_fraction=0.1, indexes=(IndexSpec("btree"),), payload=False)
    )
    res = run_scan("bt_index_check", inst.backend(), sr.index(), variant="unstreamed", heapallindexed=True)
    live = sum(sr.content.heap_page(b).nlive for b in range(200))
    assert res.result["heap_tuples"] == live < res.result["index_tuples"]
    assert res.result["corruption"] == 0
    assert res.reads is not None and any(r.relation == sr.heap.name and r.nblocks > 1 for r in res.reads)


def test_bt_index_check_has_no_streamed_variant_and_needs_a_btree() -> None:
    assert SCANS["bt_index_check"].variants == ("unstreamed",)
    inst = Instance()
    sr = build_relation(inst, RelationSpec(nblocks=5, indexes=(IndexSpec("hash"),), payload=False))
    with pytest.raises(ModelUsageError, match="has no 'streamed' variant"):
        run_scan("bt_index_check", inst.backend(), sr.heap)
    with pytest.raises(ModelUsageError, match="has no btree index"):
        run_scan("bt_index_check", inst.backend(), sr.heap, variant="unstreamed")
    with pytest.raises(ModelUsageError, match="is not a btree index"):
        run_scan("bt_index_check", inst.backend(), sr.heap, variant="unstreamed", index=sr.index().name)
