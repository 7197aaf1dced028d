"""What maintenance scans need to know about a page, read from a synthetic relation's content.

VACUUM and pgstattuple decide *which* pages to read from the visibility map, and *what to do* with
a page from its line pointers: how many live and dead tuples, whether it is already all-visible or
all-frozen, whether its hint bits are set. The synthetic relations (``reference_impl.relations``)
generate exactly that per page; :class:`HeapView` is the one place that reads it, so the scans
stay independent of how the content is generated.

A relation without a content model (``Instance.create_relation`` without ``content``) reads as
pages of one live, hinted tuple and no visibility-map bits, the convention of
``scans.base.heap_page_live``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..storage.relation import ForkNumber, Relation
from ._forkmaps import VM_ALL_FROZEN, VM_ALL_VISIBLE

__all__ = [
    "HeapPage",
    "HeapView",
    "IndexPageInfo",
    "IndexView",
    "index_view",
    "BLCKSZ",
    "PAGE_HEADER",
    "ITEM_ID",
    "page_exact_free_space",
    "take_hint_bits",
]

BLCKSZ = 8192
PAGE_HEADER = 24
ITEM_ID = 4
_TUPLE_HEADER = 24
_DEFAULT_WIDTH = 100
_MAX_HEAP_TUPLES_PER_PAGE = 291


def _maxalign(n: int) -> int:
    return (n + 7) & ~7


def page_exact_free_space(max_offset: int, stored_bytes: int) -> int:
    """``PageGetExactFreeSpace``: ``pd_upper - pd_lower`` of a heap page."""
    return max(0, BLCKSZ - PAGE_HEADER - ITEM_ID * max_offset - stored_bytes)


class HeapPage:
    """One heap page as VACUUM and pgstattuple see it (the synthetic content's page, or a default).

    ``dead_offsets`` is computed only when asked: VACUUM needs it for pages whose dead items go
    into the dead-TID store, every other caller only needs the counts.
    """

    __slots__ = (
        "block",
        "nlive",
        "ndead",
        "max_offset",
        "all_visible",
        "all_frozen",
        "hinted",
        "tuple_len",
        "nhot",
        "_src",
    )

    def __init__(self, block: int, src: Any, tuple_len: int) -> None:
        self.block = block
        self._src = src
        self.tuple_len = tuple_len
        if src is None:
            self.nlive, self.ndead, self.max_offset = 1, 0, 1
            self.nhot = 0
            self.all_visible = self.all_frozen = False
            self.hinted = True
        else:
            self.nlive = int(src.nlive)
            self.ndead = int(src.ndead)
            self.nhot = int(getattr(src, "nhot", 0))
            self.max_offset = int(src.max_offset)
            self.all_visible = bool(src.all_visible)
            self.all_frozen = bool(src.all_frozen)
            self.hinted = bool(src.hinted)

    @property
    def dead_offsets(self) -> npt.NDArray[np.int64]:
        if self._src is None or self.ndead == 0:
            return np.empty(0, dtype=np.int64)
        return np.asarray(self._src.dead_offsets, dtype=np.int64)

    @property
    def lpdead_offsets(self) -> npt.NDArray[np.int64]:
        """Dead tuples pruning leaves as LP_DEAD items: all but the HOT-updated ones (those
        become redirects to their heap-only successors)."""
        return self.dead_offsets[self.nhot :]

    @property
    def is_empty(self) -> bool:
        """``PageIsEmpty``: no line pointers at all."""
        return self.max_offset == 0

    @property
    def stored_bytes(self) -> int:
        """Bytes of tuple storage (live and dead tuples with storage), MAXALIGNed."""
        return (self.nlive + self.ndead) * _maxalign(self.tuple_len)

    @property
    def exact_free_space(self) -> int:
        """``PageGetExactFreeSpace``."""
        return page_exact_free_space(self.max_offset, self.stored_bytes)

    @property
    def free_space(self) -> int:
        """``PageGetHeapFreeSpace``: what VACUUM records in the FSM."""
        if self.max_offset >= _MAX_HEAP_TUPLES_PER_PAGE:
            return 0
        return max(0, self.exact_free_space - ITEM_ID)


def take_hint_bits(rel: Relation, page: HeapPage) -> bool:
    """Whether a visibility test on ``page`` sets hint bits now (``SetHintBits``): the page was
    built unhinted and no scan has hinted it since. Records that it is hinted from now on
    (``Relation.hinted_now``), so every scan that tests visibility sees the others' hints."""
    if page.hinted or page.block in rel.hinted_now:
        return False
    rel.hinted_now.add(page.block)
    return True


class HeapView:
    """Read-only access to a heap relation's synthetic pages (``content.page(MAIN, block)``)."""

    __slots__ = ("rel", "content", "tuple_len")

    def __init__(self, rel: Relation) -> None:
        self.rel = rel
        self.content: Any = rel.content
        width = _DEFAULT_WIDTH
        spec = getattr(self.content, "spec", None)
        if spec is not None and getattr(spec, "tuple_width", None) is not None:
            width = int(spec.tuple_width)
        self.tuple_len = _TUPLE_HEADER + width

    def page(self, block: int) -> HeapPage:
        content = self.content
        src = None if content is None else content.page(ForkNumber.MAIN, block)
        page = HeapPage(block, src, self.tuple_len)
        if block in self.rel.all_visible_now:
            # On-access pruning set it all-visible (19+): PD_ALL_VISIBLE, its hint bits set.
            page.all_visible = page.hinted = True
        return page

    def vm_flags(self, block: int) -> int:
        """The block's visibility-map bits as the synthetic relation lays them out."""
        content = self.content
        if content is None:
            return 0
        if block in self.rel.all_visible_now:
            return VM_ALL_VISIBLE | (VM_ALL_FROZEN if self.page(block).all_frozen else 0)
        fn = getattr(content, "vm_status", None)
        if fn is not None:
            vis, frz = fn(block)
        else:
            p = content.page(ForkNumber.MAIN, block)
            vis, frz = p.all_visible, p.all_frozen
        return (VM_ALL_VISIBLE if vis else 0) | (VM_ALL_FROZEN if frz else 0)

    def vm_counts(self, nblocks: int) -> tuple[int, int]:
        """All-visible and all-frozen blocks among ``0 .. nblocks - 1``."""
        content = self.content
        if content is None or nblocks <= 0:
            return 0, 0
        bits = getattr(content, "vm_bits", None)
        if bits is not None:
            vis, frz = bits(0, nblocks)
            # Blocks on-access pruning set all-visible since (19+; none on 18).
            extra = sum(1 for b in self.rel.all_visible_now if b < nblocks and not vis[b])
            return int(np.count_nonzero(vis)) + extra, int(np.count_nonzero(frz))
        flags = [self.vm_flags(b) for b in range(nblocks)]
        return sum(1 for f in flags if f & VM_ALL_VISIBLE), sum(1 for f in flags if f & VM_ALL_FROZEN)


# ---------------------------------------------------------------------------------------- indexes
_SPECIAL = 16  # MAXALIGN of BTPageOpaqueData, HashPageOpaqueData and GISTPageOpaqueData
_INDEX_TUPLE_HEADER = 8
_KEY_WIDTH_DEFAULT = {"btree": 4, "hash": 4, "gist": 16}


@dataclass(frozen=True, slots=True)
class IndexPageInfo:
    """One index page as ``pgstat_btree_page``/``_hash_page``/``_gist_page`` classify it."""

    block: int
    kind: str
    nitems: int  # data items (a btree leaf's high key excluded)
    ndead: int
    item_len: int  # IndexTupleSize of every item
    is_new: bool
    ignored: bool  # deleted or half-dead btree page, unused hash page: counted as free
    counts_tuples: bool  # leaf, bucket or overflow page
    exact_free_space: int  # PageGetExactFreeSpace
    right: int

    @property
    def free_space(self) -> int:
        """``PageGetFreeSpace``: exact free space minus one line pointer."""
        return max(0, self.exact_free_space - ITEM_ID)


class IndexView:
    """Read-only access to a synthetic index's pages for the pgstattuple functions."""

    __slots__ = ("rel", "content", "kind", "item_len")

    def __init__(self, rel: Relation) -> None:
        self.rel = rel
        content: Any = rel.content
        self.content = content
        self.kind = str(content.kind)
        spec = getattr(content, "spec", None)
        width = getattr(spec, "key_width", None) if self.kind != "hash" else None
        if width is None:
            width = _KEY_WIDTH_DEFAULT[self.kind]
        self.item_len = _maxalign(_INDEX_TUPLE_HEADER + int(width))

    @property
    def first_data_block(self) -> int:
        """``BTREE_METAPAGE + 1``, ``HASH_METAPAGE + 1``, ``GIST_ROOT_BLKNO + 1``: always 1."""
        return 1

    def page(self, block: int) -> IndexPageInfo:
        p = self.content.page(ForkNumber.MAIN, block)
        kind = p.kind
        counts = kind in ("leaf", "bucket", "overflow") or (kind == "root" and p.level == 0)
        n = int(p.nentries) if counts else 0
        stored = n
        if self.kind == "btree" and counts and p.right != 0xFFFFFFFF:
            stored += 1  # the high key
        used = stored * (self.item_len + ITEM_ID)
        if counts and p.tuple_bytes >= 0:
            # Posting lists (a btree built with deduplication): the page's own tuple sizes.
            used = p.tuple_bytes + ITEM_ID * (stored - n + p.items)
        free = max(0, BLCKSZ - PAGE_HEADER - _SPECIAL - used) if kind not in ("meta", "bitmap") else 0
        return IndexPageInfo(
            block=block,
            kind=kind,
            nitems=n,
            ndead=0,
            item_len=self.item_len,
            is_new=False,
            ignored=kind in ("deleted", "unused"),
            counts_tuples=counts,
            exact_free_space=free,
            right=int(p.right),
        )


def index_view(rel: Relation) -> IndexView | None:
    """An :class:`IndexView` when ``rel`` is a synthetic btree, hash or GiST index, else None."""
    kind = getattr(rel.content, "kind", None)
    if kind in ("btree", "hash", "gist"):
        return IndexView(rel)
    return None
