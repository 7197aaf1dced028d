"""A bloom index as ``blbuild`` lays it out (``contrib/bloom/blinsert.c``).

``blbuild`` writes the metapage (block 0, ``BloomInitMetapage``) and then, in heap order
(``table_index_build_scan``), adds each tuple's signature to a cached page; when the next
signature does not fit (``BloomPageAddItem``: ``BloomPageGetFreeSpace < sizeOfBloomTuple``) the
page is written to the next block (``flushCachedPage`` → ``BloomNewBuffer``, which extends the
relation: the index has no free pages yet). So block *k* (from 1) holds entries ``(k − 1)·n ..
k·n − 1`` in heap order, ``n`` the tuples a page takes:

* ``sizeOfBloomTuple = BLOOMTUPLEHDRSZ + sizeof(BloomSignatureWord) · bloomLength`` = 6 + 2 ·
  ⌈length / 16⌉ bytes (the heap TID and the signature words; 16 bytes at the default length
  of 80 bits);
* ``BloomPageGetFreeSpace`` = 8192 − ``MAXALIGN(SizeOfPageHeaderData)`` (24) − ``maxoff`` ·
  size − ``MAXALIGN(sizeof(BloomPageOpaqueData))`` (8), so ``n = ⌊8160 / size⌋`` (510 at the
  default).

The entries are the heap's line pointers as the table was built, in heap order (``correlation``
does not apply).
"""

from __future__ import annotations

from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .spec import IndexSpec

__all__ = ["BloomContent", "bloom_tuples_per_page", "BLOOM_DEFAULT_LENGTH"]

BLOOM_DEFAULT_LENGTH = 80  # DEFAULT_BLOOM_LENGTH: 5 * SIGNWORDBITS
_SIGNWORDBITS = 16
_BLOOMTUPLEHDRSZ = 6  # offsetof(BloomTuple, sign): the ItemPointerData
_PAGE_SPACE = 8192 - 24 - 8  # BLCKSZ - MAXALIGN(page header) - MAXALIGN(BloomPageOpaqueData)


def bloom_tuples_per_page(length_bits: int = BLOOM_DEFAULT_LENGTH) -> int:
    """Signatures a bloom page takes at signature length ``length_bits``."""
    words = (length_bits + _SIGNWORDBITS - 1) // _SIGNWORDBITS
    return _PAGE_SPACE // (_BLOOMTUPLEHDRSZ + 2 * words)


class BloomContent(IndexContent):
    """A synthetic bloom index (``bloom``): the metapage, then pages of signatures in heap order."""

    kind = "bloom"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        length = spec.bloom_length if spec.bloom_length is not None else BLOOM_DEFAULT_LENGTH
        self.per_page = bloom_tuples_per_page(length)
        # An empty table leaves the metapage alone (nothing to flush).
        self.ndata = -(-self.entries.total // self.per_page)
        self.nblocks = 1 + self.ndata
        self.init_nblocks = 1  # blbuildempty: the metapage

    def _page(self, block: int) -> IndexPage:
        if block == 0:
            return IndexPage(self, 0, "meta")
        first = (block - 1) * self.per_page
        n = min(self.per_page, self.entries.total - first)
        return IndexPage(self, block, "leaf", first_rank=first, nentries=n)

    def _init_page(self, block: int) -> IndexPage:
        return IndexPage(None, block, "meta")
