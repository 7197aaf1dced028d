"""Visibility-map and free-space-map pages, as VACUUM and pgstattuple read them.

Both maps are small forks of the heap, read one page at a time with ``ReadBufferExtended`` and
*no* access strategy, whatever ring the caller is using (``visibilitymap.c``, ``freespace.c``;
``scans.md`` §3). They are therefore counted in ``pg_stat_io`` context ``normal`` and, being
touched again and again, stay in the pool: each is normally read at most once per command.

Addressing (8 kB pages):

* **VM**: a page holds two bits for each of ``(8192 - 24) * 4 = 32672`` heap blocks, so heap
  block *b* lives on VM page ``b // 32672``. A reader keeps the page pinned in a ``Buffer
  vmbuffer`` variable and re-reads only when the next block is on another page
  (:class:`VMBuffer`). A fork that does not exist, or a page beyond its end, reads as "not
  all-visible" without any I/O; ``visibilitymap_pin`` instead *extends* the fork (an extension,
  not a read). ``visibilitymap_count`` reads every page.
* **FSM**: a three-level tree of 4069-slot pages stored depth first. The leaf for heap block *b*
  is logical leaf ``L = b // 4069`` at physical block ``L + 2 + L // 4069`` (root at 0, the first
  level-1 page at 1). ``RecordPageWithFreeSpace`` touches the leaf only (extending the fork if
  needed); ``GetRecordedFreeSpace`` reads the leaf if it exists; ``FreeSpaceMapVacuumRange``
  walks the tree depth first from the root over the leaves covering the range, stopping at the
  end of the fork, each parent staying pinned while its children are visited.

The bits themselves come from the synthetic relation's content: the caller passes a function
giving the VM flags of a heap block, so this module only decides *which map pages are read
when*, which is what the read counts depend on.
"""

from __future__ import annotations

from collections.abc import Callable

from ..buffers.bufmgr import RBM_ZERO_ON_ERROR, Backend
from ..relations.layout import (
    FSM_SLOTS_PER_PAGE,
    HEAPBLOCKS_PER_VM_PAGE,
    fsm_leaf_block,
    fsm_logical_to_physical,
    fsm_nblocks,
    vm_block,
    vm_nblocks,
)
from ..storage.relation import ForkNumber, Relation

__all__ = [
    "VM_HEAPBLOCKS_PER_PAGE",
    "FSM_SLOTS_PER_PAGE",
    "VM_ALL_VISIBLE",
    "VM_ALL_FROZEN",
    "vm_page_of",
    "vm_fork_size",
    "fsm_physical",
    "fsm_leaf_of",
    "fsm_fork_size",
    "VMBuffer",
    "visibilitymap_count",
    "record_free_space",
    "get_recorded_free_space",
    "fsm_vacuum_range",
    "truncate_maps",
]

VM_HEAPBLOCKS_PER_PAGE = HEAPBLOCKS_PER_VM_PAGE
_FSM_TREE_DEPTH = 3  # levels 2 (root), 1, 0 (leaves) for 8 kB pages
VM_ALL_VISIBLE = 0x01
VM_ALL_FROZEN = 0x02

VMFlags = Callable[[int], int]
"""``flags(heap_block)`` → ``VM_ALL_VISIBLE | VM_ALL_FROZEN`` bits of that block."""

# The page arithmetic is the synthetic relations' (they size the forks with it).
vm_page_of = vm_block
vm_fork_size = vm_nblocks
fsm_physical = fsm_logical_to_physical
fsm_leaf_of = fsm_leaf_block
fsm_fork_size = fsm_nblocks


def _extend_and_pin(backend: Backend, rel: Relation, fork: ForkNumber, block: int) -> int:
    """Extend ``fork`` to cover ``block`` and pin the new page without reading it.

    ``vm_extend``/``fsm_extend`` go through ``ExtendBufferedRelTo``: the zero-filled pages are
    written by the extension, which ``pg_stat_io`` counts as ``extends``, and neither
    ``pg_stat_io`` nor the relation's ``pg_statio`` blocks read count a read.
    """
    return backend.extend_buffered_rel_to(rel, fork, block + 1)


class VMBuffer:
    """A caller's ``Buffer vmbuffer`` with ``visibilitymap_get_status``/``_pin``/``_set``.

    Models ``visibilitymap.c``: the pinned VM page is kept across heap blocks and replaced only
    when a block on another VM page is asked for.
    """

    __slots__ = ("backend", "rel", "flags", "buf", "block", "dirtied")

    def __init__(self, backend: Backend, rel: Relation, flags: VMFlags) -> None:
        self.backend = backend
        self.rel = rel
        self.flags = flags
        self.buf = -1
        self.block = -1
        self.dirtied = 0

    def _switch(self, vm_block: int, extend: bool) -> bool:
        if self.buf >= 0:
            if self.block == vm_block:
                return True
            self.backend.release_buffer(self.buf)
            self.buf = -1
            self.block = -1
        rel = self.rel
        fork = ForkNumber.VM
        if not rel.exists(fork) or vm_block >= rel.nblocks(fork):
            if not extend:
                return False
            self.buf = _extend_and_pin(self.backend, rel, fork, vm_block)
        else:
            self.buf = self.backend.read_buffer(rel, vm_block, fork, None, RBM_ZERO_ON_ERROR)
        self.block = vm_block
        return True

    def status(self, heap_block: int) -> int:
        """``visibilitymap_get_status``: the block's bits (0 without a VM page, and no read)."""
        if not self._switch(vm_page_of(heap_block), extend=False):
            return 0
        return self.flags(heap_block)

    def pin(self, heap_block: int) -> None:
        """``visibilitymap_pin``: make sure the block's VM page is pinned (extending the fork)."""
        self._switch(vm_page_of(heap_block), extend=True)

    def set_bits(self, wal_logged: bool = True) -> None:
        """``visibilitymap_set`` on the pinned page: it is dirtied (and WAL-logged)."""
        if self.buf >= 0:
            self.backend.mark_buffer_dirty(self.buf, wal_logged=wal_logged)
            self.dirtied += 1

    def release(self) -> None:
        if self.buf >= 0:
            self.backend.release_buffer(self.buf)
            self.buf = -1
            self.block = -1


def visibilitymap_count(
    backend: Backend, rel: Relation, counts: Callable[[int], tuple[int, int]], nblocks: int
) -> tuple[int, int]:
    """``visibilitymap_count``: read every VM page in turn; (all-visible, all-frozen) counts.

    ``counts(n)`` gives the bits set among heap blocks ``0..n-1``; only the blocks covered by VM
    pages that exist count. The read pattern (one ``normal`` read per VM page not in the pool)
    is what matters for I/O.
    """
    fork = ForkNumber.VM
    npages = rel.nblocks(fork) if rel.exists(fork) else 0
    for page in range(npages):
        buf = backend.read_buffer(rel, page, fork, None, RBM_ZERO_ON_ERROR)
        backend.release_buffer(buf)
    return counts(min(nblocks, npages * VM_HEAPBLOCKS_PER_PAGE))


def record_free_space(backend: Backend, rel: Relation, heap_block: int) -> None:
    """``RecordPageWithFreeSpace``: update the block's FSM leaf (extending the fork if needed)."""
    fork = ForkNumber.FSM
    leaf = fsm_leaf_of(heap_block)
    if not rel.exists(fork) or leaf >= rel.nblocks(fork):
        buf = _extend_and_pin(backend, rel, fork, leaf)
    else:
        buf = backend.read_buffer(rel, leaf, fork, None, RBM_ZERO_ON_ERROR)
    # MarkBufferDirtyHint: the FSM is not WAL-logged.
    backend.mark_buffer_dirty(buf)
    backend.release_buffer(buf)


def get_recorded_free_space(backend: Backend, rel: Relation, heap_block: int) -> bool:
    """``GetRecordedFreeSpace``: read the block's FSM leaf if it exists; True if it did."""
    fork = ForkNumber.FSM
    leaf = fsm_leaf_of(heap_block)
    if not rel.exists(fork) or leaf >= rel.nblocks(fork):
        return False
    buf = backend.read_buffer(rel, leaf, fork, None, RBM_ZERO_ON_ERROR)
    backend.release_buffer(buf)
    return True


def fsm_vacuum_range(backend: Backend, rel: Relation, start: int, end: int) -> int:
    """``FreeSpaceMapVacuumRange(start, end)``: depth-first walk; returns the pages visited."""
    if end <= start:
        return 0
    fork = ForkNumber.FSM
    if not rel.exists(fork):
        return 0
    nfsm = rel.nblocks(fork)
    visited = 0

    def visit(level: int, logpageno: int) -> bool:
        """``fsm_vacuum_page``; False when the page is past the end of the fork (eof)."""
        nonlocal visited
        phys = fsm_physical(level, logpageno)
        if phys >= nfsm:
            return False
        buf = backend.read_buffer(rel, phys, fork, None, RBM_ZERO_ON_ERROR)
        visited += 1
        if level > 0:
            span = FSM_SLOTS_PER_PAGE**level  # heap blocks under one slot of this page
            first = logpageno * FSM_SLOTS_PER_PAGE
            lo = max(first, start // span)
            hi = min(first + FSM_SLOTS_PER_PAGE - 1, (end - 1) // span)
            for child in range(lo, hi + 1):
                if not visit(level - 1, child):
                    break
        backend.release_buffer(buf)
        return True

    visit(_FSM_TREE_DEPTH - 1, 0)
    return visited


def truncate_maps(backend: Backend, rel: Relation, new_heap_nblocks: int) -> None:
    """``RelationTruncate``'s map part: trim the FSM and VM to the new heap size.

    ``FreeSpaceMapPrepareTruncateRel`` and ``visibilitymap_prepare_truncate`` read the page
    holding the new end when it is cut in the middle (normally a hit); buffers of removed map
    pages are dropped.
    """
    pool = backend.instance.pool
    fork = ForkNumber.FSM
    if rel.exists(fork):
        nfsm = rel.nblocks(fork)
        keep = fsm_leaf_of(new_heap_nblocks)
        if new_heap_nblocks % FSM_SLOTS_PER_PAGE and keep < nfsm:
            buf = backend.read_buffer(rel, keep, fork, None, RBM_ZERO_ON_ERROR)
            backend.mark_buffer_dirty(buf)
            backend.release_buffer(buf)
            keep += 1
        if keep < nfsm:
            pool.drop_relation_buffers(rel, fork, keep)
            rel.set_nblocks(fork, keep)
    fork = ForkNumber.VM
    if rel.exists(fork):
        nvm = rel.nblocks(fork)
        keep = vm_page_of(new_heap_nblocks)
        if new_heap_nblocks % VM_HEAPBLOCKS_PER_PAGE and keep < nvm:
            buf = backend.read_buffer(rel, keep, fork, None, RBM_ZERO_ON_ERROR)
            backend.mark_buffer_dirty(buf, wal_logged=True)
            backend.release_buffer(buf)
            keep += 1
        if keep < nvm:
            pool.drop_relation_buffers(rel, fork, keep)
            rel.set_nblocks(fork, keep)
