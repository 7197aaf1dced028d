"""A BRIN index as ``brinbuild`` lays it out (``brin.c``, ``brin_revmap.c``, ``brin_pageops.c``).

``brinbuild`` extends the index to its metapage (block 0) and then summarizes the heap range by
range, ``pages_per_range`` heap blocks each, the last one possibly partial, inserting one
summary tuple per range (``form_and_insert_tuple`` → ``brin_doinsert``). Each insert first makes
sure the range map covers the range (``brinRevmapExtend``: the first insert extends the index by
the first revmap page, block 1) and then puts the tuple on the current insert page
(``brin_getinsertbuffer``: the relation's target block, or a new block when it is full). So:

* block 0: the metapage; block 1: the revmap page, whose ``REVMAP_PAGE_MAXITEMS`` = (8192 − 24
  − 8) / 6 = 1360 TIDs point to the ranges' tuples;
* blocks 2 ..: regular pages, filled in range order, ``keys_per_leaf`` tuples each (408 for an
  int4 minmax tuple: 16 bytes MAXALIGNed plus its line pointer, while ``PageGetFreeSpace`` leaves
  room for one more).

A heap of more than 1360 ranges needs a second revmap page, which ``revmap_physical_extend``
makes by evacuating the regular page at block 2 (its tuples move to new pages at the end); that
reshuffle is not modelled, and such a spec is refused in one line.

When the build finishes, ``terminate_brin_buildstate`` records the last insert page's free space
in the FSM (and full pages were recorded as they filled), so the index has an FSM fork covering
its last block.
"""

from __future__ import annotations

from ..errors import SettingError
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .spec import IndexSpec

__all__ = ["BrinContent", "REVMAP_PAGE_MAXITEMS", "BRIN_DEFAULT_PAGES_PER_RANGE", "BRIN_MINMAX_INT4_PER_PAGE"]

REVMAP_PAGE_MAXITEMS = (8192 - 24 - 8) // 6
BRIN_DEFAULT_PAGES_PER_RANGE = 128
#: int4 minmax summaries a regular page takes: (8156 - 16) // 20 + 1.
BRIN_MINMAX_INT4_PER_PAGE = (8156 - 16) // 20 + 1


class BrinContent(IndexContent):
    """A synthetic BRIN index (``brin``): metapage, one revmap page, regular pages of summaries."""

    kind = "brin"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        self.pages_per_range = (
            spec.pages_per_range if spec.pages_per_range is not None else BRIN_DEFAULT_PAGES_PER_RANGE
        )
        self.per_page = spec.keys_per_leaf if spec.keys_per_leaf is not None else BRIN_MINMAX_INT4_PER_PAGE
        heap_blocks = heap.spec.nblocks
        self.nranges = -(-heap_blocks // self.pages_per_range)
        if self.nranges > REVMAP_PAGE_MAXITEMS:
            raise SettingError(
                f"IndexSpec(brin) on {heap_blocks} heap blocks has {self.nranges} ranges of "
                f"{self.pages_per_range} pages: more than {REVMAP_PAGE_MAXITEMS} (a second revmap page, "
                "made by evacuating a regular page) is not modelled; raise pages_per_range"
            )
        self.revmap_pages = 1 if self.nranges else 0
        self.first_regular = 1 + self.revmap_pages
        self.nregular = -(-self.nranges // self.per_page)
        self.nblocks = self.first_regular + self.nregular
        self.init_nblocks = 1  # brinbuildempty: the metapage

    def range_block(self, rng: int) -> int:
        """The regular page holding range ``rng``'s summary (what the revmap points to)."""
        return self.first_regular + rng // self.per_page

    def _page(self, block: int) -> IndexPage:
        if block == 0:
            return IndexPage(self, 0, "meta")
        if block < self.first_regular:
            return IndexPage(self, block, "revmap")
        first = (block - self.first_regular) * self.per_page
        n = min(self.per_page, self.nranges - first)
        return IndexPage(None, block, "regular", first_rank=first, nentries=n)

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "meta")
