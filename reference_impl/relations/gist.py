"""A GiST index as the sorted build lays it out (``gistbuild.c``, ``gist_indexsortbuild``).

The sorted build keeps block 0 for the root and hands out every other block number when a page
is *written*: a leaf when it is full (or at the end), an inner page when its own downlinks fill it
(or at the end), so children always precede their parent in physical order and the root's
contents land in block 0 last. Leaves hold ``keys_per_leaf`` entries (default from a 16-byte
key, fill factor 90), inner pages ``fanout`` downlinks. Leaf *j* of *L* holds key ranks
``⌊jT/L⌋ .. ⌊(j+1)T/L⌋ − 1``; ``correlation`` relates that order to the heap's (spatial keys
usually have little correlation: use a low value). ``pages``, when given, fixes the total page
count and the number of leaves is derived from it.
"""

from __future__ import annotations

import numpy as np

from ..errors import SettingError
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .layout import btree_items_per_page
from .spec import IndexSpec

__all__ = ["GistContent", "gist_sorted_layout"]

_DEFAULT_KEY_WIDTH = 16
_FILLFACTOR = 90


def gist_sorted_layout(nleaves: int, fanout: int) -> list[list[int]]:
    """Blocks of each level (0 = leaves), left to right; the top level's single page is block 0."""
    if nleaves <= 1:
        return [[0]]
    levels: list[list[int]] = [[]]
    fill: list[int] = [0]  # downlinks on the current (unwritten) page of each level
    alloc = 1

    def add_downlink(level: int) -> None:
        if level == len(levels):
            levels.append([])
            fill.append(0)
        if fill[level] == fanout:
            write(level)
            fill[level] = 0
        fill[level] += 1

    def write(level: int) -> None:
        # The current page of `level` is written: it gets the next block and a downlink above.
        nonlocal alloc
        levels[level].append(alloc)
        alloc += 1
        add_downlink(level + 1)

    for _ in range(nleaves):
        write(0)
    level = 1
    while level < len(levels):
        if level == len(levels) - 1:
            levels[level].append(0)  # the root: the top level's only page, copied to block 0
            break
        write(level)
        level += 1
    return levels


def _total_pages(nleaves: int, fanout: int) -> int:
    return sum(len(lv) for lv in gist_sorted_layout(nleaves, fanout))


class GistContent(IndexContent):
    """A synthetic GiST index (``gist``): root at block 0, inner pages and leaves of heap TIDs."""

    kind = "gist"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        total = self.entries.total
        key_width = spec.key_width if spec.key_width is not None else _DEFAULT_KEY_WIDTH
        per_leaf = (
            spec.keys_per_leaf
            if spec.keys_per_leaf is not None
            else btree_items_per_page(key_width, _FILLFACTOR)
        )
        self.fanout = spec.fanout if spec.fanout is not None else btree_items_per_page(key_width, _FILLFACTOR)
        if spec.pages is not None:
            nleaves = self._leaves_for_pages(spec.pages, self.fanout)
        else:
            nleaves = max(1, -(-total // per_leaf))
        self.nleaves = nleaves
        self.level_blocks = [
            np.asarray(lv, dtype=np.int64) for lv in gist_sorted_layout(nleaves, self.fanout)
        ]
        self.levels = len(self.level_blocks)
        self.nblocks = sum(len(lv) for lv in self.level_blocks)
        self.init_nblocks = 1
        self.root_block = 0
        self._level_of = np.zeros(self.nblocks, dtype=np.int8)
        self._pos_of = np.zeros(self.nblocks, dtype=np.int64)
        for lv, blocks in enumerate(self.level_blocks):
            self._level_of[blocks] = lv
            self._pos_of[blocks] = np.arange(len(blocks))

    @staticmethod
    def _leaves_for_pages(pages: int, fanout: int) -> int:
        lo, hi = 1, pages
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _total_pages(mid, fanout) <= pages:
                lo = mid
            else:
                hi = mid - 1
        got = _total_pages(lo, fanout)
        if got != pages:
            raise SettingError(
                f"IndexSpec.pages = {pages} cannot be built with fanout {fanout}: the nearest sizes are "
                f"{got} and {_total_pages(lo + 1, fanout)} pages"
            )
        return lo

    def leaf_ranks(self, pos: int) -> tuple[int, int]:
        total = self.entries.total
        lo = pos * total // self.nleaves
        return lo, (pos + 1) * total // self.nleaves - lo

    def logical_order(self) -> list[int]:
        """Root first, then each level left to right (a breadth-first walk)."""
        return [int(b) for lv in range(self.levels - 1, -1, -1) for b in self.level_blocks[lv]]

    def _page(self, block: int) -> IndexPage:
        lv = int(self._level_of[block])
        pos = int(self._pos_of[block])
        is_root = block == 0
        if lv == 0:
            first, n = self.leaf_ranks(pos)
            return IndexPage(
                self,
                block,
                "root" if is_root else "leaf",
                level=0,
                is_root=is_root,
                first_rank=first,
                nentries=n,
            )
        below = self.level_blocks[lv - 1]
        return IndexPage(
            self,
            block,
            "root" if is_root else "internal",
            level=lv,
            is_root=is_root,
            children=below[pos * self.fanout : (pos + 1) * self.fanout].copy(),
        )

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "root", is_root=True)
