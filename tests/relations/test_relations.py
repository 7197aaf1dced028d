"""Tests of reference_impl.relations: specs, page arithmetic, lazy heap content, index layouts.

Oracles are the specification's formulas (scans.md §3 for VM/FSM addressing), hand-worked
allocation orders of the btree and GiST builds, and independent recomputation (every heap line
pointer has exactly one index entry).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, ModelUsageError, SettingError
from reference_impl.relations import (
    HEAPBLOCKS_PER_VM_PAGE,
    SHAPES,
    IndexSpec,
    RelationSpec,
    build_relation,
    fsm_leaf_block,
    fsm_logical_to_physical,
    fsm_nblocks,
    gist_sorted_layout,
    hash_build_splits,
    hash_initial_buckets,
    heap_tuples_per_page,
    nbtsort_layout,
    parent_pages,
    shape,
    tree_height,
    vm_nblocks,
)
from reference_impl.relations.heap import fsm_physical_to_logical
from reference_impl.relations.layout import btree_items_per_page, hash_spareindex, hash_totalbuckets
from reference_impl.storage.relation import ForkNumber, InvalidBlockNumber

MAIN = ForkNumber.MAIN


def _build(spec: RelationSpec):
    return build_relation(Instance(), spec)


# --------------------------------------------------------------------------- page arithmetic
@pytest.mark.parametrize(
    ("width", "fillfactor", "expected"),
    [(100, 100, 61), (4, 100, 226), (1400, 100, 5), (5000, 100, 1), (100, 50, 30), (8136, 100, 1)],
)
def test_heap_tuples_per_page(width: int, fillfactor: int, expected: int) -> None:
    assert heap_tuples_per_page(width, fillfactor) == expected


def test_heap_tuples_per_page_matches_insert_simulation() -> None:
    # Insert tuples one by one with RelationGetBufferForTuple's test, independently of the formula.
    for width in (1, 7, 60, 100, 250, 1000, 3000):
        for ff in (10, 50, 90, 100):
            aligned = (24 + width + 7) // 8 * 8
            reserve = 8192 * (100 - ff) // 100
            n, lower, upper = 0, 24, 8192
            while n < 291:
                free = upper - lower - 4
                if n > 0 and aligned + reserve > free:
                    break
                if aligned > free:
                    break
                n += 1
                lower += 4
                upper -= aligned
            assert heap_tuples_per_page(width, ff) == n, (width, ff)


def test_vm_and_fsm_sizes_follow_scans_md() -> None:
    assert HEAPBLOCKS_PER_VM_PAGE == 32672
    assert vm_nblocks(0) == 0
    assert vm_nblocks(32672) == 1
    assert vm_nblocks(32673) == 2
    assert vm_nblocks(8_388_608) == 257
    # Leaf L is at L + 2 + L div 4069 for tables below 4069 x 4069 blocks.
    for block in (0, 1, 4068, 4069, 4069 * 4069 - 1, 10_000_000):
        leaf = block // 4069
        assert fsm_leaf_block(block) == leaf + 2 + leaf // 4069
    assert fsm_logical_to_physical(2, 0) == 0
    assert fsm_logical_to_physical(1, 0) == 1
    assert fsm_logical_to_physical(1, 1) == 4071
    assert fsm_nblocks(1) == 3
    assert fsm_nblocks(4070) == 4
    for b in range(0, 20000, 37):
        level, logical = fsm_physical_to_logical(b)
        assert fsm_logical_to_physical(level, logical) == b


def test_hash_build_splits_where_the_wanted_buckets_lose_their_fraction() -> None:
    """Measured on 18.6 (``CREATE INDEX`` with ``reltuples`` exact): 614 and 921 rows build
    without a split, 615, 731 and 920 split (2.003 wanted buckets give 2), 1,228 does not and
    1,229 does, and so on at every bucket count a phase ends at."""
    splits = {t for t in range(1, 20_000) if hash_build_splits(t)}
    assert {615, 731, 920, 1229, 2457, 4913} <= splits
    assert not {1, 614, 921, 1098, 1228, 2456, 2763, 4912, 200_010} & splits
    for t in sorted(splits):
        assert t > 307 * hash_initial_buckets(t)  # the definition, and nothing else
    assert min(splits) == 615 and 307 * 2 < 615


def test_hash_sizing_matches_hash_init() -> None:
    assert hash_initial_buckets(0) == 2
    assert hash_initial_buckets(1_000_050) == 3584
    for n in (3, 5, 100, 1023, 1024, 1025, 3000, 3257, 70_000):
        total = hash_totalbuckets(hash_spareindex(n))
        assert total >= n
        assert hash_totalbuckets(hash_spareindex(n) - 1) < n


# --------------------------------------------------------------------------- spec validation
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"nblocks": -1}, "nblocks"),
        ({"nblocks": 1.5}, "nblocks"),
        ({"name": ""}, "name"),
        ({"tuple_width": 0}, "tuple_width"),
        ({"tuple_width": 9000}, "tuple_width"),
        ({"fillfactor": 5}, "fillfactor"),
        ({"tuples_per_page": 292}, "tuples_per_page"),
        ({"tuples_per_page": 62}, "tuples_per_page"),
        ({"tuples_per_page": ("poisson", -1)}, "tuples_per_page"),
        ({"tuples_per_page": ("uniform", 5, 3)}, "tuples_per_page"),
        ({"tuples_per_page": ("zipf", 2)}, "tuples_per_page"),
        ({"dead_fraction": 1.5}, "dead_fraction"),
        ({"all_visible_fraction": 0.2, "all_frozen_fraction": 0.3}, "all_frozen_fraction"),
        ({"vm_pattern": "stripes"}, "vm_pattern"),
        ({"vacuumed": False, "empty": True}, "empty"),
        ({"vacuumed": False, "all_visible_fraction": 0.5}, "all_visible_fraction"),
        ({"seed": -3}, "seed"),
        ({"indexes": (IndexSpec("btree"), IndexSpec("btree"))}, "indexes"),
        ({"indexes": ("btree",)}, "indexes"),
    ],
)
def test_relation_spec_rejects_bad_fields(changes: dict, field: str) -> None:
    with pytest.raises(SettingError, match=field):
        RelationSpec(**{"nblocks": 10, **changes})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "rum"}, "kind"),
        ({"kind": "hash", "levels": 2}, "levels"),
        ({"kind": "btree", "buckets": 4}, "buckets"),
        ({"kind": "btree", "overflow": 2}, "overflow"),
        ({"kind": "gist", "leaf_pages": 3}, "leaf_pages"),
        ({"correlation": 1.2}, "correlation"),
        ({"kind": "hash", "overflow": ("poisson", -1)}, "overflow"),
        ({"kind": "hash", "buckets": 3, "overflow": (1, 2)}, "overflow"),
        ({"kind": "hash", "overflow_layout": "scattered"}, "overflow_layout"),
        ({"fanout": 1}, "fanout"),
    ],
)
def test_index_spec_rejects_bad_fields(kwargs: dict, field: str) -> None:
    with pytest.raises(SettingError, match=field):
        IndexSpec(**kwargs)


def test_btree_levels_impossible_is_an_error() -> None:
    spec = RelationSpec(nblocks=10, indexes=(IndexSpec("btree", leaf_pages=4, levels=5),))
    with pytest.raises(SettingError, match="levels"):
        _build(spec)


# --------------------------------------------------------------------------- forks
@pytest.mark.parametrize(
    ("changes", "forks"),
    [
        ({"nblocks": 100}, {"main": 100, "fsm": 3, "vm": 1}),
        ({"nblocks": 0}, {"main": 0}),
        ({"nblocks": 0, "empty": True}, {"main": 0, "fsm": 0, "vm": 0}),
        ({"nblocks": 50, "empty": True}, {"main": 50, "fsm": 0, "vm": 0}),
        ({"nblocks": 100, "vacuumed": False}, {"main": 100, "fsm": 3}),
        ({"nblocks": 1, "vacuumed": False}, {"main": 1}),
        ({"nblocks": 70_000, "unlogged": True}, {"main": 70_000, "fsm": 20, "vm": 3, "init": 0}),
    ],
)
def test_heap_forks(changes: dict, forks: dict) -> None:
    rel = _build(RelationSpec(**changes)).heap
    got = {f.name.lower(): rel.nblocks(f) for f in rel.forks()}
    assert got == forks
    assert rel.persistence == ("u" if changes.get("unlogged") else "p")


def test_unlogged_index_init_forks() -> None:
    spec = RelationSpec(
        nblocks=20, unlogged=True, indexes=(IndexSpec("btree"), IndexSpec("hash"), IndexSpec("gist"))
    )
    sr = _build(spec)
    assert {n: r.nblocks(ForkNumber.INIT) for n, r in sr.indexes.items()} == {
        "t_btree": 1,
        "t_hash": 4,
        "t_gist": 1,
    }
    assert sr.index("t_hash").content.page(ForkNumber.INIT, 3).kind == "bitmap"


# --------------------------------------------------------------------------- determinism, laziness
_specs = st.builds(
    RelationSpec,
    nblocks=st.integers(1, 3000),
    tuples_per_page=st.one_of(
        st.none(),
        st.integers(0, 40),
        st.tuples(st.just("poisson"), st.floats(0, 40)),
        st.integers(0, 30).flatmap(
            lambda lo: st.tuples(st.just("uniform"), st.just(lo), st.integers(lo, 40))
        ),
    ),
    dead_fraction=st.sampled_from([0.0, 0.1, 0.5]),
    all_visible_fraction=st.sampled_from([0.0, 0.3, 1.0]),
    vm_pattern=st.sampled_from(["random", "prefix", "runs"]),
    hinted_fraction=st.sampled_from([0.0, 0.5, 1.0]),
    seed=st.integers(0, 2**40),
)


def _page_tuple(content, block: int) -> tuple:
    p = content.page(MAIN, block)
    return (p.nlive, p.ndead, p.max_offset, p.all_visible, p.all_frozen, p.hinted, tuple(p.dead_offsets))


@settings(max_examples=25, deadline=None)
@given(spec=_specs, order_seed=st.integers(0, 2**32 - 1))
def test_same_spec_same_pages_in_any_order(spec: RelationSpec, order_seed: int) -> None:
    a = _build(spec).content
    b = _build(spec).content
    blocks = np.random.default_rng(order_seed).permutation(spec.nblocks)[:200]
    first = {int(x): _page_tuple(a, int(x)) for x in blocks}
    second = {int(x): _page_tuple(b, int(x)) for x in blocks[::-1]}
    assert first == second


@settings(max_examples=25, deadline=None)
@given(spec=_specs)
def test_page_invariants(spec: RelationSpec) -> None:
    content = _build(spec).content
    for block in range(0, spec.nblocks, max(1, spec.nblocks // 150)):
        p = content.page(MAIN, block)
        assert 0 <= p.max_offset <= spec.page_capacity
        assert p.nlive + p.ndead == p.max_offset
        live, dead = p.live_offsets, p.dead_offsets
        assert len(live) == p.nlive and len(dead) == p.ndead
        assert sorted(set(live.tolist()) | set(dead.tolist())) == list(range(1, p.max_offset + 1))
        assert not (p.all_frozen and not p.all_visible)
        if p.all_visible:
            assert p.ndead == 0 and p.hinted
        assert content.nlive(block) == p.nlive
        assert content.vm_status(block) == (p.all_visible, p.all_frozen)


def test_vm_patterns() -> None:
    prefix = _build(
        RelationSpec(nblocks=1000, all_visible_fraction=0.3, all_frozen_fraction=0.1, vm_pattern="prefix")
    ).content
    vis, frz = prefix.vm_bits(0, 1000)
    assert vis.tolist() == [b < 300 for b in range(1000)]
    assert frz.tolist() == [b < 100 for b in range(1000)]
    assert prefix.vm_counts() == (300, 100)
    assert prefix.page(ForkNumber.VM, 0).all_visible == 300
    runs = _build(
        RelationSpec(nblocks=4096, all_visible_fraction=0.5, vm_pattern="runs", vm_run_blocks=64)
    ).content
    vis, _ = runs.vm_bits(0, 4096)
    per_run = vis.reshape(64, 64)
    assert (per_run.all(axis=1) | ~per_run.any(axis=1)).all()
    assert 10 < per_run[:, 0].sum() < 54
    rnd = _build(RelationSpec(nblocks=20_000, all_visible_fraction=0.25, all_frozen_fraction=0.05)).content
    nvis, nfrz = rnd.vm_counts()
    assert abs(nvis - 5000) < 400 and abs(nfrz - 1000) < 200


def test_dead_fraction_is_respected_on_not_visible_pages() -> None:
    c = _build(RelationSpec(nblocks=2000, tuples_per_page=50, dead_fraction=0.2, seed=9)).content
    dead = sum(c.page(MAIN, b).ndead for b in range(2000))
    assert abs(dead / (2000 * 50) - 0.2) < 0.01


def test_huge_relation_is_lazy() -> None:
    sr = _build(SHAPES["sample-thread-64gib"])
    c = sr.content
    assert sr.heap.nblocks() == 8_388_608
    for b in range(0, 8_388_608, 65_536):
        assert c.page(MAIN, b).nlive == 1
    assert len(c._chunks) <= 64


def test_pages_outside_the_fork_are_errors() -> None:
    sr = _build(RelationSpec(nblocks=10, vacuumed=False))
    with pytest.raises(ModelUsageError, match="10"):
        sr.content.page(MAIN, 10)
    with pytest.raises(ModelUsageError, match="vm"):
        sr.content.page(ForkNumber.VM, 0)


def test_grow_appends_fresh_pages() -> None:
    sr = _build(RelationSpec(nblocks=10, all_visible_fraction=1.0, tuples_per_page=5))
    assert sr.grow(3) == 10
    assert sr.heap.nblocks() == 13
    p = sr.content.page(MAIN, 12)
    assert (p.nlive, p.all_visible, p.hinted) == (5, False, False)
    assert sr.content.page(MAIN, 9).all_visible
    with pytest.raises(ModelUsageError):
        sr.grow(0)


# --------------------------------------------------------------------------- tuple numbers, rows
@settings(max_examples=20, deadline=None)
@given(spec=_specs)
def test_entry_tids_invert_tuples_before(spec: RelationSpec) -> None:
    c = _build(spec).content
    total = c.total_entries()
    assert total == sum(c.page(MAIN, b).max_offset for b in range(spec.nblocks))
    if total == 0:
        return
    hs = np.unique(np.random.default_rng(1).integers(0, total, 300))
    blocks, offsets = c.entry_tids(hs)
    for h, b, o in zip(hs.tolist(), blocks.tolist(), offsets.tolist()):
        assert 1 <= o <= c.page(MAIN, b).max_offset
        assert c.tuples_before(b) + o - 1 == h


def test_rows_are_seeded_faker_rows_of_live_tuples() -> None:
    spec = RelationSpec(nblocks=20, tuples_per_page=10, dead_fraction=0.3, seed=11)
    c1, c2 = _build(spec).content, _build(spec).content
    rows = c1.rows(7)
    assert rows == c2.rows(7)
    page = c1.page(MAIN, 7)
    assert [r["ctid"] for r in rows] == [(7, int(o)) for o in page.live_offsets]
    assert all({"name", "email", "city", "amount"} <= set(r) for r in rows)
    assert rows[0]["id"] == c1.tuples_before(7) + rows[0]["ctid"][1] - 1
    plain = _build(spec.replace(payload=False)).content.rows(7)
    assert [set(r) for r in plain] == [{"ctid", "id"}] * len(plain)
    assert rows != _build(spec.replace(seed=12)).content.rows(7)


# --------------------------------------------------------------------------- btree
def test_nbtsort_allocation_order_hand_worked() -> None:
    # 5 leaves, 3 items per full inner page: worked through _bt_buildadd / _bt_uppershutdown.
    # Leaf 4 (block 6) makes the downlink to leaf 3 overflow level-1 page 3: page 7 is allocated,
    # then the root 8; leaf 2's downlink moves from page 3 to page 7, which then takes leaf 3's.
    assert nbtsort_layout(5, 3) == [[1, 2, 4, 5, 6], [3, 7], [8]]
    assert nbtsort_layout(1, 10) == [[1]]
    assert nbtsort_layout(2, 10) == [[1, 2], [3]]
    assert nbtsort_layout(0, 10) == []
    with pytest.raises(SettingError, match=r"fanout = 2 is invalid: allowed 3\.\.4096"):
        nbtsort_layout(5, 2)


def test_nbtsort_inner_pages_as_measured_on_postgresql_18() -> None:
    # A 2,745-page int4 btree (1,000,050 keys): bt_index_check on 18.6 reads its level-1 pages at
    # these blocks. Every inner page after the first takes one downlink fewer, because the split
    # moves the full page's last item onto the new page.
    levels = nbtsort_layout(2733, btree_items_per_page(4, 70))
    assert [len(lv) for lv in levels] == [2733, 10, 1]
    assert levels[1] == [3, 289, 575, 860, 1145, 1430, 1715, 2000, 2285, 2570]
    assert levels[2] == [290]


def _simulated_children(nleaves: int, fanout: int) -> list[list[list[int]]]:
    """Per level above the leaves, each page's children positions, by replaying the build item
    by item (a full page hands its last item to the new page)."""
    pages: list[list[list[int]]] = [[[i] for i in range(nleaves)]]
    while len(pages[-1]) > 1:
        below = len(pages[-1])
        level: list[list[int]] = [[]]
        for child in range(below):
            if len(level[-1]) == fanout:
                level.append([level[-1].pop()])
            level[-1].append(child)
        pages.append(level)
    return pages[1:]


@settings(max_examples=40, deadline=None)
@given(nleaves=st.integers(1, 3000), fanout=st.integers(3, 300))
def test_nbtsort_layout_is_a_tree(nleaves: int, fanout: int) -> None:
    levels = nbtsort_layout(nleaves, fanout)
    flat = [b for lv in levels for b in lv]
    assert sorted(flat) == list(range(1, len(flat) + 1))
    assert len(levels[0]) == nleaves and len(levels[-1]) == 1
    assert len(levels) == tree_height(nleaves, fanout)
    simulated = _simulated_children(nleaves, fanout)
    for lv, (below, above) in enumerate(itertools.pairwise(levels)):
        assert len(above) == parent_pages(len(below), fanout) == len(simulated[lv])
        # A parent page is allocated after its first child.
        for i, b in enumerate(above):
            assert b > below[simulated[lv][i][0]]


@settings(max_examples=25, deadline=None)
@given(nleaves=st.integers(2, 400), fanout=st.integers(3, 12), data=st.data())
def test_btree_descent_follows_the_downlinks(nleaves: int, fanout: int, data: st.DataObject) -> None:
    # Descents and each inner page's children agree with the item-by-item build, 3+ levels too.
    sr = _build(
        RelationSpec(
            nblocks=nleaves, tuples_per_page=2, indexes=(IndexSpec(leaf_pages=nleaves, fanout=fanout),)
        )
    )
    bt = sr.index_content()
    simulated = _simulated_children(nleaves, fanout)
    for lv in range(1, bt.levels):
        for pos, block in enumerate(bt.level_blocks[lv]):
            children = bt.page(MAIN, int(block)).children
            assert children is not None
            assert list(children) == [int(bt.level_blocks[lv - 1][c]) for c in simulated[lv - 1][pos]]
    leaf = data.draw(st.integers(0, nleaves - 1))
    path = bt.descent(leaf)
    assert path[0] == bt.root_block and path[-1] == bt.leaf_block(leaf) and len(path) == bt.levels
    for parent, child in itertools.pairwise(path):
        children = bt.page(MAIN, parent).children
        assert children is not None and child in list(children)


def test_btree_covers_every_line_pointer_once() -> None:
    spec = RelationSpec(
        nblocks=400, tuples_per_page=("poisson", 15), dead_fraction=0.2, indexes=(IndexSpec(correlation=0.3),)
    )
    sr = _build(spec)
    bt = sr.index_content()
    seen = []
    pos_tids = []
    for pos in range(bt.nleaves):
        page = bt.page(MAIN, bt.leaf_block(pos))
        assert page.is_leaf
        b, o = page.heap_tids()
        pos_tids.append(page.nentries)
        seen += list(zip(b.tolist(), o.tolist()))
    expected = {(b, o) for b in range(400) for o in range(1, sr.content.page(MAIN, b).max_offset + 1)}
    assert len(seen) == len(expected) and set(seen) == expected
    assert max(pos_tids) <= bt.keys_per_leaf


def test_btree_structure_and_correlation() -> None:
    sr = _build(RelationSpec(nblocks=1000, indexes=(IndexSpec("btree"),)))
    bt = sr.index_content()
    assert bt.page(MAIN, 0).kind == "meta"
    assert bt.nleaves == -(-1000 * 61 // 366)
    root = bt.page(MAIN, bt.root_block)
    assert root.is_root and root.kind == "root" and bt.levels == 2
    assert list(root.children) == list(bt.level_blocks[0])
    # correlation 1: TIDs in heap order.
    b, o = bt.heap_tids_of_ranks(0, 1000 * 61)
    assert np.all(np.diff(b * 1000 + o) > 0)
    path = bt.descent(bt.nleaves - 1)
    assert path[0] == bt.root_block and path[-1] == bt.leaf_block(bt.nleaves - 1)
    leaf = bt.page(MAIN, bt.leaf_block(1))
    assert (leaf.left, leaf.right) == (bt.leaf_block(0), bt.leaf_block(2))
    assert bt.page(MAIN, bt.leaf_block(0)).left == InvalidBlockNumber
    assert bt.logical_order()[0] == bt.root_block
    assert bt.leaf_of_rank(366 * 5 + 3) == 5


def test_btree_explicit_shape() -> None:
    sr = _build(RelationSpec(nblocks=100, indexes=(IndexSpec(leaf_pages=50, levels=3),)))
    bt = sr.index_content()
    assert (bt.nleaves, bt.levels) == (50, 3)
    assert sr.index().nblocks() == bt.nblocks == 1 + sum(len(lv) for lv in bt.level_blocks)


# --------------------------------------------------------------------------- hash
@pytest.mark.parametrize("layout", ["grouped", "interleaved"])
def test_hash_chains_and_layout(layout: str) -> None:
    spec = RelationSpec(
        nblocks=200,
        tuples_per_page=20,
        indexes=(IndexSpec("hash", buckets=32, overflow=("uniform", 0, 3), overflow_layout=layout),),
    )
    sr = _build(spec)
    h = sr.index_content()
    assert h.page(MAIN, 0).kind == "meta"
    assert h.page(MAIN, 33).kind == "bitmap" and h.bitmap_block == 33
    visited = []
    tids = []
    for bucket in range(32):
        chain = h.chain(bucket)
        assert chain[0] == bucket + 1
        for i, blk in enumerate(chain):
            page = h.page(MAIN, blk)
            assert page.bucket == bucket
            assert page.kind == ("bucket" if i == 0 else "overflow")
            assert page.next == (chain[i + 1] if i + 1 < len(chain) else InvalidBlockNumber)
            b, o = page.heap_tids()
            tids += list(zip(b.tolist(), o.tolist()))
        visited += chain
    assert sorted([*visited, 0, 33]) == list(range(h.nblocks))
    assert sorted(tids) == [(b, o) for b in range(200) for o in range(1, 21)]
    overflow = [blk for bkt in range(32) for blk in h.chain(bkt)[1:]]
    assert (overflow == sorted(overflow)) == (layout == "grouped" or len(overflow) < 2)


def test_hash_vacuum_thread_shape() -> None:
    sr = _build(shape("hash-vacuum-thread"))
    h = sr.index_content()
    assert h.entries.total == 1_000_050
    # metapage + 3,258 bucket pages + bitmap page + 838 overflow pages (buckets 1210..2047)
    assert (h.nbuckets, h.nblocks) == (3258, 1 + 3258 + 1 + 838)


# --------------------------------------------------------------------------- gist
def test_gist_sorted_layout_hand_worked() -> None:
    assert gist_sorted_layout(1, 4) == [[0]]
    assert gist_sorted_layout(3, 2) == [[1, 2, 3], [4, 5], [0]]


@settings(max_examples=30, deadline=None)
@given(nleaves=st.integers(2, 2000), fanout=st.integers(2, 200))
def test_gist_layout_children_before_parents(nleaves: int, fanout: int) -> None:
    levels = gist_sorted_layout(nleaves, fanout)
    flat = [b for lv in levels for b in lv]
    assert sorted(flat) == list(range(len(flat)))
    assert levels[-1] == [0] and len(levels[0]) == nleaves
    for lv in range(1, len(levels) - 1):
        for i, b in enumerate(levels[lv]):
            kids = levels[lv - 1][i * fanout : (i + 1) * fanout]
            assert kids and max(kids) < b


def test_gist_pages_parameter() -> None:
    sr = _build(RelationSpec(nblocks=500, indexes=(IndexSpec("gist", pages=40, fanout=8, correlation=0.0),)))
    g = sr.index_content()
    assert g.nblocks == 40 == sr.index().nblocks()
    assert g.page(MAIN, 0).is_root
    with pytest.raises(SettingError, match="pages"):
        _build(RelationSpec(nblocks=500, indexes=(IndexSpec("gist", pages=10, fanout=8),)))


# --------------------------------------------------------------------------- shapes
def test_shapes() -> None:
    assert {"tiny", "small", "bulk", "checksums-thread", "sample-thread-64gib"} <= set(SHAPES)
    assert {"pgstattuple-thread", "hash-vacuum-thread", "segment-crossing"} <= set(SHAPES)
    assert SHAPES["tiny"].nblocks == 8
    assert SHAPES["bulk"].nblocks > 16384 // 4
    assert SHAPES["checksums-thread"].nblocks == 956_815
    assert SHAPES["sample-thread-64gib"].nblocks == 8_388_608
    assert SHAPES["sample-thread-64gib"].fixed_tuples_per_page == 1
    assert SHAPES["segment-crossing"].nblocks > 131_072
    inst = Instance()
    for spec in SHAPES.values():
        build_relation(inst, spec)
    assert inst.relation("pgstattuple_thread").nblocks(ForkNumber.VM) == 1
    with pytest.raises(SettingError, match="allowed"):
        shape("nope")


# --------------------------------------------------------------------------- exact page patterns
def test_rows_per_page_dead_every_kth_page_and_vm_cycle_are_exact() -> None:
    spec = RelationSpec(
        nblocks=24,
        tuples_per_page=("cycle", 5, 0, 7),
        tuple_width=100,
        dead_every=4,
        dead_per_page=2,
        vm_cycle="FV---V",
        seed=3,
    )
    content = _build(spec).content
    for b in range(24):
        page = content.heap_page(b)
        assert page.max_offset == (5, 0, 7)[b % 3]
        mark = "FV---V"[b % 6]
        empty = page.max_offset == 0
        # VACUUM marks pages without line pointers all-visible and all-frozen whatever the cycle.
        assert page.all_visible == (mark != "-" or empty)
        assert page.all_frozen == (mark == "F" or empty)
        expected_dead = min(2, page.max_offset) if b % 4 == 0 and not page.all_visible else 0
        assert page.ndead == expected_dead, b
    # All-visible but not frozen (the pages an aggressive VACUUM reads and a normal one skips):
    # the V marks on pages with line pointers (blocks 1, 7, 13, 19 have none: all-frozen).
    assert [b for b in range(24) if content.vm_status(b) == (True, False)] == [5, 11, 17, 23]


def test_hot_updated_pages_need_no_index_vacuuming() -> None:
    spec = RelationSpec(
        name="t",
        nblocks=40,
        tuples_per_page=10,
        dead_per_page=3,
        hot_per_page=2,
        indexes=(IndexSpec("btree"),),
        seed=5,
    )
    sr = _build(spec)
    page = sr.content.heap_page(7)
    assert (page.ndead, page.nhot, page.nlive) == (3, 2, 7)
    # The heap-only successors are the page's last offsets: live, and in no index.
    assert set(page.dead_offsets.tolist()).isdisjoint({9, 10})
    assert len(page.hot_offsets) == 2 and len(page.lpdead_offsets) == 1
    bt = sr.index_content()
    assert bt.entries.total == 40 * (10 - 2)
    blocks, offsets = bt.heap_tids_of_ranks(0, bt.entries.total)
    assert not np.any(offsets > 8) and np.bincount(blocks).tolist() == [8] * 40
    res = _vacuum_result(spec)
    # 3 dead tuples a page are removed, but only 1 a page leaves an LP_DEAD item for the index.
    assert res["tuples_deleted"] == 120 and res["lpdead_items"] == 40
    plain = _vacuum_result(spec.replace(hot_per_page=0))
    assert plain["tuples_deleted"] == 120 and plain["lpdead_items"] == 120


def _vacuum_result(spec: RelationSpec) -> dict[str, Any]:
    from reference_impl import Settings
    from reference_impl.scans import run_scan

    inst = Instance(Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, spec)
    res = run_scan("vacuum", inst.backend(), srel.heap, index_cleanup="on")
    assert res.error is None, res.error
    return res.result


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tuples_per_page": ("cycle",)}, "a cycle lists one or more integers"),
        ({"tuples_per_page": ("cycle", 3, -1)}, "a cycle lists one or more integers"),
        ({"dead_every": 0, "dead_per_page": 1}, "dead_every = 0 is out of range"),
        ({"dead_every": 3}, "needs dead_per_page or dead_fraction"),
        ({"dead_per_page": 2, "dead_fraction": 0.1}, "both set the dead tuples"),
        ({"hot_per_page": 1}, "needs dead tuples"),
        ({"vm_cycle": "FX"}, "vm_cycle = 'FX' is invalid"),
        ({"vm_cycle": ""}, "vm_cycle = '' is invalid"),
        ({"vm_cycle": "F-", "all_visible_fraction": 0.5}, "gives the visibility map exactly"),
        ({"vm_cycle": "F-", "vacuumed": False}, "needs vacuumed = True"),
    ],
)
def test_exact_pattern_fields_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        RelationSpec(**{"nblocks": 10, "tuples_per_page": 5, **fields})


# --------------------------------------------------------------------------- real hash layouts
# hashint4 / hashint8 as a PostgreSQL 18.6 server returns them (SELECT hashint4(v), as int4).
_SERVER_HASHINT4 = {
    0: -272711505,
    1: -1905060026,
    2: 1134484726,
    42: 1509752520,
    -1: 385747274,
    -2147483648: -1524351049,
    2147483647: -96758253,
    123456: 73968562,
    200009: -1885086129,
}
_SERVER_HASHINT8 = {
    0: -272711505,
    1: -1905060026,
    -1: 385747274,
    42: 1509752520,
    2**40 + 7: 2004417530,
    -(2**40) - 7: 453467472,
    2**63 - 1: -1524351049,
    -(2**63): -96758253,
}


def test_hash_functions_are_postgresqls() -> None:
    from reference_impl.relations.hashfuncs import hashint4, hashint8

    for fn, table in ((hashint4, _SERVER_HASHINT4), (hashint8, _SERVER_HASHINT8)):
        got = fn(list(table)).astype(np.int64)
        signed = np.where(got >= 2**31, got - 2**32, got)
        assert signed.tolist() == list(table.values())


def test_hashkey_to_bucket_folds_above_maxbucket() -> None:
    from reference_impl.relations.hashfuncs import hash_masks, hashkey_to_bucket

    assert hash_masks(768) == (767, 1023, 511)
    assert hash_masks(256) == (255, 511, 255)
    assert hashkey_to_bucket([5, 767, 768, 1023, 1024 + 300], 768).tolist() == [5, 767, 256, 511, 300]


@pytest.mark.parametrize(
    ("nblocks", "width", "buckets", "overflow", "pages"),
    [
        # Measured on PostgreSQL 18.6 (docs/fidelity.md): CREATE INDEX ... USING hash (id).
        (885, 5, 768, 52, 822),  # 200,010 int4 keys
        (4425, 4, 3584, 512, 4098),  # 1,000,050 int4 keys
    ],
)
def test_hash_build_layout_is_the_servers(
    nblocks: int, width: int, buckets: int, overflow: int, pages: int
) -> None:
    spec = RelationSpec(
        name="h",
        nblocks=nblocks,
        tuple_width=width,
        indexes=(IndexSpec("hash", key_hash="hashint4", overflow="build"),),
        seed=1,
    )
    h = _build(spec).index_content()
    assert (h.nbuckets, int(h.overflow_counts.sum()), h.nblocks) == (buckets, overflow, pages)
    # Only buckets below the split point (which take twice the keys) overflow, and every chain
    # page but the last is full, in insertion order.
    low = ((1 << buckets.bit_length()) - 1) >> 1  # lowmask
    split_low = buckets - (low + 1)  # buckets split_low .. lowmask take hashes of two
    assert set(np.flatnonzero(h.overflow_counts).tolist()) <= set(range(split_low, low + 1))
    b = int(np.flatnonzero(h.overflow_counts)[0])
    chain = h.chain(b)
    sizes = [h.page(MAIN, blk).nentries for blk in chain]
    assert sizes[:-1] == [407] * (len(chain) - 1) and 0 < sizes[-1] <= 407
    assert sum(sizes) == len(h.bucket_ranks(b))
    # Overflow pages are numbered in the order the build filled the buckets, not by bucket.
    owners = [h.page(MAIN, blk).bucket for blk in range(buckets + 2, h.nblocks)]
    assert owners != sorted(owners) or len(owners) < 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key_hash": "hashtext"}, "key_hash = 'hashtext' is invalid: allowed hashint4, hashint8"),
        ({"overflow": "build"}, "overflow = 'build' needs key_hash"),
        (
            {"key_hash": "hashint4", "overflow": "build", "overflow_layout": "interleaved"},
            "numbers the overflow",
        ),
    ],
)
def test_hash_layout_fields_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        IndexSpec("hash", **fields)
    with pytest.raises(SettingError, match="does not apply to a btree index"):
        IndexSpec("btree", key_hash="hashint4")
    with pytest.raises(SettingError, match="descending = True does not apply to a hash index"):
        IndexSpec("hash", descending=True)
    with pytest.raises(SettingError, match="descending = 1 is invalid: allowed True or False"):
        IndexSpec("btree", descending=1)


def test_hash_overflow_numbering_given_exactly() -> None:
    # ("blocks", b0, b1, ...): overflow page k is block buckets + 2 + k and belongs to bucket b_k.
    spec = RelationSpec(
        name="h",
        nblocks=50,
        tuples_per_page=20,
        indexes=(IndexSpec("hash", buckets=8, overflow=("blocks", 3, 1, 3, 7)),),
        seed=1,
    )
    h = _build(spec).index_content()
    assert h.nblocks == 1 + 8 + 1 + 4
    assert (h.chain(3), h.chain(1), h.chain(7), h.chain(0)) == ([4, 10, 12], [2, 11], [8, 13], [1])
    assert [h.page(MAIN, b).bucket for b in range(10, 14)] == [3, 1, 3, 7]
    with pytest.raises(SettingError, match="names bucket 9 but buckets = 8"):
        IndexSpec("hash", buckets=8, overflow=("blocks", 9))
    with pytest.raises(SettingError, match=r"\('blocks', b0, b1, \.\.\.\) lists the bucket"):
        IndexSpec("hash", overflow=("blocks", -1))
    with pytest.raises(SettingError, match="names bucket 600 but the index has"):
        _build(spec.replace(indexes=(IndexSpec("hash", overflow=("blocks", 600)),))).index_content()
