"""Indexes on an expression (``IndexSpec.expression``) and btree posting lists (``btree_build``).

The figures marked "measured" are ``pgstatindex`` and ``bt_page_stats`` (``pageinspect``) of
PostgreSQL 18.6 for ``CREATE INDEX ... ((expr))`` on a table whose ``id`` runs 0 .. T − 1 in heap
order (226 rows a page: 200,010 rows in 885 pages, 1,000,050 in 4,425). ``live_items`` counts a
page's high key; ``free_size`` is ``PageGetFreeSpace``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, SettingError
from reference_impl.relations import IndexSpec, RelationSpec, build_relation, nbtsort_layout
from reference_impl.relations.btree import BTreeContent
from reference_impl.relations.btree_build import (
    POSTING_MAX_BYTES,
    build_btree,
    leaf_page_starts,
    posting_items,
    sized_inner_levels,
)
from reference_impl.relations.expression import evaluate, expression_sql
from reference_impl.relations.hashfuncs import hashint4, hashkey_to_bucket
from reference_impl.relations.hashindex import HashContent
from reference_impl.relations.layout import btree_items_per_page
from reference_impl.scans import run_scan
from reference_impl.storage.relation import ForkNumber, InvalidBlockNumber

_ROWS = {885: 200_010, 4425: 1_000_050}

# (expression, deduplicate, heap blocks, tree_level, index blocks, root, leaves,
#  inner pages [(block, live_items)], live_items of leaves 0, 1, 2 and the last,
#  free_size of leaves 0, 1, 2 and the last): measured on 18.6.
MEASURED: list[tuple[Any, ...]] = [
    (("mod", 100), True, 885, 1, 180, 3, 178, [(3, 178)], [10, 10, 10, 7], [812, 1476, 812, 3136]),
    (("mod", 7), True, 885, 1, 171, 3, 169, [(3, 169)], [10, 10, 10, 7], [812, 812, 812, 2896]),
    (
        ("div", 2),
        True,
        885,
        2,
        497,
        290,
        493,
        [(3, 285), (289, 209), (290, 2)],
        [204] * 3 + [129],
        [820] * 3 + [3504],
    ),
    (
        ("mul", -1),
        True,
        885,
        2,
        551,
        290,
        547,
        [(3, 285), (289, 263), (290, 2)],
        [367] * 3 + [174],
        [808] * 3 + [4668],
    ),
    (
        ("div", 3),
        True,
        885,
        2,
        404,
        290,
        400,
        [(3, 285), (289, 116), (290, 2)],
        [168] * 3 + [37],
        [780] * 3 + [6520],
    ),
    (("mod", 1000), True, 885, 1, 169, 3, 167, [(3, 167)], [12, 13, 13, 9], [1068, 640, 680, 2760]),
    (
        ("mod", 7),
        True,
        4425,
        2,
        850,
        209,
        843,
        [(3, 204), (208, 204), (209, 5), (413, 204), (617, 204), (821, 31)],
        [10, 10, 10, 3],
        [812, 812, 812, 6264],
    ),
    (
        ("mod", 100),
        False,
        4425,
        2,
        2749,
        209,
        2733,
        [(3, 204), (208, 204), (209, 14), (413, 204), (617, 204), (821, 204), (1025, 204), (1229, 204)],
        [367] * 3 + [138],
        [800] * 3 + [5388],
    ),
    (
        ("div", 1000),
        True,
        4425,
        2,
        896,
        217,
        889,
        [(3, 212), (216, 212), (217, 5), (429, 212), (641, 212), (853, 45)],
        [10, 10, 10, 9],
        [1148, 1148, 1148, 1664],
    ),
    (
        ("mod", 5000),
        True,
        4425,
        2,
        841,
        209,
        834,
        [(3, 204), (208, 204), (209, 5), (413, 204), (617, 204), (821, 22)],
        [12, 13, 13, 5],
        [1068, 632, 632, 5240],
    ),
]


def _btree(expression: Any, nblocks: int, deduplicate: bool = True) -> BTreeContent:
    spec = RelationSpec(
        name="e",
        nblocks=nblocks,
        tuple_width=5,
        indexes=(IndexSpec("btree", expression=expression, deduplicate=deduplicate),),
        seed=1,
    )
    content = build_relation(Instance(), spec).index_content()
    assert isinstance(content, BTreeContent)
    return content


def _live_items(bt: BTreeContent, block: int) -> int:
    """``bt_page_stats.live_items``: the page's tuples (or downlinks) and its high key."""
    page = bt.page(ForkNumber.MAIN, block)
    high_key = 1 if page.right != InvalidBlockNumber else 0
    if page.is_leaf:
        return page.items + high_key
    assert page.children is not None
    return len(page.children) + high_key


def _free_size(bt: BTreeContent, block: int) -> int:
    """``bt_page_stats.free_size`` of a leaf: ``PageGetFreeSpace``."""
    page = bt.page(ForkNumber.MAIN, block)
    return 8192 - 16 - 24 - 4 * _live_items(bt, block) - page.tuple_bytes - 4


@pytest.mark.parametrize(
    ("expression", "dedup", "nblocks", "level", "blocks", "root", "leaves", "inner", "items", "free"),
    MEASURED,
    ids=[f"{expression_sql(m[0])}{'' if m[1] else '-nodedup'}-{_ROWS[m[2]]}" for m in MEASURED],
)
def test_btree_on_an_expression_as_measured_on_postgresql_18(
    expression: Any,
    dedup: bool,
    nblocks: int,
    level: int,
    blocks: int,
    root: int,
    leaves: int,
    inner: list[tuple[int, int]],
    items: list[int],
    free: list[int],
) -> None:
    bt = _btree(expression, nblocks, dedup)
    assert bt.entries.total == _ROWS[nblocks]
    assert (bt.levels - 1, bt.nblocks, bt.root_block, bt.nleaves) == (level, blocks, root, leaves)
    inner_blocks = sorted(int(b) for lv in bt.level_blocks[1:] for b in lv)
    assert inner_blocks[: len(inner)] == [b for b, _ in inner]
    assert [_live_items(bt, b) for b, _ in inner] == [n for _, n in inner]
    leaf = bt.level_blocks[0]
    picked = [int(leaf[0]), int(leaf[1]), int(leaf[2]), int(leaf[-1])]
    assert [_live_items(bt, b) for b in picked] == items
    assert [_free_size(bt, b) for b in picked] == free


def test_posting_lists_hold_132_int4_tids() -> None:
    # MAXALIGN(16 + 6 n) <= 812: 132 TIDs (808 bytes); a single TID left is a plain tuple.
    keys = np.repeat(np.arange(4), [300, 133, 1, 2]).astype(np.int64)
    ntids, sizes = posting_items(keys)
    assert ntids.tolist() == [132, 132, 36, 132, 1, 1, 2]
    assert sizes.tolist() == [808, 808, 232, 808, 16, 16, 32]
    assert POSTING_MAX_BYTES == 812 and max(sizes) <= POSTING_MAX_BYTES
    plain_ntids, plain_sizes = posting_items(keys, deduplicate=False)
    assert plain_ntids.tolist() == [1] * keys.size and set(plain_sizes.tolist()) == {16}


def test_unique_keys_fill_leaves_as_the_arithmetic_layout_does() -> None:
    # Without duplicates the tuple-by-tuple build is the closed form of btree.py: 366 a leaf.
    total = 200_010
    _, sizes = posting_items(np.arange(total, dtype=np.int64))
    starts = leaf_page_starts(sizes, np.zeros_like(sizes))
    assert np.diff(starts).tolist() == [366] * (starts.size - 1)
    assert starts.size == -(-total // 366)
    plain = build_relation(
        Instance(), RelationSpec(name="p", nblocks=885, tuple_width=5, indexes=(IndexSpec("btree"),))
    ).index_content()
    assert isinstance(plain, BTreeContent)
    assert plain.nblocks == _btree(("mul", -1), 885).nblocks == 551


@pytest.mark.parametrize(
    "total", [1, 2, 365, 366, 367, 368, 732, 733, 734, 735, 1098, 1099, 1100, 3661, 3662]
)
def test_unique_key_leaves_at_every_boundary(total: int) -> None:
    """The closed form gives the leaves the tuple-by-tuple build gives, at each boundary: every
    leaf but the rightmost keeps 366 keys, and the rightmost, with no high key, up to 367
    (1,099 keys take 3 leaves on 18.6; the closed form once gave 4)."""
    spec = RelationSpec(name="b", nblocks=total, tuples_per_page=1, indexes=(IndexSpec("btree"),))
    bt = build_relation(Instance(), spec).index_content()
    assert isinstance(bt, BTreeContent) and bt.build is None
    replayed = build_btree(np.arange(total, dtype=np.int64), 4, deduplicate=True)
    closed = [bt.leaf_ranks(pos)[1] for pos in range(bt.nleaves)]
    assert closed == np.diff(replayed.leaf_first_rank).tolist()
    assert bt.nblocks == 1 + sum(len(level) for level in replayed.levels)
    assert [bt.leaf_of_rank(r) for r in (0, total - 1)] == [0, bt.nleaves - 1]


@settings(max_examples=30, deadline=None)
@given(nleaves=st.integers(1, 70_000))
def test_sized_inner_levels_with_equal_pivots_is_nbtsort_layout(nleaves: int) -> None:
    # 16-byte pivots (an int4 key without heap TID) and the leftmost minus infinity: 285 items
    # an inner page at fill factor 70, the fan-out the arithmetic layout uses.
    sizes = np.full(nleaves, 16, dtype=np.int64)
    sizes[0] = 8
    levels, starts = sized_inner_levels(sizes)
    fanout = btree_items_per_page(4, 70)
    assert levels == nbtsort_layout(nleaves, fanout)
    for lv in range(1, len(levels)):
        per = fanout - 1
        want = [p * per for p in range(len(levels[lv]))] + [len(levels[lv - 1])]
        assert starts[lv].tolist() == want


def test_expression_index_orders_by_value_then_heap_tid() -> None:
    bt = _btree(("mod", 100), 885)
    total = bt.entries.total
    ranks = np.arange(total, dtype=np.int64)
    values = bt.entries.keys(ranks)
    tuples = bt.entries.heap_positions(ranks)
    assert np.all(np.diff(values) >= 0)
    same = np.diff(values) == 0
    assert np.all(np.diff(tuples)[same] > 0)  # equal values by heap TID
    assert np.array_equal(np.sort(tuples), ranks)  # every tuple once
    assert np.array_equal(values, evaluate(("mod", 100), tuples))  # id = tuple number here
    # Leaves cover the ranks in order, each as many TIDs as its posting lists hold.
    firsts = [bt.leaf_ranks(p)[0] for p in range(bt.nleaves)]
    assert firsts == sorted(firsts) and sum(bt.leaf_ranks(p)[1] for p in range(bt.nleaves)) == total
    assert all(bt.leaf_of_rank(f) == p for p, f in enumerate(firsts))


def test_descent_follows_the_sized_downlinks() -> None:
    bt = _btree(("mod", 5000), 4425)
    for pos in (0, 203, 204, 417, 833):
        path = bt.descent(pos)
        assert path[0] == bt.root_block and path[-1] == int(bt.level_blocks[0][pos])
        for parent, child in itertools.pairwise(path):
            children = bt.page(ForkNumber.MAIN, parent).children
            assert children is not None and child in children.tolist()


def test_range_scan_on_an_expression_takes_whole_runs_of_values() -> None:
    spec = RelationSpec(
        name="e", nblocks=885, tuple_width=5, indexes=(IndexSpec("btree", expression=("mod", 100)),), seed=1
    )
    inst = Instance()
    rel = build_relation(inst, spec)
    bt = rel.index_content()
    total = bt.entries.total
    lo, hi = bt.entries.key_group_span(10_000, 12_000)  # ranks of values 4 and 5
    assert bt.entries.key_bounds(10_000, 12_000) == (4, 6)
    ids = np.arange(total)
    assert (lo, hi) == (int(np.count_nonzero(ids % 100 < 4)), int(np.count_nonzero(ids % 100 < 6)))
    res = run_scan(
        "indexscan", inst.backend(), rel.heap, variant="unstreamed", key_start=0.05, selectivity=0.01
    )
    assert res.result["key_range"] == [lo, hi]
    assert res.result["rows"] == hi - lo == int(np.count_nonzero((ids % 100 >= 4) & (ids % 100 < 6)))


def test_hash_index_on_an_expression_hashes_the_values() -> None:
    spec = RelationSpec(
        name="h",
        nblocks=885,
        tuple_width=5,
        indexes=(IndexSpec("hash", expression=("mod", 100), key_hash="hashint4", overflow="build"),),
        seed=1,
    )
    content = build_relation(Instance(), spec).index_content()
    assert isinstance(content, HashContent)
    assert content.nbuckets == 768
    want = set(hashkey_to_bucket(hashint4(np.arange(100)), 768).tolist())
    used = {b for b in range(content.nbuckets) if content.bucket_ranks(b).size}
    assert used == want
    for b in sorted(used)[:5]:
        values = content.entries.keys(content.bucket_ranks(b))
        assert set(hashkey_to_bucket(hashint4(values), 768).tolist()) == {b}
    # Measured on 18.6 (pgstathashindex): 768 bucket pages, 404 overflow pages, one bitmap page.
    assert int(content.overflow_counts.sum()) == 404 and content.nblocks == 1174


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"expression": ("pow", 2)}, r"expression = \('pow', 2\) is invalid: allowed"),
        ({"expression": "id % 100"}, r"expression = 'id % 100' is invalid"),
        ({"expression": ("mod", 0)}, r"divides by zero"),
        ({"expression": ("add", 2**31)}, r"constant must be an int4"),
        ({"kind": "gist", "expression": ("mod", 3)}, r"does not apply to a gist index"),
        ({"expression": ("mod", 3), "fanout": 10}, r"leave fanout unset"),
        ({"expression": ("mod", 3), "descending": True}, r"expression=\('mul', -1\)"),
        ({"kind": "hash", "deduplicate": False}, r"deduplicate = False does not apply to a hash"),
        ({"deduplicate": "off"}, r"deduplicate = 'off' is invalid"),
    ],
)
def test_expression_fields_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message) as info:
        IndexSpec(**kwargs)
    assert "\n" not in str(info.value)


def test_expression_out_of_int4_range_is_an_error() -> None:
    spec = RelationSpec(nblocks=885, tuple_width=5, indexes=(IndexSpec("btree", expression=("mul", 20_000)),))
    with pytest.raises(SettingError, match="out of range for ids up to 200009: the values must fit int4"):
        build_relation(Instance(), spec)


def test_c_division_truncates_toward_zero() -> None:
    ids = np.array([0, 1, 7, 9], dtype=np.int64)
    assert evaluate(("div", -2), ids).tolist() == [0, 0, -3, -4]
    assert evaluate(("mod", -4), ids).tolist() == [0, 1, 3, 1]
    assert evaluate(("mul", -1), ids).tolist() == [0, -1, -7, -9]
    assert expression_sql(("mod", 100)) == "(id % 100)"


def test_pgstatindex_density_uses_the_exact_free_space() -> None:
    # pgstatindex adds PageGetExactFreeSpace (pd_upper - pd_lower) of each leaf: measured 85.24
    # for (id % 100), 90.05 without deduplication and 89.95 for unique int4 keys (200,010 rows).
    for index, density in (
        (IndexSpec("btree", expression=("mod", 100)), 85.24),
        (IndexSpec("btree", expression=("mod", 100), deduplicate=False), 90.05),
        (IndexSpec("btree"), 89.95),
    ):
        inst = Instance()
        rel = build_relation(inst, RelationSpec(name="d", nblocks=885, tuple_width=5, indexes=(index,)))
        res = run_scan("pgstatindex", inst.backend(), rel.index(), variant="unstreamed")
        assert res.result["avg_leaf_density"] == density, index


def test_builder_refuses_a_hash_expression_without_its_build_layout() -> None:
    from pytest_readstream.postgres.impl.relbuild import UnsupportedLayout, model_layout

    spec = RelationSpec(
        name="h", nblocks=10, tuple_width=5, indexes=(IndexSpec("hash", expression=("mod", 10)),)
    )
    with pytest.raises(UnsupportedLayout, match="key_hash='hashint4' and overflow='build'"):
        model_layout(spec)
