"""Heap scans: ``HeapScanDesc`` with its stream, strategy and the executor's pins (``heapam.c``).

A heap sequential scan is the reference consumer of a read stream, and the one whose details
the fidelity checks found to matter:

* **initscan** fixes ``nblocks`` when the scan starts (blocks added later are not visited), uses
  a BULKREAD ring and synchronized scanning only for tables larger than ``NBuffers / 4``, and
  picks the start block (0, or the shared sync-scan location). It runs again at every rescan.
* The stream is created once, in ``heap_beginscan``, with ``SEQUENTIAL | USE_BATCHING`` and the
  scan's strategy; its callback (``heap_scan_stream_read_next_serial``) walks from the start
  block, wraps at the end, reports its *look-ahead* position to the sync-scan table every 16
  blocks and stops when it comes back to the start block.
* The consumer's own pins count against the stream's pin budget and the ring's reuse test. For
  every page it moves to, an executor scan releases its scan buffer (the tuple slot still pins
  the page of the last returned tuple), asks the stream for the next page, and, when the first
  tuple of that page is returned, lets the slot drop the old page and take an extra pin on the
  new one (release first, then pin: ``ExecStoreBufferHeapTuple``). ``heap_endscan`` ends the
  stream while the slot still pins its page; the slot is cleared afterwards.
* **Rescan.** PostgreSQL 18's ``heap_rescan`` resets the stream and re-runs ``initscan``, which
  may now create or free the BULKREAD strategy while the stream keeps the one it was created
  with: a stale strategy, or a dangling pointer to a freed one (the bug reported in the
  sample-scan thread). A PostgreSQL 18.6 server still has it (measured: a table grown past
  ``NBuffers / 4`` before the rescan is read a second time entirely in context ``normal``), and
  so do 19 and the development branch (their ``heap_rescan`` and ``initscan`` are 18's: reset,
  then ``initscan``, no ``read_stream_set_strategy``). ``rescan_fix=False``, the default with
  every version, reproduces it: the stream keeps the strategy it was created with, even one
  ``initscan`` has just freed (use after free; in debug mode the model stops there).
  ``rescan_fix=True`` applies the reviewed fix the seed patches propose
  (``read_stream_set_strategy`` when a strategy is added; a new stream, with its larger queue,
  when one is removed).

* **Direction.** The callback follows the scan direction (``rs_dir``): backward from the block
  before the start block (or the last one), never reporting sync positions, and the first
  backward block turns synchronized scanning off for the rest of the scan. ``fetch_page(dir)`` is
  ``heap_fetch_next_buffer``: when the direction differs from the last page's, the look-ahead
  position is set back to the current block and the stream is reset (its pending read is still
  read, as 18.6 does), so reading resumes next to the current block in the new direction.
  ``getnext(dir)`` is ``heapgettup_pagemode``: it continues on the current page first, so the
  reset happens only when a page is left in the new direction. Falling off either end releases
  the scan buffer and clears ``rs_inited``: a fetch in the other direction starts a fresh scan
  from that end.

The unstreamed variant reads each page with ``ReadBufferExtended`` and the scan's strategy, as
``heapgetpage`` did before PostgreSQL 17; block order, sync reporting and pins are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..buffers.strategy import BAS_BULKREAD, BufferAccessStrategy, get_access_strategy
from ..read_stream import READ_STREAM_SEQUENTIAL, READ_STREAM_USE_BATCHING, ReadStream
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._pageview import HeapView, take_hint_bits
from ._prune import OnAccessPruning
from .base import ScanContext, heap_page_live
from .syncscan import SYNC_SCAN_REPORT_INTERVAL, SyncScanTable

__all__ = ["BACKWARD", "FORWARD", "HeapScan", "sync_scan_table"]

#: ``ScanDirection`` values (``sdir.h``): a step through line pointers and blocks.
FORWARD = 1
BACKWARD = -1


def sync_scan_table(instance: Any) -> SyncScanTable:
    """The instance's shared sync-scan table (created on first use)."""
    table = getattr(instance, "_sync_scans", None)
    if table is None:
        table = SyncScanTable()
        instance._sync_scans = table
    return table


class HeapScan:
    """``HeapScanDescData`` with ``heap_beginscan``/``initscan``/``heap_rescan``/``heap_endscan``.

    ``pages()`` is the forward page loop of ``heapgettup_pagemode`` (``heap_fetch_next_buffer``);
    the caller examines each page it yields and calls :meth:`store_tuple` when it returns a
    tuple. ``fetch_page(dir)`` and ``getnext(dir)`` take a direction (cursors).
    """

    def __init__(
        self,
        ctx: ScanContext,
        rel: Relation,
        *,
        streamed: bool = True,
        allow_strat: bool = True,
        allow_sync: bool = True,
        use_slot: bool = True,
        stream_flags: int = READ_STREAM_SEQUENTIAL | READ_STREAM_USE_BATCHING,
        rescan_fix: bool | None = None,
        sets_hints: bool = False,
        instrument: bool = False,
        read_only: bool = False,
        pagemode: bool | None = None,
    ) -> None:
        self.ctx = ctx
        self.backend = ctx.backend
        self.rel = rel
        self.streamed = streamed
        self.req_strat = allow_strat
        self.req_sync = allow_sync
        self.use_slot = use_slot
        self.stream_flags = stream_flags
        # No version has the fix (18.6, 19 and 20devel all keep the stream's first strategy).
        self.rescan_fix = bool(rescan_fix)
        self.strategy: BufferAccessStrategy | None = None
        self.nblocks = 0
        self.startblock = 0
        self.numblocks: int | None = None
        self.sync = False
        self.inited = False
        self.prefetch_block = InvalidBlockNumber
        self.cbuf = -1
        self.cblock = InvalidBlockNumber
        self.slot_buf = -1
        self.dir = FORWARD
        # heapgettup_pagemode's position on the current page: visible tuples, returned index.
        self.ntuples = 0
        self.cindex = 0
        self.stream: ReadStream | None = None
        # Page-at-a-time visibility tests set hint bits (prepare_page); only a relation built
        # with unhinted pages has any to set.
        spec = getattr(rel.content, "spec", None)
        self._hint_view = (
            HeapView(rel) if sets_hints and spec is not None and spec.hinted_fraction < 1.0 else None
        )
        self.instrument = instrument  # SO_SCAN_INSTRUMENT (19: EXPLAIN (IO))
        # heap_prepare_pagescan prunes each page first (page mode: the page-at-a-time visibility
        # tests, sets_hints); 19+'s heap_page_prune_opt may set VM bits in a scan of a relation
        # the query does not modify (read_only: SO_HINT_REL_READ_ONLY).
        self.pagemode = sets_hints if pagemode is None else pagemode
        self._pruner = OnAccessPruning.for_scan(ctx, rel, read_only=read_only) if self.pagemode else None
        self._initscan(keep_startblock=False)
        if streamed:
            self.stream = self._begin_stream()

    # ------------------------------------------------------------------------------ set-up
    def _begin_stream(self) -> ReadStream:
        from .. import begin_stream

        stream = begin_stream(
            self.backend, self.rel, self._callback, None, flags=self.stream_flags, strategy=self.strategy
        )
        if self.instrument:
            # heap_beginscan: read_stream_enable_stats once the stream exists
            self.ctx.instrument_stream(stream)
        return self.ctx.track_stream(stream)

    def _initscan(self, keep_startblock: bool) -> None:
        """``initscan``: size, strategy, sync and start block."""
        rel = self.rel
        settings = self.backend.settings
        self.nblocks = rel.nblocks(ForkNumber.MAIN)
        large = rel.persistence != "t" and self.nblocks > settings.nbuffers // 4
        allow_strat = self.req_strat and large
        allow_sync = self.req_sync and large
        if allow_strat:
            if self.strategy is None:
                self.strategy = get_access_strategy(BAS_BULKREAD, settings)
        elif self.strategy is not None:
            self.strategy.free()
            self.strategy = None
        if keep_startblock:
            self.sync = allow_sync and settings.synchronize_seqscans
        elif allow_sync and settings.synchronize_seqscans:
            self.sync = True
            self.startblock = sync_scan_table(self.backend.instance).get_location(rel.relid, self.nblocks)
        else:
            self.sync = False
            self.startblock = 0
        self.numblocks = None
        self.inited = False
        # initscan starts every scan forward: cursors go forward before they go backward.
        self.dir = FORWARD
        self.prefetch_block = InvalidBlockNumber
        self.cblock = InvalidBlockNumber
        self.ntuples = 0
        self.cindex = 0

    def set_scan_limits(self, startblock: int, numblocks: int) -> None:
        """``heap_setscanlimits`` (TID range scans): a start block and a block count."""
        self.startblock = startblock
        self.numblocks = numblocks

    # ------------------------------------------------------------------------------ blocks
    def _initial_block(self) -> int:
        """``heapgettup_initial_block`` in the scan's direction."""
        if self.nblocks == 0 or self.numblocks == 0:
            return InvalidBlockNumber
        if self.dir == FORWARD:
            return self.startblock
        # A backward scan stops reporting sync positions: it would only confuse forward scans.
        self.sync = False
        if self.numblocks is not None:
            return (self.startblock + self.numblocks - 1) % self.nblocks
        if self.startblock > 0:
            return self.startblock - 1
        return self.nblocks - 1

    def _advance_block(self, block: int) -> int:
        """``heapgettup_advance_block`` in the scan's direction."""
        if self.dir == BACKWARD:
            if block == self.startblock:
                return InvalidBlockNumber
            if self.numblocks is not None:
                self.numblocks -= 1
                if self.numblocks == 0:
                    return InvalidBlockNumber
            return (self.nblocks if block == 0 else block) - 1
        block += 1
        if block >= self.nblocks:
            block = 0
        if self.sync and block % SYNC_SCAN_REPORT_INTERVAL == 0:
            sync_scan_table(self.backend.instance).report_location(self.rel.relid, block)
        if block == self.startblock:
            return InvalidBlockNumber
        if self.numblocks is not None:
            self.numblocks -= 1
            if self.numblocks == 0:
                return InvalidBlockNumber
        return block

    def _callback(self, stream: Any, private: Any) -> int:
        """``heap_scan_stream_read_next_serial``."""
        if not self.inited:
            self.prefetch_block = self._initial_block()
            self.inited = True
            return self.prefetch_block
        block = self.prefetch_block + 1
        if (
            block >= self.nblocks
            or block == self.startblock
            or self.numblocks is not None
            or (self.sync and block % SYNC_SCAN_REPORT_INTERVAL == 0)
            or self.dir == BACKWARD
        ):
            # The general path (wrap-around, sync reports, end, block limit, backward).
            block = self._advance_block(self.prefetch_block)
        self.prefetch_block = block
        return block

    # ------------------------------------------------------------------------------ pages
    def pages(self) -> Iterator[int]:
        """Yield each page in hand (``rs_cbuf`` pinned) until the end of the scan."""
        be = self.backend
        stream = self.stream
        while True:
            if self.cbuf >= 0:
                be.release_buffer(self.cbuf)
                self.cbuf = -1
            if be.cancel_pending:
                be.check_for_interrupts()
            if stream is not None:
                buf = stream.next_buffer()
            else:
                block = self._callback(None, None)
                buf = (
                    -1
                    if block == InvalidBlockNumber
                    else be.read_buffer(self.rel, block, ForkNumber.MAIN, self.strategy)
                )
            if buf < 0:
                break
            self.cbuf = buf
            self.cblock = block = be.pool.tag[buf] & 0xFFFFFFFF
            if self.pagemode:
                self.prepare_pagescan(buf, block)
            yield block
        self.cbuf = -1
        self.cblock = InvalidBlockNumber
        self.inited = False

    def fetch_page(self, direction: int) -> int:
        """``heap_fetch_next_buffer``: the next page in ``direction`` pinned as ``rs_cbuf``.

        Returns its block, or ``InvalidBlockNumber`` at the end of the scan (``heapgettup``'s
        tail: no scan buffer, not initialised, so the next fetch starts the scan again).
        """
        be = self.backend
        if self.cbuf >= 0:
            be.release_buffer(self.cbuf)
            self.cbuf = -1
        if be.cancel_pending:
            be.check_for_interrupts()
        if direction != self.dir:
            # Look ahead from the current block again, or the blocks between it and the
            # look-ahead position would be read twice; the reset drains what was read ahead.
            self.prefetch_block = self.cblock
            if self.stream is not None:
                self.stream.reset()
        self.dir = direction
        if self.stream is not None:
            buf = self.stream.next_buffer()
        else:
            block = self._callback(None, None)
            buf = (
                -1
                if block == InvalidBlockNumber
                else be.read_buffer(self.rel, block, ForkNumber.MAIN, self.strategy)
            )
        if buf < 0:
            self.cblock = InvalidBlockNumber
            self.prefetch_block = InvalidBlockNumber
            self.inited = False
            return InvalidBlockNumber
        self.cbuf = buf
        self.cblock = be.pool.tag[buf] & 0xFFFFFFFF
        if self.pagemode:
            self.prepare_pagescan(buf, self.cblock)
        return self.cblock

    def prepare_pagescan(self, buf: int, block: int) -> None:
        """``heap_prepare_pagescan``: ``heap_page_prune_opt`` (19+), then the share lock under which
        the page's tuples are tested (``LockBuffer``; in 19 it looks the buffer's private
        reference count entry up), and the hint bits those tests set."""
        if self._pruner is not None:
            self._pruner.prune_opt(buf, block)
        self.backend.lock_buffer(buf)
        if self._hint_view is not None:
            self.prepare_page(buf, block)

    def prepare_page(self, buf: int, block: int) -> None:
        """``heap_prepare_pagescan``'s visibility tests on the page in hand: on a page that is not
        all-visible, the first look at tuples whose commit status is not hinted yet sets their
        hint bits (``HeapTupleSatisfiesMVCC`` → ``SetHintBits`` → ``MarkBufferDirtyHint``). With
        data checksums (PostgreSQL 18's ``initdb`` default) the first hint after a checkpoint
        WAL-logs a full-page image (``XLogSaveBufferForHint``) on a permanent relation, so the
        dirty buffer needs a WAL flush before it is written, and a BULKREAD ring rejects it
        (``StrategyRejectBuffer``): the page stays in shared buffers. A page once hinted stays
        hinted (``Relation.hinted_now``)."""
        view = self._hint_view
        if view is None or block in self.rel.hinted_now:
            return
        page = view.page(block)
        if page.all_visible or page.max_offset == 0 or not take_hint_bits(self.rel, page):
            return
        self.backend.mark_buffer_dirty(buf, wal_logged=self.rel.persistence == "p")

    def getnext(self, direction: int, on_page: Any = None) -> bool:
        """``heap_getnextslot`` over ``heapgettup_pagemode``: the next visible tuple in
        ``direction`` into the slot, or False (and the slot cleared) at the end of the scan.

        ``on_page(block)`` is called for every page the scan moves to (the scan's page work).
        """
        if self.inited and self.cbuf >= 0:
            # Continue on the page of the last tuple returned.
            index = self.cindex + direction
            left = self.ntuples - index if direction == FORWARD else self.cindex
            if left > 0:
                self.cindex = index
                self.store_tuple()
                return True
        while True:
            block = self.fetch_page(direction)
            if block == InvalidBlockNumber:
                self.clear_slot()
                return False
            self.ntuples = heap_page_live(self.rel, block)
            if on_page is not None:
                on_page(block)
            if self.ntuples > 0:
                self.cindex = 0 if direction == FORWARD else self.ntuples - 1
                self.store_tuple()
                return True

    def store_tuple(self) -> None:
        """A tuple of the current page goes into the executor's slot (``ExecStoreBufferHeapTuple``)."""
        if not self.use_slot:
            return
        buf = self.cbuf
        if self.slot_buf != buf:
            be = self.backend
            if self.slot_buf >= 0:
                be.release_buffer(self.slot_buf)
            self.slot_buf = buf
            be.incr_buffer_refcount(buf)

    def clear_slot(self) -> None:
        """``ExecClearTuple``: the slot drops its pin."""
        if self.slot_buf >= 0:
            self.backend.release_buffer(self.slot_buf)
            self.slot_buf = -1

    # ------------------------------------------------------------------------------ rescan/end
    def rescan(self) -> None:
        """``heap_rescan`` with the reviewed strategy fix (see the module docstring)."""
        be = self.backend
        if self.cbuf >= 0:
            be.release_buffer(self.cbuf)
            self.cbuf = -1
        if self._pruner is not None:
            self._pruner.release()  # rs_vmbuffer
        if self.stream is not None:
            self.stream.reset()
        old = self.strategy
        self._initscan(keep_startblock=True)
        if self.stream is not None and self.rescan_fix:
            self._propagate_strategy(old)

    def _propagate_strategy(self, old: BufferAccessStrategy | None) -> None:
        """Make the stream follow the strategy ``initscan`` chose (the seed thread's 0002 fix)."""
        new = self.strategy
        stream = self.stream
        assert stream is not None
        if new is old:
            return
        if new is not None:
            stream.set_strategy(new)
        else:
            stream.end()
            self.stream = self._begin_stream()

    def end(self) -> None:
        """``heap_endscan``: release the scan buffer, end the stream (the slot still pins)."""
        if self.cbuf >= 0:
            self.backend.release_buffer(self.cbuf)
            self.cbuf = -1
        if self._pruner is not None:
            self._pruner.release()  # rs_vmbuffer
        if self.stream is not None:
            self.stream.end()
            self.stream = None
        if self.strategy is not None:
            self.strategy.free()
            self.strategy = None
