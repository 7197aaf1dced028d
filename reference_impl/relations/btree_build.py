"""``CREATE INDEX``'s btree, item by item: posting lists, leaf filling and inner pages by size.

A btree whose keys repeat is not laid out by a key count per leaf. ``_bt_load`` (``nbtsort.c``)
reads the sorted tuples and, with ``deduplicate_items`` on (the default; ``int4`` keys are
"equalimage"), merges each run of equal keys into posting-list tuples
(``_bt_dedup_save_htid``, ``_bt_sort_dedup_finish_pending``): a posting tuple holds as many heap
TIDs as keep ``MAXALIGN(16 + 6 n)`` within ``maxpostingsize`` = ``MAXALIGN_DOWN(BLCKSZ / 10) −
sizeof(ItemIdData)`` = 812 bytes, so 132 TIDs for an ``int4`` key; a run's remainder is a shorter
posting tuple, or a plain tuple when one TID is left. Every tuple then goes to ``_bt_buildadd``:

* a page is full before item *i* when its free space (``PageGetFreeSpace``) is below the item's
  size (plus 8 bytes on a leaf, room for a heap TID in the high key), or — once the page holds
  two items — when the free space plus the posting-list bytes of its last item (which the high
  key will not keep) is below the fill-factor reserve (819 bytes for leaves at 90 %, 2,457 for
  inner pages at 70 %);
* the full page's last item moves to the new page, and becomes the old page's high key: on a
  leaf truncated by ``_bt_truncate`` to the key alone (16 bytes for ``int4``), or to the key
  plus a heap TID (24 bytes) when the items either side of the split have equal keys; that high
  key is the new page's downlink in its parent. The first item of an inner page is stored as a
  "minus infinity" tuple of 8 bytes, and so is the item moved onto a new inner page;
* pages are numbered as the build allocates them (a new page of a level, a parent level's first
  page right after the page that needed it), and ``_bt_uppershutdown`` adds each level's last
  downlink bottom up: the block numbering of ``btree.nbtsort_layout``, with fan-outs that follow
  the pivots' sizes.

Measured on PostgreSQL 18.6 with ``pageinspect`` (200,010 rows): ``(id % 100)`` gives 178 leaves of
nine 132-TID posting tuples (free space 812 bytes, a 24-byte high key inside a run of equal
keys) under one root; ``(id / 2)`` gives 493 leaves of 203 two-TID postings; ``(id * -1)``, whose
values are distinct, 547 leaves of 366 tuples, as an index on ``id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .layout import BLCKSZ, SIZE_OF_PAGE_HEADER, maxalign

__all__ = [
    "BTreeBuild",
    "POSTING_MAX_BYTES",
    "build_btree",
    "leaf_page_starts",
    "posting_items",
    "sized_inner_levels",
]

_ITEM_ID = 4
_BT_SPECIAL = 16
_TID = 6  # sizeof(ItemPointerData)
_INDEX_TUPLE_HEADER = 8
_MINUS_INFINITY = 8  # sizeof(IndexTupleData): an inner page's first item, a level's first low key
#: ``PageGetFreeSpace`` of a fresh btree page: the P_HIKEY line pointer is allocated up front.
_EMPTY_PAGE_FREE = BLCKSZ - _BT_SPECIAL - SIZE_OF_PAGE_HEADER - _ITEM_ID - _ITEM_ID
#: ``maxpostingsize`` of ``_bt_load``: MAXALIGN_DOWN(BLCKSZ * 10 / 100) - sizeof(ItemIdData).
POSTING_MAX_BYTES = (BLCKSZ * 10 // 100) // 8 * 8 - _ITEM_ID
_LEAF_FILLFACTOR = 90
_INNER_FILLFACTOR = 70


def _reserve(fillfactor: int) -> int:
    """``btps_full``: a page is full when less than this much space is free."""
    return BLCKSZ * (100 - fillfactor) // 100


def posting_items(
    keys: npt.NDArray[np.int64], key_width: int = 4, *, deduplicate: bool = True
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The leaf tuples ``_bt_load`` makes from keys in index order: (TIDs per tuple, tuple size).

    Runs of equal keys become posting tuples of at most as many TIDs as fit ``POSTING_MAX_BYTES``
    (``_bt_dedup_save_htid``); a single TID stays a plain tuple. Sizes are MAXALIGNed.
    """
    base = maxalign(_INDEX_TUPLE_HEADER + key_width)
    n = int(keys.size)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    if not deduplicate:
        return np.ones(n, dtype=np.int64), np.full(n, base, dtype=np.int64)
    cap = (POSTING_MAX_BYTES - base) // _TID
    while maxalign(base + cap * _TID) > POSTING_MAX_BYTES:
        cap -= 1
    starts = np.concatenate(([0], np.flatnonzero(np.diff(keys)) + 1))
    runs = np.diff(np.concatenate((starts, [n])))
    per_run = -(-runs // cap)
    ntids = np.full(int(per_run.sum()), cap, dtype=np.int64)
    last = np.cumsum(per_run) - 1
    ntids[last] = runs - cap * (per_run - 1)
    sizes = np.where(ntids == 1, base, ((base + ntids * _TID) + 7) // 8 * 8).astype(np.int64)
    return ntids, sizes


def leaf_page_starts(
    sizes: npt.NDArray[np.int64], truncextra: npt.NDArray[np.int64], fillfactor: int = _LEAF_FILLFACTOR
) -> npt.NDArray[np.int64]:
    """Index of the first tuple of each leaf, as ``_bt_buildadd`` fills leaves.

    A page starting at tuple ``a`` takes tuples ``a, a + 1, ...``; before tuple ``i`` it is full
    when its free space is below ``sizes[i] + 8`` or, with two tuples or more on it, when the free
    space plus ``truncextra[i - 1]`` (its last tuple's posting list) is below the reserve. Then
    tuple ``i − 1`` moves on: the next page starts with it.
    """
    n = int(sizes.size)
    full = _reserve(fillfactor)
    # At most this many tuples fit one page (the smallest tuple is 16 bytes plus its pointer).
    window = _EMPTY_PAGE_FREE // (int(sizes.min()) + _ITEM_ID) + 2 if n else 0
    used = sizes + _ITEM_ID
    starts = [0]
    a = 0
    while n - a > 1:
        end = min(n, a + window + 1)
        # free[j]: the page's free space with tuples a .. a + j - 1 on it (j = 1 .. end - a - 1).
        free = _EMPTY_PAGE_FREE - np.cumsum(used[a : end - 1])
        nxt = sizes[a + 1 : end]
        last_extra = truncextra[a : end - 1]
        j = np.arange(1, end - a)
        fires = (free < nxt + 8) | ((free + last_extra < full) & (j >= 2))
        hit = np.flatnonzero(fires)
        if not hit.size:
            break  # the rest fits: the last leaf
        # A page always takes two tuples (each at most POSTING_MAX_BYTES): never full at j = 1.
        assert hit[0] > 0
        i = a + int(hit[0]) + 1  # the tuple that does not fit
        a = i - 1
        starts.append(a)
    return np.asarray(starts, dtype=np.int64)


def sized_inner_levels(
    downlink_sizes: npt.NDArray[np.int64], fillfactor: int = _INNER_FILLFACTOR, *, first_block: int = 1
) -> tuple[list[list[int]], list[npt.NDArray[np.int64]]]:
    """Block numbers of every level, and each inner page's first child, for leaves whose downlinks
    (their low keys) have the given sizes (``downlink_sizes[0]`` is the leftmost leaf's minus
    infinity).

    Replays ``_bt_buildadd`` level by level in allocation order (see the module docstring).
    Returns ``(levels, child_starts)``: ``levels[l]`` the blocks of level ``l`` left to right,
    ``child_starts[l]`` (for ``l >= 1``) the position on level ``l − 1`` of each page's first
    child, followed by the child count of the level (``child_starts[0]`` is empty).
    """
    full = _reserve(fillfactor)
    levels: list[list[int]] = []
    # Per level: stored sizes of the current page's items, the original size of its last item
    # (what moves on), the size of the current page's low key, and each page's first child.
    stored: list[list[int]] = []
    last_size: list[int] = []
    lowkey: list[int] = []
    firsts: list[list[int]] = []
    counts: list[int] = []
    used: list[int] = []  # bytes of the current page's items and their line pointers
    alloc = first_block

    def new_page(level: int) -> int:
        nonlocal alloc
        if level == len(levels):
            levels.append([])
            stored.append([])
            last_size.append(0)
            lowkey.append(_MINUS_INFINITY)
            firsts.append([])
            counts.append(0)
            used.append(0)
        levels[level].append(alloc)
        alloc += 1
        return alloc - 1

    def add(level: int, size: int) -> None:
        """``_bt_buildadd`` of a downlink of ``size`` bytes to the current page of ``level``."""
        if level == len(levels):
            new_page(level)
        items = stored[level]
        free = _EMPTY_PAGE_FREE - used[level]
        if level > 0 and (free < size or (free < full and len(items) >= 2)):
            moved = last_size[level]
            new_page(level)
            if level + 1 == len(levels):
                new_page(level + 1)
            # The old page's low key goes up; its high key (the moved item) is the new low key.
            add(level + 1, lowkey[level])
            lowkey[level] = moved
            firsts[level].append(counts[level] - 1)
            stored[level] = [_MINUS_INFINITY]
            used[level] = _MINUS_INFINITY + _ITEM_ID
            items = stored[level]
        if level > 0 and not items:
            firsts[level].append(counts[level])
        item = _MINUS_INFINITY if level > 0 and not items else size
        items.append(item)
        used[level] += item + _ITEM_ID
        last_size[level] = size
        counts[level] += 1

    def add_leaf(size: int) -> None:
        if not levels:
            new_page(0)
            return
        new_page(0)
        if len(levels) == 1:
            new_page(1)
        add(1, lowkey[0])
        lowkey[0] = size

    n = int(downlink_sizes.size)
    for i in range(n):
        add_leaf(int(downlink_sizes[i]))
    level = 0
    while level + 1 < len(levels):
        add(level + 1, lowkey[level])
        level += 1
    child_starts = [np.empty(0, dtype=np.int64)]
    for lv in range(1, len(levels)):
        child_starts.append(np.asarray([*firsts[lv], counts[lv]], dtype=np.int64))
    return levels, child_starts


@dataclass(frozen=True)
class BTreeBuild:
    """The layout ``CREATE INDEX`` gives a btree over keys in index order (``_bt_load`` and
    ``_bt_buildadd`` in ``nbtsort.c``, posting lists as ``nbtdedup.c`` forms them).

    ``leaf_first_rank[p]`` is the first key rank (TID in index order) of leaf ``p`` (one more
    entry: the total); ``leaf_items[p]`` its tuples (a posting list counts once) and
    ``leaf_tuple_bytes[p]`` their MAXALIGNed sizes, the high key included; ``levels`` and
    ``child_starts`` as ``sized_inner_levels`` returns them.
    """

    leaf_first_rank: npt.NDArray[np.int64]
    leaf_items: npt.NDArray[np.int64]
    leaf_tuple_bytes: npt.NDArray[np.int64]
    levels: list[list[int]]
    child_starts: list[npt.NDArray[np.int64]]


def build_btree(
    keys: npt.NDArray[np.int64],
    key_width: int = 4,
    *,
    deduplicate: bool = True,
    leaf_fillfactor: int = _LEAF_FILLFACTOR,
) -> BTreeBuild:
    """Lay out a btree over ``keys`` (sorted, one per heap TID) as ``_bt_load`` builds it."""
    base = maxalign(_INDEX_TUPLE_HEADER + key_width)
    ntids, sizes = posting_items(keys, key_width, deduplicate=deduplicate)
    if not ntids.size:
        empty = np.empty(0, dtype=np.int64)
        return BTreeBuild(np.zeros(1, dtype=np.int64), empty, empty, [], [empty])
    truncextra = np.where(ntids == 1, 0, sizes - base)
    item_first = np.concatenate(([0], np.cumsum(ntids)))
    starts = leaf_page_starts(sizes, truncextra, leaf_fillfactor)
    item_key = keys[item_first[:-1]]
    # The high key of leaf p - 1 (the downlink of leaf p): the key alone, or the key and a heap
    # TID when the tuples either side of the split have equal keys (_bt_truncate).
    later = starts[1:]
    pivot = np.where(item_key[later - 1] == item_key[later], base + maxalign(_TID), base)
    downlinks = np.concatenate(([_MINUS_INFINITY], pivot)).astype(np.int64)
    levels, child_starts = sized_inner_levels(downlinks)
    ends = np.concatenate((starts[1:], [ntids.size]))
    csum = np.concatenate(([0], np.cumsum(sizes)))
    tuple_bytes = csum[ends] - csum[starts]
    tuple_bytes[:-1] += pivot
    return BTreeBuild(
        leaf_first_rank=item_first[np.concatenate((starts, [ntids.size]))],
        leaf_items=(ends - starts).astype(np.int64),
        leaf_tuple_bytes=tuple_bytes.astype(np.int64),
        levels=levels,
        child_starts=child_starts,
    )
