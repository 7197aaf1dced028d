"""A btree as ``CREATE INDEX`` lays it out (``nbtsort.c``), with lazy leaf contents.

The bottom-up build writes leaves left to right. Block 0 is the metapage; every other block
number is handed out in the order the build *allocates* pages (``btws_pages_alloced++``):

* a new leaf is allocated when the previous one is full;
* the first time a level needs a parent, the parent level's first page is allocated right after
  the page that triggered it (``_bt_pagestate``);
* a downlink to the finished page is then added to its parent, which may itself be full, so a
  new page is allocated on the parent level, and possibly a grandparent level is created;
* at the end (``_bt_uppershutdown``) the last page of each level gets its downlink, bottom up,
  and the single page left on the top level is the root.

When ``_bt_buildadd`` finds an inner page full it does not start the new page empty: it moves
the full page's last item onto the new page (it becomes the old page's high key there), and only
then adds the item that did not fit. So an inner page holds ``fanout`` items when it fills, but
every page except a level's last keeps ``fanout - 1`` downlinks, and every page after a level's
first takes only ``fanout - 1`` *new* downlinks before it fills. Level-1 pages of a
2,745-page int4 btree therefore sit at blocks 3, 289, 575, 860, 1145, ... (measured on 18.6), not
at the 3, 289, 576, 862, 1148, ... a build without the move would give.

So inner pages sit between leaves in physical order (block 3 is usually the first level-1 page),
which is why an amcheck walk in logical order reads blocks out of ascending order, while a VACUUM
bulk delete reads them physically. ``layout`` reproduces that allocation exactly for a given
number of leaves and inner fan-out. The build fills every leaf to its fill factor
(``keys_per_leaf`` keys: 366 int4 keys at the default 90 %) and leaves the remainder on the
rightmost leaf, which has no high key and so takes up to one key more (367), as a PostgreSQL
18.6 server's ``CREATE INDEX`` does (measured by the oracle and ``bt_page_stats``); an explicit
``keys_per_leaf`` fills every leaf, the rightmost included, to that many keys;
an explicit ``leaf_pages`` spreads the keys evenly instead (leaf *j* of *L* holds ranks
``⌊jT/L⌋ .. ⌊(j+1)T/L⌋ − 1``).

An index on an expression (``IndexSpec.expression``) has keys that repeat, so its leaves hold
posting lists and its pivots differ in size: ``btree_build.build_btree`` replays ``_bt_load``
tuple by tuple for it, and the content keeps each leaf's first rank and each inner page's first
child as arrays instead of the arithmetic above.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..errors import SettingError
from ..storage.relation import InvalidBlockNumber
from .btree_build import BTreeBuild, build_btree
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .layout import btree_items_per_page
from .spec import IndexSpec

__all__ = ["BTreeContent", "nbtsort_layout", "parent_pages", "tree_height"]

_DEFAULT_KEY_WIDTH = 4
_LEAF_FILLFACTOR = 90
_INNER_FILLFACTOR = 70


def nbtsort_layout(nleaves: int, fanout: int, *, first_block: int = 1) -> list[list[int]]:
    """Block numbers of each level's pages, left to right, in ``_bt_buildadd`` allocation order.

    Level 0 is the leaf level; the last level has one page, the root. ``first_block`` is the
    first block the build allocates (1: after the btree metapage). ``fanout`` is how many items
    an inner page holds when it fills (at least 3, as in ``nbtsort.c``, where a page always holds
    three items); the page split moves the last of them to the new page.
    """
    if fanout < 3:
        raise SettingError(f"btree fanout = {fanout} is invalid: allowed 3..4096 items per inner page")
    levels: list[list[int]] = []
    counts: list[int] = []
    alloc = first_block

    def new_page(level: int) -> None:
        nonlocal alloc
        if level == len(levels):
            levels.append([])
            counts.append(0)
        levels[level].append(alloc)
        alloc += 1

    def add_item(level: int, cap: int) -> None:
        if level == len(levels):
            new_page(level)
        if counts[level] == cap:
            new_page(level)
            if level + 1 == len(levels):
                new_page(level + 1)
            add_item(level + 1, fanout)
            # A leaf starts with the new item alone (``keys_per_leaf`` already counts what a
            # leaf keeps); an inner page starts with the full page's last item moved onto it.
            counts[level] = 1 if level == 0 else 2
        else:
            counts[level] += 1

    for _ in range(nleaves):
        add_item(0, 1)
    level = 0
    while level < len(levels) and level + 1 < len(levels):
        add_item(level + 1, fanout)
        level += 1
    return levels


def parent_pages(nchildren: int, fanout: int) -> int:
    """Pages a level of ``nchildren`` downlinks takes: one page up to ``fanout`` downlinks, else
    ``fanout - 1`` on every page but the last, which keeps 2 to ``fanout`` (see the module)."""
    if nchildren <= fanout:
        return 1
    return -(-(nchildren - 1) // (fanout - 1))


def tree_height(nleaves: int, fanout: int) -> int:
    """Levels (leaves included) a bottom-up build of ``nleaves`` leaves produces."""
    if nleaves <= 1:
        return 1 if nleaves == 1 else 0
    h = 1
    n = nleaves
    while n > 1:
        n = parent_pages(n, fanout)
        h += 1
    return h


class BTreeContent(IndexContent):
    """A synthetic btree index (``nbtree``): metapage, inner pages and leaves of heap TIDs."""

    kind = "btree"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        total = self.entries.total
        key_width = spec.key_width if spec.key_width is not None else _DEFAULT_KEY_WIDTH
        # One slot of each leaf is its high key.
        self.keys_per_leaf = (
            spec.keys_per_leaf
            if spec.keys_per_leaf is not None
            else btree_items_per_page(key_width, _LEAF_FILLFACTOR) - 1
        )
        fanout = (
            spec.fanout if spec.fanout is not None else btree_items_per_page(key_width, _INNER_FILLFACTOR)
        )
        # The tuple-by-tuple build of an index on an expression (None: the arithmetic layout).
        self.build: BTreeBuild | None = None
        if spec.expression is not None:
            self.build = build_btree(
                self.entries.keys(np.arange(total, dtype=np.int64)),
                key_width,
                deduplicate=spec.deduplicate,
            )
            nleaves = len(self.build.levels[0]) if self.build.levels else 0
            levels = self.build.levels
        else:
            if spec.leaf_pages is not None:
                nleaves = spec.leaf_pages
            elif spec.keys_per_leaf is not None:
                nleaves = -(-total // self.keys_per_leaf) if total else 0
            else:
                # _bt_buildadd finishes a leaf when the next item finds less than the fill
                # factor's free space, and moves its last item to the next leaf (the old leaf's
                # high key is a copy of it); the rightmost leaf is never finished that way and
                # has no high key, so it keeps one key more: 366, 366, ..., up to 367 int4 keys
                # (1,099 keys take 3 leaves on 18.6, not 4).
                nleaves = -(-(total - 1) // self.keys_per_leaf) if total > 1 else total
            if spec.levels is not None:
                fanout = self._fanout_for_levels(nleaves, spec.levels, fanout)
            levels = nbtsort_layout(nleaves, fanout)
        self.fanout = fanout
        self.nleaves = nleaves
        # Keys per leaf when the build fills leaves to capacity; None: spread evenly.
        self._leaf_fill: int | None = self.keys_per_leaf if spec.leaf_pages is None else None
        self.level_blocks = [np.asarray(lv, dtype=np.int64) for lv in levels]
        self.levels = len(self.level_blocks)
        self.nblocks = 1 + sum(len(lv) for lv in self.level_blocks)
        self.init_nblocks = 1
        self.root_block = int(self.level_blocks[-1][0]) if self.levels else InvalidBlockNumber
        self._level_of = np.zeros(self.nblocks, dtype=np.int8)
        self._pos_of = np.zeros(self.nblocks, dtype=np.int64)
        for lv, blocks in enumerate(self.level_blocks):
            self._level_of[blocks] = lv
            self._pos_of[blocks] = np.arange(len(blocks))

    @staticmethod
    def _fanout_for_levels(nleaves: int, levels: int, preferred: int) -> int:
        if levels == 1:
            if nleaves > 1:
                raise SettingError(
                    f"IndexSpec.levels = 1 needs a single leaf, but the index has {nleaves} leaves"
                )
            return preferred
        if nleaves < 2:
            raise SettingError(
                f"IndexSpec.levels = {levels} needs at least 2 leaves, the index has {nleaves}"
            )
        fits = [f for f in range(3, max(preferred, 3) + 1) if tree_height(nleaves, f) == levels]
        if not fits:
            fits = [f for f in range(3, 4097) if tree_height(nleaves, f) == levels]
        if not fits:
            most = tree_height(nleaves, 3)
            raise SettingError(
                f"IndexSpec.levels = {levels} is impossible with {nleaves} leaves: allowed 2..{most}"
            )
        return max(fits)

    # ------------------------------------------------------------------------------ structure
    def leaf_ranks(self, pos: int) -> tuple[int, int]:
        """(first rank, count) of leaf ``pos`` (0 = leftmost)."""
        if self.build is not None:
            first = self.build.leaf_first_rank
            return int(first[pos]), int(first[pos + 1] - first[pos])
        total = self.entries.total
        fill = self._leaf_fill
        if fill is not None:
            lo = pos * fill
            hi = total if pos == self.nleaves - 1 else min(total, lo + fill)
            return lo, hi - lo
        lo = pos * total // self.nleaves
        hi = (pos + 1) * total // self.nleaves
        return lo, hi - lo

    def leaf_of_rank(self, rank: int) -> int:
        """Position of the leaf holding key rank ``rank``."""
        total = self.entries.total
        if not 0 <= rank < max(total, 1):
            raise SettingError(f"key rank {rank} is out of range: allowed 0..{max(total - 1, 0)}")
        if self.build is not None:
            return int(np.searchsorted(self.build.leaf_first_rank, rank, side="right")) - 1
        if self._leaf_fill is not None:
            return min(rank // self._leaf_fill, self.nleaves - 1)
        pos = (rank * self.nleaves) // total if total else 0
        while pos + 1 < self.nleaves and self.leaf_ranks(pos + 1)[0] <= rank:
            pos += 1
        while pos > 0 and self.leaf_ranks(pos)[0] > rank:
            pos -= 1
        return pos

    def leaf_block(self, pos: int) -> int:
        return int(self.level_blocks[0][pos])

    def parent_pos(self, level: int, pos: int) -> int:
        """Position on level ``level + 1`` of the page holding the downlink to page ``pos`` of
        ``level``: every page but a level's last keeps ``fanout - 1`` downlinks."""
        if self.build is not None:
            starts = self.build.child_starts[level + 1]
            return int(np.searchsorted(starts[:-1], pos, side="right")) - 1
        return min(pos // (self.fanout - 1), len(self.level_blocks[level + 1]) - 1)

    def _children_range(self, level: int, pos: int) -> tuple[int, int]:
        """Positions on ``level - 1`` of the children of page ``pos`` of ``level``."""
        if self.build is not None:
            starts = self.build.child_starts[level]
            return int(starts[pos]), int(starts[pos + 1])
        per = self.fanout - 1
        nchildren = len(self.level_blocks[level - 1])
        last = pos == len(self.level_blocks[level]) - 1
        return pos * per, nchildren if last else (pos + 1) * per

    def descent(self, leaf_pos: int) -> list[int]:
        """Blocks from the root down to leaf ``leaf_pos`` (``_bt_search``)."""
        path = [int(self.level_blocks[0][leaf_pos])]
        pos = leaf_pos
        for lv in range(self.levels - 1):
            pos = self.parent_pos(lv, pos)
            path.append(int(self.level_blocks[lv + 1][pos]))
        path.reverse()
        return path

    def logical_order(self) -> list[int]:
        """Every page but the metapage, root level first, each level left to right."""
        return [int(b) for lv in range(self.levels - 1, -1, -1) for b in self.level_blocks[lv]]

    # ------------------------------------------------------------------------------ pages
    def _page(self, block: int) -> IndexPage:
        if block == 0:
            return IndexPage(self, 0, "meta", level=self.levels - 1 if self.levels else 0)
        lv = int(self._level_of[block])
        pos = int(self._pos_of[block])
        blocks = self.level_blocks[lv]
        left = int(blocks[pos - 1]) if pos > 0 else InvalidBlockNumber
        right = int(blocks[pos + 1]) if pos + 1 < len(blocks) else InvalidBlockNumber
        is_root = block == self.root_block
        if lv == 0:
            first, n = self.leaf_ranks(pos)
            items = tuple_bytes = -1
            if self.build is not None:
                items = int(self.build.leaf_items[pos])
                tuple_bytes = int(self.build.leaf_tuple_bytes[pos])
            return IndexPage(
                self,
                block,
                "root" if is_root else "leaf",
                level=0,
                is_root=is_root,
                left=left,
                right=right,
                first_rank=first,
                nentries=n,
                items=items,
                tuple_bytes=tuple_bytes,
            )
        below = self.level_blocks[lv - 1]
        lo, hi = self._children_range(lv, pos)
        children = below[lo:hi].copy()
        return IndexPage(
            self,
            block,
            "root" if is_root else "internal",
            level=lv,
            is_root=is_root,
            left=left,
            right=right,
            children=children,
        )

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "meta")

    def heap_tids_of_ranks(self, lo: int, hi: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """TIDs of key ranks ``lo .. hi - 1`` in key order (what a range scan returns)."""
        return self.entries.tids_of_ranks(np.arange(lo, hi, dtype=np.int64))
