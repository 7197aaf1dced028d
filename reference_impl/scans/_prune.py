"""On-access pruning of PostgreSQL 19 and later: ``heap_page_prune_opt`` (``pruneheap.c``).

Every page a page-at-a-time heap scan moves to (``heap_prepare_pagescan``: sequential, TID range
and sample scans, cursors, the heap scan of ``bt_index_check(heapallindexed)``), every heap page
an index scan pins for the first time (``heapam_index_fetch_tuple``) and every page of a bitmap
heap scan (``heapam_scan_bitmap_next_block``) goes through ``heap_page_prune_opt`` first. What it
does there, step by step as 19beta1 and master have it:

1. nothing unless the page carries a prune hint (``PageGetPruneXid``) that is older than every
   snapshot (``GlobalVisTestIsRemovableXid``). From 19 on ``heap_insert`` sets the hint on the
   page it fills ("so that we can set the page all-visible in the VM on the next page access"),
   as ``heap_delete`` does in every version, and VACUUM's own pruning clears it;
2. nothing unless the page is full or has less than ``Max(fillfactor target, BLCKSZ / 10)`` free
   (``PageGetHeapFreeSpace``), and the backend gets the cleanup lock without waiting
   (``ConditionalLockBufferForCleanup``: its pin is the only one);
3. ``visibilitymap_pin``: the page's VM page is read (no strategy, context ``normal``; the fork
   is extended if it has no such page) and stays pinned in the scan's ``vmbuffer`` until the
   scan ends or is rescanned;
4. ``heap_page_prune_and_freeze`` (``PRUNE_ON_ACCESS``, ``HEAP_PAGE_PRUNE_SET_VM`` when the
   executor marked the relation read-only for the query, ``SO_HINT_REL_READ_ONLY``). Its
   visibility tests set the hint bits a page lacks (``MarkBufferDirtyHint``: with data checksums
   the first change after a checkpoint is WAL-logged as a full-page image). It clears the prune
   hint (``do_hint_prune``), a hint-only change that dirties the page the same way. It sets the
   page all-visible in the VM only if that costs nothing more (``heap_page_will_set_vm``): an
   on-access prune that neither prunes nor freezes leaves the VM alone when the page is still
   clean or would need a full-page image. So a clean, hinted page only has its hint cleared,
   while a page whose hint bits were just set (dirty, its image already logged) becomes
   all-visible: ``PageSetAllVisible``, ``visibilitymap_set`` (the VM page dirtied) and a WAL
   record (``MarkBufferDirty``);
5. master only: a page newly set all-visible has its free space recorded in the FSM
   (``RecordPageWithFreeSpace``: the leaf is read, extended if missing, and dirtied only if the
   recorded category changes).

PostgreSQL 18 (``heap_page_prune_opt(relation, buffer)``) pins no VM page and sets no VM bit, and
its ``heap_insert`` sets no prune hint; it is not modelled here.

What a ``RelationSpec`` says about the hints, in the terms of these steps: a page not all-visible
carries a prune hint (its insert's, or a rolled-back delete's on a vacuumed table), an all-visible
one none (VACUUM cleared it), a page appended during the scan one that is not removable yet (its
inserting transaction is newer than the scan's snapshot). The dead tuples of a spec are recently
dead: a snapshot older than the deletes is still open, which holds back every prune hint of the
relation (no on-access prune removes them; VACUUM does). Every page holding tuples is full: its
last row takes the space that is left, so ``PageGetHeapFreeSpace`` is below 8 bytes.
"""

from __future__ import annotations

from typing import Any

from ..storage.relation import ForkNumber, Relation
from ._forkmaps import VMBuffer, fsm_leaf_of
from ._pageview import HeapView, take_hint_bits
from .base import ScanContext

__all__ = ["OnAccessPruning"]

_BLCKSZ = 8192
_HEAP_DEFAULT_FILLFACTOR = 100


class OnAccessPruning:
    """``heap_page_prune_opt(relation, buffer, &vmbuffer, rel_read_only)`` of PostgreSQL 19 and
    later with the scan's ``vmbuffer`` (``rs_vmbuffer`` of a heap scan, ``xs_vmbuffer`` of an
    index fetch). :meth:`for_scan` gives ``None`` where nothing is ever pruned (PostgreSQL 18, a
    relation without page contents)."""

    __slots__ = ("ctx", "backend", "rel", "read_only", "view", "vm", "_nblocks", "_records_fsm")

    def __init__(self, ctx: ScanContext, rel: Relation, read_only: bool) -> None:
        self.ctx = ctx
        self.backend = ctx.backend
        self.rel = rel
        self.read_only = read_only
        self.view = HeapView(rel)
        self.vm = VMBuffer(self.backend, rel, self.view.vm_flags)
        spec = rel.content.spec  # type: ignore[union-attr]
        # Pages appended after the spec's blocks (a table growing under the scan) carry the hint
        # of a transaction newer than the scan's snapshot: not removable.
        self._nblocks = int(spec.nblocks)
        # heap_page_prune_opt in master: RecordPageWithFreeSpace for a page newly all-visible.
        self._records_fsm = ctx.version_at_least("20devel")

    @classmethod
    def for_scan(cls, ctx: ScanContext, rel: Relation, *, read_only: bool) -> OnAccessPruning | None:
        """The pruning of a scan of ``rel`` (``read_only``: ``SO_HINT_REL_READ_ONLY``), or ``None``
        when no page of it can be pruned on access."""
        if not ctx.version_at_least("19"):
            return None
        spec = getattr(rel.content, "spec", None)
        if spec is None or _horizon_held(spec):
            return None
        return cls(ctx, rel, read_only)

    def _minfree(self) -> int:
        """``Max(RelationGetTargetPageFreeSpace(relation, HEAP_DEFAULT_FILLFACTOR), BLCKSZ / 10)``."""
        fillfactor = int(getattr(self.rel.content.spec, "fillfactor", _HEAP_DEFAULT_FILLFACTOR))  # type: ignore[union-attr]
        return max(_BLCKSZ * (100 - fillfactor) // 100, _BLCKSZ // 10)

    def prune_opt(self, buf: int, block: int) -> None:
        """``heap_page_prune_opt`` on the pinned page ``block`` in buffer ``buf``."""
        rel = self.rel
        if block >= self._nblocks or block in rel.prune_cleared_now:
            return  # no prune hint, or one not yet removable (GlobalVisTestIsRemovableXid)
        page = self.view.page(block)
        if page.all_visible or page.max_offset == 0:
            return  # VACUUM left no prune hint
        # A page with tuples is full (see the module docstring): its free space, below 8 bytes, is
        # under minfree whatever the fill factor.
        assert self._minfree() > 8
        be = self.backend
        if be.pinned_buffers().get(buf) != 1 or be.pool.refcount[buf] != 1:
            return  # ConditionalLockBufferForCleanup: another pin on the buffer
        be.lock_buffer(buf)  # its ConditionalLockBuffer
        self.vm.pin(block)  # visibilitymap_pin; prune_freeze_setup's visibilitymap_get_status
        rel.prune_cleared_now.add(block)
        wal_logged = rel.persistence == "p"
        if take_hint_bits(rel, page):
            # heap_prune_satisfies_vacuum set the hint bits: the buffer is dirty and its image
            # logged, so heap_page_will_set_vm lets a read-only scan set the page all-visible.
            be.mark_buffer_dirty(buf, wal_logged=wal_logged)
            if self.read_only:
                rel.all_visible_now.add(block)
                self.vm.set_bits(wal_logged=wal_logged)  # visibilitymap_set
                be.mark_buffer_dirty(buf, wal_logged=wal_logged)  # XLOG_HEAP2_PRUNE_ON_ACCESS
                if self._records_fsm:
                    self._record_free_space(block)
            return
        # A clean, hinted page: heap_page_will_set_vm declines (it would newly dirty the page);
        # clearing pd_prune_xid is a hint-only change (MarkBufferDirtyHint).
        be.mark_buffer_dirty(buf, wal_logged=wal_logged)

    def _record_free_space(self, block: int) -> None:
        """``RecordPageWithFreeSpace`` (master): ``fsm_readbuf(extend = true)`` of the block's leaf;
        the full page's category (0) is the one the FSM already holds (INSERT or VACUUM recorded
        it), so the leaf is not dirtied."""
        be = self.backend
        rel = self.rel
        fork = ForkNumber.FSM
        leaf = fsm_leaf_of(block)
        if not rel.exists(fork) or leaf >= rel.nblocks(fork):
            buf = be.extend_buffered_rel_to(rel, fork, leaf + 1)
        else:
            from ..buffers.bufmgr import RBM_ZERO_ON_ERROR

            buf = be.read_buffer(rel, leaf, fork, None, RBM_ZERO_ON_ERROR)
        be.release_buffer(buf)

    def release(self) -> None:
        """The scan releases its ``vmbuffer`` (``heap_endscan``, ``heap_rescan``,
        ``heapam_index_fetch_end``)."""
        self.vm.release()


def _horizon_held(spec: Any) -> bool:
    """Whether the spec's dead tuples hold back every prune hint of the relation (see the module
    docstring)."""
    return (
        float(getattr(spec, "dead_fraction", 0.0)) > 0 or int(getattr(spec, "dead_per_page", None) or 0) > 0
    )
