"""Page arithmetic: how many tuples a heap page holds, and how big the auxiliary forks are.

Synthetic relations describe their pages with a few numbers (tuple width, fill factor) and then
need the same derived sizes PostgreSQL would produce, because scans read exactly those pages:

* **heap pages** (``RelationGetBufferForTuple``, ``PageGetHeapFreeSpace``): a page of 8192 bytes
  has a 24-byte header; each tuple costs its MAXALIGNed length (a 24-byte tuple header plus the
  data) and a 4-byte line pointer. A non-empty page accepts another tuple only while its free
  space minus one line pointer is at least the tuple plus the fill factor's reserve
  (``BLCKSZ × (100 − fillfactor) / 100``); an empty page accepts one tuple whatever the reserve.
  At most ``MaxHeapTuplesPerPage`` = 291 line pointers fit.
* **visibility map** (``visibilitymap.c``): 2 bits per heap block, so one VM page covers
  ``(8192 − 24) × 4`` = 32672 heap blocks; VACUUM extends the fork to cover the last heap block.
* **free space map** (``freespace.c``, ``fsm_logical_to_physical``): a three-level tree stored
  depth-first, 4069 slots per leaf page; VACUUM extends it to hold the last heap block's leaf.
* **btree** (``nbtsort.c``): a leaf built by ``CREATE INDEX`` is filled until less than
  ``BLCKSZ × (100 − fillfactor) / 100`` bytes remain (fill factor 90 for leaves, 70 for inner
  pages); each item is an 8-byte index tuple header plus the key, MAXALIGNed, plus a line pointer.
* **hash** (``hashpage.c``, ``hashutil.c``): ``_hash_init`` sizes the bucket array from the tuple
  count and the fill factor (75) with the split-point phase arithmetic of ``_hash_spareindex`` and
  ``_hash_get_totalbuckets``.

Everything here is a pure function of its arguments.
"""

from __future__ import annotations

from ..errors import SettingError

__all__ = [
    "BLCKSZ",
    "SIZE_OF_PAGE_HEADER",
    "MAX_HEAP_TUPLES_PER_PAGE",
    "HEAPBLOCKS_PER_VM_PAGE",
    "FSM_SLOTS_PER_PAGE",
    "MAX_HEAP_TUPLE_WIDTH",
    "maxalign",
    "heap_tuple_space",
    "heap_tuples_per_page",
    "heap_free_space",
    "vm_block",
    "vm_nblocks",
    "fsm_leaf",
    "fsm_logical_to_physical",
    "fsm_leaf_block",
    "fsm_nblocks",
    "btree_items_per_page",
    "hash_spareindex",
    "hash_totalbuckets",
    "hash_initial_buckets",
    "hash_build_splits",
    "HASH_DEFAULT_FFACTOR",
]

BLCKSZ = 8192
SIZE_OF_PAGE_HEADER = 24
_ITEM_ID = 4
_HEAP_TUPLE_HEADER = 24  # MAXALIGN(SizeofHeapTupleHeader = 23)
MAX_HEAP_TUPLES_PER_PAGE = 291
# MaxHeapTupleSize = BLCKSZ - MAXALIGN(SizeOfPageHeaderData + sizeof(ItemIdData)) = 8160.
MAX_HEAP_TUPLE_WIDTH = 8160 - _HEAP_TUPLE_HEADER
HEAPBLOCKS_PER_VM_PAGE = (BLCKSZ - SIZE_OF_PAGE_HEADER) * 4
# NodesPerPage = 8192 - 24 - 4 = 8164; NonLeafNodesPerPage = 4095; leaves = 4069.
FSM_SLOTS_PER_PAGE = 4069
_FSM_TREE_DEPTH = 3
_BT_SPECIAL = 16  # MAXALIGN(sizeof(BTPageOpaqueData))
_INDEX_TUPLE_HEADER = 8  # sizeof(IndexTupleData)
_HASH_ITEM_WIDTH = 20  # MAXALIGN(8 + 4) + sizeof(ItemIdData)
HASH_DEFAULT_FFACTOR = (BLCKSZ * 75 // 100) // _HASH_ITEM_WIDTH


def maxalign(n: int) -> int:
    """``MAXALIGN``: round up to 8 bytes."""
    return (n + 7) & ~7


def heap_tuple_space(tuple_width: int) -> int:
    """Bytes a tuple of ``tuple_width`` data bytes takes on a heap page (tuple + line pointer)."""
    return maxalign(_HEAP_TUPLE_HEADER + tuple_width) + _ITEM_ID


def _check_width(tuple_width: int) -> None:
    if isinstance(tuple_width, bool) or not isinstance(tuple_width, int):
        raise SettingError(
            f"tuple_width = {tuple_width!r} is invalid: allowed an integer 1..{MAX_HEAP_TUPLE_WIDTH}"
        )
    if not 1 <= tuple_width <= MAX_HEAP_TUPLE_WIDTH:
        raise SettingError(
            f"tuple_width = {tuple_width} is out of range: allowed 1..{MAX_HEAP_TUPLE_WIDTH} bytes "
            "(a heap tuple must fit MaxHeapTupleSize)"
        )


def heap_tuples_per_page(tuple_width: int, fillfactor: int = 100) -> int:
    """Tuples ``INSERT`` puts on one heap page (``RelationGetBufferForTuple``)."""
    _check_width(tuple_width)
    if isinstance(fillfactor, bool) or not isinstance(fillfactor, int) or not 10 <= fillfactor <= 100:
        raise SettingError(f"fillfactor = {fillfactor!r} is out of range: allowed 10..100")
    aligned = maxalign(_HEAP_TUPLE_HEADER + tuple_width)
    reserve = BLCKSZ * (100 - fillfactor) // 100
    # After k tuples PageGetHeapFreeSpace = 8164 - k * (aligned + 4); one more fits while that
    # is at least aligned + reserve. The first tuple always goes onto an empty page.
    room = BLCKSZ - SIZE_OF_PAGE_HEADER - _ITEM_ID - aligned - reserve
    extra = room // (aligned + _ITEM_ID) if room >= 0 else 0
    return min(1 + extra, MAX_HEAP_TUPLES_PER_PAGE)


def heap_free_space(tuple_width: int, nitems: int) -> int:
    """``PageGetHeapFreeSpace`` of a page holding ``nitems`` tuples (live or dead)."""
    if nitems >= MAX_HEAP_TUPLES_PER_PAGE:
        return 0
    free = BLCKSZ - SIZE_OF_PAGE_HEADER - nitems * heap_tuple_space(tuple_width) - _ITEM_ID
    return max(free, 0)


def vm_block(heap_block: int) -> int:
    """``HEAPBLK_TO_MAPBLOCK``: the VM page holding a heap block's bits."""
    return heap_block // HEAPBLOCKS_PER_VM_PAGE


def vm_nblocks(heap_nblocks: int) -> int:
    """VM fork size after VACUUM has pinned the page of every heap block."""
    return -(-heap_nblocks // HEAPBLOCKS_PER_VM_PAGE)


def fsm_leaf(heap_block: int) -> int:
    """Logical number of the FSM leaf page holding a heap block (``fsm_get_location``)."""
    return heap_block // FSM_SLOTS_PER_PAGE


def fsm_logical_to_physical(level: int, logpageno: int) -> int:
    """``fsm_logical_to_physical``: the FSM block of page ``logpageno`` at ``level`` (0 = leaves)."""
    if not 0 <= level < _FSM_TREE_DEPTH:
        raise SettingError(f"FSM level {level} is out of range: allowed 0..{_FSM_TREE_DEPTH - 1}")
    leafno = logpageno
    for _ in range(level):
        leafno *= FSM_SLOTS_PER_PAGE
    pages = 0
    for _ in range(_FSM_TREE_DEPTH):
        pages += leafno + 1
        leafno //= FSM_SLOTS_PER_PAGE
    pages -= level
    return pages - 1


def fsm_leaf_block(heap_block: int) -> int:
    """Physical FSM block of the leaf covering ``heap_block``."""
    return fsm_logical_to_physical(0, fsm_leaf(heap_block))


def fsm_nblocks(heap_nblocks: int) -> int:
    """FSM fork size after VACUUM recorded free space for every heap block (0 if no blocks)."""
    if heap_nblocks <= 0:
        return 0
    return fsm_leaf_block(heap_nblocks - 1) + 1


def btree_items_per_page(key_width: int, fillfactor: int) -> int:
    """Items ``_bt_buildadd`` puts on a page before it counts as full (high key included)."""
    item = maxalign(_INDEX_TUPLE_HEADER + key_width) + _ITEM_ID
    usable = BLCKSZ - SIZE_OF_PAGE_HEADER - _BT_SPECIAL
    reserve = BLCKSZ * (100 - fillfactor) // 100
    return max(2, (usable - reserve) // item + 1)


_SPLITPOINT_PHASE_BITS = 2
_SPLITPOINT_GROUPS_WITH_ONE_PHASE = 10


def hash_spareindex(num_bucket: int) -> int:
    """``_hash_spareindex``: the split-point phase that holds ``num_bucket`` buckets."""
    group = max(0, (num_bucket - 1).bit_length())  # pg_ceil_log2_32
    if group < _SPLITPOINT_GROUPS_WITH_ONE_PHASE:
        return group
    phases = _SPLITPOINT_GROUPS_WITH_ONE_PHASE
    phases += (group - _SPLITPOINT_GROUPS_WITH_ONE_PHASE) << _SPLITPOINT_PHASE_BITS
    phases += ((num_bucket - 1) >> (group - (_SPLITPOINT_PHASE_BITS + 1))) & 3
    return phases


def hash_totalbuckets(phase: int) -> int:
    """``_hash_get_totalbuckets``: buckets that exist up to split-point ``phase``."""
    if phase < _SPLITPOINT_GROUPS_WITH_ONE_PHASE:
        return 1 << phase
    group = _SPLITPOINT_GROUPS_WITH_ONE_PHASE + (
        (phase - _SPLITPOINT_GROUPS_WITH_ONE_PHASE) >> _SPLITPOINT_PHASE_BITS
    )
    total = 1 << (group - 1)
    within = ((phase - _SPLITPOINT_GROUPS_WITH_ONE_PHASE) & 3) + 1
    return total + ((1 << (group - 1)) >> _SPLITPOINT_PHASE_BITS) * within


def hash_initial_buckets(num_tuples: float, ffactor: int = HASH_DEFAULT_FFACTOR) -> int:
    """Buckets ``_hash_init`` creates for an index of ``num_tuples`` (``CREATE INDEX``)."""
    ff = max(ffactor, 10)
    want = num_tuples / ff
    if want <= 2.0:
        return 2
    if want >= float(0x40000000):
        return 0x40000000
    return hash_totalbuckets(hash_spareindex(int(want)))


def hash_build_splits(num_tuples: int, ffactor: int = HASH_DEFAULT_FFACTOR) -> bool:
    """Whether ``CREATE INDEX`` of ``num_tuples`` entries splits buckets while it inserts.

    ``_hash_init`` sizes the index from ``reltuples``, but ``_hash_spareindex`` takes the wanted
    bucket count as a ``uint32``, so the fraction is dropped: 615 entries want 2.003 buckets and
    get 2. ``_hash_doinsert`` splits a bucket whenever the entries exceed ``ffactor`` times the
    buckets, so an index that gets fewer buckets than its entries need grows by splits during
    the build (on 18.6, 615 int4 entries end with 3 buckets and a fourth allocated: 6 pages).
    """
    return num_tuples > max(ffactor, 10) * hash_initial_buckets(num_tuples, ffactor)
