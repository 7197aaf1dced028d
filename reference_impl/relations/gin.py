"""A GIN index as ``ginbuild`` lays out its entry tree (``gininsert.c``, ``ginbtree.c``).

``ginbuild`` allocates the metapage (block 0) and the root (block 1, a leaf at first), collects
the keys of the heap in memory and inserts them into the entry tree in key order
(``ginEntryInsert``). Every insert lands on the rightmost leaf; a full page splits
(``ginPlaceToPage`` → ``entrySplitPage``) so that both halves hold about the same bytes — of
``n`` equal tuples the left page keeps ``⌊n / 2⌋ + 1`` — and further inserts fill the right
half. ``GinNewBuffer`` extends the index (no free pages during a build): a non-root split gets
one new block for the right page; a root split gets the right page's block first and the left
page's next, and the root stays at block 1 with the two downlinks. Inner pages fill and split
the same way. The leaves, left to right, hold consecutive key ranks; ``rightlink`` chains them.

The model's GIN index has one heap TID per key (an index on a unique column, e.g. ``btree_gin``
on ``id``): every posting list is inline in its entry tuple (no posting trees) and nothing is
left in the pending list. ``keys_per_leaf`` is how many entry tuples a leaf takes (291 for an
int4 key with one TID: 24 bytes MAXALIGNed plus its line pointer, while ``PageGetFreeSpace``
leaves room for one more), ``fanout`` the downlinks of an inner page (407: a 16-byte key tuple).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from ..storage.relation import InvalidBlockNumber
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .spec import IndexSpec

__all__ = ["GinContent", "gin_sorted_build_layout", "GIN_ROOT_BLKNO"]

GIN_METAPAGE_BLKNO = 0
GIN_ROOT_BLKNO = 1
GIN_INT4_ENTRIES_PER_LEAF = (8152 - 24) // 28 + 1
GIN_INT4_DOWNLINKS_PER_PAGE = (8152 - 16) // 20 + 1


def _split(n: int) -> int:
    """Items the left page keeps when ``n`` equal items are split (``entrySplitPage``)."""
    return n // 2 + 1


def gin_sorted_build_layout(
    nentries: int, leaf_cap: int, inner_cap: int
) -> tuple[list[list[int]], list[int], dict[int, list[int]]]:
    """The entry tree after inserting ``nentries`` keys in order.

    Returns ``(levels, leaf_counts, children)``: the blocks of each level left to right (0 =
    leaves; the top level is ``[1]``), the entries of each leaf (same order), and the downlinks of
    each inner block.
    """
    levels: list[list[int]] = [[GIN_ROOT_BLKNO]]
    counts: list[int] = [0]  # entries of each leaf, in levels[0] order
    children: dict[int, list[int]] = {}
    next_block = [GIN_ROOT_BLKNO + 1]

    def alloc() -> int:
        b = next_block[0]
        next_block[0] = b + 1
        return b

    def add_downlink(level: int, child: int) -> None:
        """Insert the new rightmost page ``child`` of ``level - 1`` into its parent at ``level``."""
        parent = levels[level][-1]
        kids = children[parent]
        if len(kids) < inner_cap:
            kids.append(child)
            return
        kids = [*kids, child]
        keep = _split(len(kids))
        if len(levels) - 1 == level:  # the root splits
            right, left = alloc(), alloc()
            children[left], children[right] = kids[:keep], kids[keep:]
            levels[level] = [left, right]
            levels.append([GIN_ROOT_BLKNO])
            children[GIN_ROOT_BLKNO] = [left, right]
            return
        right = alloc()
        children[parent], children[right] = kids[:keep], kids[keep:]
        levels[level].append(right)
        add_downlink(level + 1, right)

    remaining = nentries
    while remaining > 0:
        take = min(remaining, leaf_cap - counts[-1])
        counts[-1] += take
        remaining -= take
        if remaining == 0:
            break
        # One more key: the rightmost leaf splits.
        remaining -= 1
        n = leaf_cap + 1
        keep = _split(n)
        if len(levels) == 1:  # the root is the only leaf
            right, left = alloc(), alloc()
            levels[0] = [left, right]
            counts[:] = [keep, n - keep]
            levels.append([GIN_ROOT_BLKNO])
            children[GIN_ROOT_BLKNO] = [left, right]
            continue
        right = alloc()
        counts[-1] = keep
        counts.append(n - keep)
        levels[0].append(right)
        add_downlink(1, right)
    return levels, counts, children


class GinContent(IndexContent):
    """A synthetic GIN index (``gin``): metapage, root at block 1, the entry tree of a sorted build."""

    kind = "gin"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        self.leaf_cap = spec.keys_per_leaf if spec.keys_per_leaf is not None else GIN_INT4_ENTRIES_PER_LEAF
        self.inner_cap = spec.fanout if spec.fanout is not None else GIN_INT4_DOWNLINKS_PER_PAGE
        levels, counts, children = gin_sorted_build_layout(self.entries.total, self.leaf_cap, self.inner_cap)
        self.level_blocks = levels
        self.levels = len(levels)
        self.children = children
        self.root_block = GIN_ROOT_BLKNO
        self.nblocks = 1 + sum(len(lv) for lv in levels)
        self.init_nblocks = 2  # ginbuildempty: metapage and root
        self._leaf_pos = {b: i for i, b in enumerate(levels[0])}
        self._first = np.concatenate(([0], np.cumsum(np.asarray(counts, dtype=np.int64))))
        self._level_of = {b: lv for lv, blocks in enumerate(levels) for b in blocks}
        self._right: dict[int, int] = {}
        for blocks in levels:
            for a, b in pairwise(blocks):
                self._right[a] = b

    def _page(self, block: int) -> IndexPage:
        if block == GIN_METAPAGE_BLKNO:
            return IndexPage(self, 0, "meta")
        lv = self._level_of[block]
        right = self._right.get(block, InvalidBlockNumber)
        is_root = block == GIN_ROOT_BLKNO
        if lv == 0:
            pos = self._leaf_pos[block]
            first = int(self._first[pos])
            n = int(self._first[pos + 1]) - first
            kind = "root" if is_root else "leaf"
            return IndexPage(self, block, kind, is_root=is_root, right=right, first_rank=first, nentries=n)
        kids = np.asarray(self.children[block], dtype=np.int64)
        kind = "root" if is_root else "internal"
        return IndexPage(self, block, kind, level=lv, is_root=is_root, right=right, children=kids)

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "meta" if block == 0 else "root", is_root=block == GIN_ROOT_BLKNO)
