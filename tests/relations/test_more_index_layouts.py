"""SP-GiST, GIN, BRIN and bloom index layouts (``reference_impl.relations``).

Each follows its build's page allocation as far as the C fixes it: bloom's signatures in heap
order after the metapage, 510 to a page at the default length; BRIN's metapage, revmap page and
regular pages of 408 int4 minmax summaries, with the FSM its build records; GIN's entry tree as
in-order inserts split it (a root split takes the right page's block first); SP-GiST's fixed
pages (metapage, root, nulls root) before its leaves.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference_impl import Instance, Settings
from reference_impl.errors import SettingError
from reference_impl.relations import IndexSpec, RelationSpec, build_relation, gin_sorted_build_layout
from reference_impl.relations.bloom import bloom_tuples_per_page
from reference_impl.relations.brin import BRIN_MINMAX_INT4_PER_PAGE, REVMAP_PAGE_MAXITEMS
from reference_impl.relations.gin import GIN_INT4_DOWNLINKS_PER_PAGE, GIN_INT4_ENTRIES_PER_LEAF
from reference_impl.storage.relation import ForkNumber, InvalidBlockNumber

MAIN = ForkNumber.MAIN


def _build(kind: str, nblocks: int = 400, **ispec: object):
    inst = Instance(Settings())
    return build_relation(
        inst,
        RelationSpec(
            name="t", nblocks=nblocks, tuples_per_page=30, indexes=(IndexSpec(kind, **ispec),), seed=3
        ),
    )


# ------------------------------------------------------------------------------------ bloom
def test_bloom_page_capacity_follows_the_signature_length() -> None:
    assert bloom_tuples_per_page() == 8160 // 16 == 510
    assert bloom_tuples_per_page(160) == 8160 // 26
    assert bloom_tuples_per_page(1) == 8160 // 8


def test_bloom_lays_signatures_out_in_heap_order_after_the_metapage() -> None:
    srel = _build("bloom")
    content = srel.index_content()
    total = 400 * 30
    assert srel.index().nblocks() == 1 + -(-total // 510)
    assert content.page(MAIN, 0).kind == "meta"
    first = content.page(MAIN, 1)
    blocks, offsets = first.heap_tids()
    assert first.nentries == 510 and list(blocks[:31]) == [0] * 30 + [1]
    assert list(offsets[:3]) == [1, 2, 3]
    last = content.page(MAIN, srel.index().nblocks() - 1)
    assert last.nentries == total - 510 * (srel.index().nblocks() - 2)
    assert srel.index().nblocks(ForkNumber.INIT) == 0  # a logged table has no init fork


def test_bloom_of_an_empty_table_is_its_metapage() -> None:
    assert _build("bloom", nblocks=0).index().nblocks() == 1


# ------------------------------------------------------------------------------------ BRIN
def test_brin_has_metapage_revmap_and_regular_pages_with_an_fsm() -> None:
    srel = _build("brin", nblocks=128 * 1000 + 5)
    content = srel.index_content()
    assert content.nranges == 1001
    assert BRIN_MINMAX_INT4_PER_PAGE == 408
    assert srel.index().nblocks() == 2 + 3
    kinds = [content.page(MAIN, b).kind for b in range(5)]
    assert kinds == ["meta", "revmap", "regular", "regular", "regular"]
    assert [content.page(MAIN, b).nentries for b in (2, 3, 4)] == [408, 408, 185]
    assert content.range_block(0) == 2 and content.range_block(408) == 3 and content.range_block(1000) == 4
    assert srel.index().nblocks(ForkNumber.FSM) == 3


def test_brin_pages_per_range_and_the_revmap_limit() -> None:
    assert _build("brin", nblocks=1000, pages_per_range=10).index_content().nranges == 100
    with pytest.raises(SettingError, match=f"more than {REVMAP_PAGE_MAXITEMS}"):
        _build("brin", nblocks=128 * REVMAP_PAGE_MAXITEMS + 1)


# ------------------------------------------------------------------------------------ GIN
def test_gin_capacities_are_an_int4_key_with_one_tid() -> None:
    assert GIN_INT4_ENTRIES_PER_LEAF == 291 and GIN_INT4_DOWNLINKS_PER_PAGE == 407


def test_gin_root_split_takes_the_right_page_first() -> None:
    levels, counts, children = gin_sorted_build_layout(292, 291, 407)
    assert levels == [[3, 2], [1]]
    assert counts == [147, 145] and children[1] == [3, 2]
    levels, counts, _ = gin_sorted_build_layout(291, 291, 407)
    assert levels == [[1]] and counts == [291]


def test_gin_sorted_build_splits_the_rightmost_leaf_in_halves() -> None:
    levels, counts, children = gin_sorted_build_layout(100_000, 291, 407)
    assert sum(counts) == 100_000
    assert set(counts[:-1]) == {147}  # every split leaves the left page with floor(292 / 2) + 1
    assert len(levels) == 3 and levels[-1] == [1]
    assert sorted(b for lv in levels for b in lv) == list(range(1, 1 + sum(len(lv) for lv in levels)))
    inner = levels[1]
    assert sum(len(children[b]) for b in inner) == len(levels[0])


def test_gin_pages_chain_leaves_in_key_order() -> None:
    srel = _build("gin", nblocks=2000)
    content = srel.index_content()
    page = content.page(MAIN, 1)
    assert page.kind == "root" and page.level >= 1
    while not page.is_leaf:
        page = content.page(MAIN, int(page.children[0]))
    ranks = []
    while True:
        ranks.extend(page.ranks().tolist())
        if page.right == InvalidBlockNumber:
            break
        page = content.page(MAIN, page.right)
    assert ranks == list(range(2000 * 30))
    blocks, _ = content.page(MAIN, content.level_blocks[0][0]).heap_tids()
    assert np.all(np.diff(blocks) >= 0)  # correlation 1: key order is heap order


# ------------------------------------------------------------------------------------ SP-GiST
def test_spgist_fixed_pages_then_leaves() -> None:
    srel = _build("spgist")
    content = srel.index_content()
    assert [content.page(MAIN, b).kind for b in range(4)] == ["meta", "internal", "leaf", "leaf"]
    assert content.page(MAIN, 2).nentries == 0  # the nulls root
    assert srel.index().nblocks() == 3 + -(-12000 // 200)
    sized = _build("spgist", pages=50)
    assert sized.index().nblocks() == 50
    assert sum(sized.index_content().page(MAIN, b).nentries for b in range(50)) == 12000


# ------------------------------------------------------------------------------------ specs
@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("bloom", "keys_per_leaf", 10),
        ("brin", "fanout", 10),
        ("gin", "pages", 10),
        ("spgist", "bloom_length", 80),
        ("btree", "pages_per_range", 8),
    ],
)
def test_fields_of_other_access_methods_are_refused(kind: str, field: str, value: int) -> None:
    with pytest.raises(SettingError, match=f"IndexSpec.{field} = {value} does not apply to a {kind} index"):
        IndexSpec(kind, **{field: value})


@pytest.mark.parametrize("kind", ["brin", "bloom"])
def test_heap_ordered_indexes_refuse_a_correlation(kind: str) -> None:
    with pytest.raises(SettingError, match=f"correlation = 0.5 does not apply to a {kind} index"):
        IndexSpec(kind, correlation=0.5)
