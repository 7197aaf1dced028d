"""An SP-GiST index: the fixed pages ``spgbuild`` makes first, then its leaves (``spgist``).

``spgbuild`` allocates the metapage (block 0, ``SPGIST_METAPAGE_BLKNO``), the root (block 1,
``SPGIST_ROOT_BLKNO``) and the root of the nulls tree (block 2, ``SPGIST_NULL_BLKNO``), then
inserts every heap tuple with ``spgdoinsert``; where each leaf and inner tuple lands depends on
the operator class's ``choose`` and ``picksplit`` (a quad tree of points, a radix tree of
text ...), which the model does not run. It lays the rest out as leaves in key order after the
fixed pages: block 1 is the (inner) root, block 2 the empty nulls root, blocks 3 .. hold
``keys_per_leaf`` entries each (default 200), and ``pages`` gives the total instead (a server's
index size), the entries then spread evenly over its leaves. A build places moved tuples as
placeholders, not redirects, so a freshly built index has no redirect chains and VACUUM's
pending list stays empty.
"""

from __future__ import annotations

from ..errors import SettingError
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .spec import IndexSpec

__all__ = ["SpgistContent", "SPGIST_LAST_FIXED_BLKNO"]

SPGIST_LAST_FIXED_BLKNO = 2
_DEFAULT_PER_LEAF = 200


class SpgistContent(IndexContent):
    """A synthetic SP-GiST index (``spgist``): metapage, roots, leaves in key order."""

    kind = "spgist"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        total = self.entries.total
        if spec.pages is not None:
            if spec.pages < SPGIST_LAST_FIXED_BLKNO + 2 and total:
                raise SettingError(
                    f"IndexSpec.pages = {spec.pages} is too small for an SP-GiST index with entries: "
                    f"allowed {SPGIST_LAST_FIXED_BLKNO + 2} or more (metapage, two roots, a leaf)"
                )
            self.nleaves = max(spec.pages - SPGIST_LAST_FIXED_BLKNO - 1, 0)
        else:
            per = spec.keys_per_leaf if spec.keys_per_leaf is not None else _DEFAULT_PER_LEAF
            self.nleaves = -(-total // per)
        self.nblocks = SPGIST_LAST_FIXED_BLKNO + 1 + self.nleaves
        self.init_nblocks = SPGIST_LAST_FIXED_BLKNO + 1  # spgbuildempty: metapage and both roots
        self.root_block = 1

    def leaf_ranks(self, pos: int) -> tuple[int, int]:
        total = self.entries.total
        lo = pos * total // self.nleaves
        return lo, (pos + 1) * total // self.nleaves - lo

    def _page(self, block: int) -> IndexPage:
        if block == 0:
            return IndexPage(self, 0, "meta")
        if block == 1:
            kind = "internal" if self.nleaves else "leaf"
            return IndexPage(self, 1, kind, is_root=True, level=1 if self.nleaves else 0)
        if block == SPGIST_LAST_FIXED_BLKNO:
            return IndexPage(self, block, "leaf", is_root=True)  # the nulls root: no NULL keys
        first, n = self.leaf_ranks(block - SPGIST_LAST_FIXED_BLKNO - 1)
        return IndexPage(self, block, "leaf", first_rank=first, nentries=n)

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "meta" if block == 0 else "leaf", is_root=block > 0)
