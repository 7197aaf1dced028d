"""VACUUM of one heap table and its indexes (``vacuumlazy.c``: ``heap_vacuum_rel``).

A plain ``VACUUM t`` is a sequence of phases sharing one buffer ring (``scans.md`` §6.0), and the
reads it issues are the sum of what each phase asks for:

1. **eager-scan set-up** (only for a normal VACUUM of a table of at least 8192 blocks whose oldest
   XID is older than the freeze limit): ``visibilitymap_count`` reads every VM page;
2. **phase I** (``lazy_scan_heap``): a read stream whose callback (``heap_vac_scan_next_block``)
   consults the visibility map (one ``normal`` read per VM page) and returns every block except
   runs of at least ``SKIP_PAGES_THRESHOLD`` = 32 skippable ones; the last block is always read.
   All-frozen blocks are skippable unless ``DISABLE_PAGE_SKIPPING``; all-visible ones unless the
   VACUUM is aggressive (``FREEZE``) or eager scanning takes them. The consumer pins the block's
   VM page, prunes (dirtying and WAL-logging the page), collects LP_DEAD items into the dead-TID
   store, sets VM bits, and records free space in the FSM leaf unless the page keeps LP_DEAD
   items for phase III;
3. **phases II and III** (``lazy_vacuum``), when dead items were collected, the table has
   indexes, and they are not bypassed (fewer than 2 % of the pages with LP_DEAD items): each
   index's bulk delete (``index_vacuum.py``), then a *new* stream over the blocks with dead items
   (``lazy_vacuum_heap_rel``), marking them unused and recording free space. If the dead-TID
   store fills during phase I (``dead_items_max``, the model's stand-in for
   ``maintenance_work_mem``), this round runs at that point and phase I resumes afterwards;
4. ``FreeSpaceMapVacuumRange`` over the rest of the table;
5. index cleanup (btree metapage, GiST scan when no bulk delete ran, hash nothing);
6. **truncation** when enough trailing pages may be empty: a backwards check, one
   ``ReadBufferExtended`` per block with 32-block prefetch advice, then ``RelationTruncate``;
7. a final ``visibilitymap_count``.

The ring is consulted only for new buffers, so pages read in phase I are still there in phase III
only if fewer than ring-size buffers were allocated in between (index pages included); dirty
buffers are written when the ring comes back to them (WAL flushed first), which is where a
device's write latency enters VACUUM's time.

**The wraparound failsafe** (``lazy_check_wraparound_failsafe``, checked before phase I, every
``FAILSAFE_EVERY_PAGES`` = 4 GB of scanned pages and around each index's bulk delete; the
``failsafe_at_check`` parameter says at which check the table's XID age has crossed
``vacuum_failsafe_age``) stops index vacuuming, index cleanup, truncation and the cost-based
delay, and drops the ring for what follows. The phase I stream holds its own copy of the ring:
PostgreSQL 18 and the development branch clear it (``read_stream_clear_strategy``) before the
stream's next buffer, PostgreSQL 19beta1 does not (its phase I keeps reading through the ring).

Variants. ``streamed`` is the version's own code. PostgreSQL 18: phase I
(``READ_STREAM_MAINTENANCE``, per-buffer flags, no fast path), phase III (``MAINTENANCE |
USE_BATCHING``), btree and GiST bulk delete (``MAINTENANCE | FULL | USE_BATCHING``) are
streams, as is SP-GiST's bulk delete, hash bulk delete is not; PostgreSQL 19 streams hash bulk
delete's bucket pages as well (``hash_stream`` chooses otherwise: off runs 18's hash code, on
runs 19's on 18's stream), and GIN's and BRIN's cleanup and bloom's passes.
``unstreamed`` is the PostgreSQL 16 shape:
every heap and index page one ``ReadBufferExtended`` at a time, with the same ring and the same
block choices. Both variants visit the same pages and return the same answer.

What the model decides about page contents (the synthetic relation gives live and dead tuples,
VM bits, hint bits): every dead tuple is removable; a pruned page without LP_DEAD items becomes
all-visible; it becomes all-frozen when the VACUUM is aggressive, eagerly scanned it, or it
already was (normal VACUUMs do not freeze young tuples); eagerly scanned pages always freeze, so
eager scanning is deterministic given the first region's random end
(``eager_first_region_end``, ``scans.md`` §6.1). The synthetic content itself is not changed by a
VACUUM (a second run sees the same dead tuples); truncation does shrink the forks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..buffers.bufmgr import Backend
from ..buffers.strategy import BufferAccessStrategy
from ..read_stream import READ_STREAM_MAINTENANCE, READ_STREAM_USE_BATCHING
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._forkmaps import (
    VM_ALL_FROZEN,
    VM_ALL_VISIBLE,
    VMBuffer,
    fsm_vacuum_range,
    record_free_space,
    truncate_maps,
    visibilitymap_count,
)
from ._maint import (
    DeadItems,
    IndexBulkDeleteResult,
    begin_vacuum_cost,
    end_vacuum_cost,
    vacuum_delay_point,
    vacuum_strategy,
)
from ._pageview import HeapPage, HeapView, take_hint_bits
from .base import ScanContext, ScanParam, register_scan
from .index_vacuum import IndexVacuumOptions, index_bulkdelete, index_vacuumcleanup, table_indexes

__all__ = [
    "vacuum",
    "SKIP_PAGES_THRESHOLD",
    "EAGER_SCAN_REGION_SIZE",
    "REL_TRUNCATE_MINIMUM",
    "REL_TRUNCATE_FRACTION",
    "PREFETCH_SIZE",
    "BYPASS_THRESHOLD_PAGES",
    "VACUUM_FSM_EVERY_PAGES",
    "FAILSAFE_EVERY_PAGES",
]

SKIP_PAGES_THRESHOLD = 32
EAGER_SCAN_REGION_SIZE = 4096
MAX_EAGER_FREEZE_SUCCESS_RATE = 0.2
REL_TRUNCATE_MINIMUM = 1000
REL_TRUNCATE_FRACTION = 16
PREFETCH_SIZE = 32
BYPASS_THRESHOLD_PAGES = 0.02
VACUUM_FSM_EVERY_PAGES = (8 * 1024 * 1024 * 1024) // 8192
FAILSAFE_EVERY_PAGES = (4 * 1024 * 1024 * 1024) // 8192

VAC_BLK_WAS_EAGER_SCANNED = 1 << 0
VAC_BLK_ALL_VISIBLE_ACCORDING_TO_VM = 1 << 1

_INDEX_CLEANUP = ("auto", "on", "off")


@dataclass
class _LVRelState:
    """``LVRelState``: the counters and state of one VACUUM of one table."""

    rel: Relation
    heap: HeapView
    rel_pages: int
    aggressive: bool
    skipwithvm: bool
    nindexes: int
    do_index_vacuuming: bool
    do_index_cleanup: bool
    do_rel_truncate: bool
    consider_bypass: bool
    #: ``vacrel->bstrategy``: the VACUUM ring, dropped (``None``) when the failsafe engages.
    bstrategy: BufferAccessStrategy | None = None
    # lazy_check_wraparound_failsafe: the call at which vacuum_xid_failsafe_check turns true
    failsafe_at_check: int | None = None
    failsafe_checks: int = 0
    failsafe_active: bool = False  # VacuumFailsafeActive
    # heap_vac_scan_next_block state
    current_block: int = InvalidBlockNumber
    next_unskippable_block: int = InvalidBlockNumber
    next_unskippable_allvis: bool = False
    next_unskippable_eager: bool = False
    skippedallvis: bool = False
    # eager scanning
    next_eager_scan_region_start: int = InvalidBlockNumber
    eager_scan_max_fails_per_region: int = 0
    eager_scan_remaining_fails: int = 0
    eager_scan_remaining_successes: int = 0
    # counters
    scanned_pages: int = 0
    eager_scanned_pages: int = 0
    tuples_deleted: int = 0
    tuples_frozen: int = 0
    lpdead_items: int = 0
    lpdead_item_pages: int = 0
    live_tuples: int = 0
    nonempty_pages: int = 0
    new_frozen_tuple_pages: int = 0
    vm_new_visible_pages: int = 0
    vm_new_visible_frozen_pages: int = 0
    vm_new_frozen_pages: int = 0
    num_index_scans: int = 0
    bypassed: bool = False
    phase3_pages: int = 0
    removed_pages: int = 0
    lp_dead_removed: bool = True
    dead_items: DeadItems = field(default_factory=DeadItems)
    indstats: dict[str, IndexBulkDeleteResult | None] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)


def _find_next_unskippable_block(vac: _LVRelState, vm: VMBuffer) -> bool:
    """``find_next_unskippable_block``; returns ``skipsallvis``."""
    rel_pages = vac.rel_pages
    nb = vac.next_unskippable_block + 1 if vac.next_unskippable_block != InvalidBlockNumber else 0
    eager = False
    skipsallvis = False
    while True:
        bits = vm.status(nb)
        allvis = bool(bits & VM_ALL_VISIBLE)
        if vac.next_eager_scan_region_start != InvalidBlockNumber and nb >= vac.next_eager_scan_region_start:
            vac.eager_scan_remaining_fails = vac.eager_scan_max_fails_per_region
            vac.next_eager_scan_region_start += EAGER_SCAN_REGION_SIZE
        if not allvis:
            break
        if nb == rel_pages - 1:
            break
        if not vac.skipwithvm:
            break
        if bits & VM_ALL_FROZEN:
            nb += 1
            continue
        if vac.aggressive:
            break
        if vac.eager_scan_remaining_fails > 0:
            eager = True
            break
        skipsallvis = True
        nb += 1
    vac.next_unskippable_block = nb
    vac.next_unskippable_allvis = allvis
    vac.next_unskippable_eager = eager
    return skipsallvis


def _next_block(vac: _LVRelState, vm: VMBuffer) -> tuple[int, int] | int:
    """``heap_vac_scan_next_block``: (block, flags), or ``InvalidBlockNumber`` at the end."""
    nxt = 0 if vac.current_block == InvalidBlockNumber else vac.current_block + 1
    if nxt >= vac.rel_pages:
        vm.release()
        return InvalidBlockNumber
    if vac.next_unskippable_block == InvalidBlockNumber or nxt > vac.next_unskippable_block:
        skipsallvis = _find_next_unskippable_block(vac, vm)
        if vac.next_unskippable_block - nxt >= SKIP_PAGES_THRESHOLD:
            nxt = vac.next_unskippable_block
            if skipsallvis:
                vac.skippedallvis = True
    if nxt < vac.next_unskippable_block:
        vac.current_block = nxt
        return nxt, VAC_BLK_ALL_VISIBLE_ACCORDING_TO_VM
    vac.current_block = nxt
    flags = 0
    if vac.next_unskippable_allvis:
        flags |= VAC_BLK_ALL_VISIBLE_ACCORDING_TO_VM
    if vac.next_unskippable_eager:
        flags |= VAC_BLK_WAS_EAGER_SCANNED
    return nxt, flags


def _eager_scan_setup(
    ctx: ScanContext,
    vac: _LVRelState,
    first_region_end: int | None,
    failure_rate: float,
) -> None:
    """``heap_vacuum_eager_scan_setup`` with the random first-region end given."""
    if first_region_end is None or failure_rate == 0 or vac.aggressive:
        return
    if vac.rel_pages < 2 * EAGER_SCAN_REGION_SIZE:
        return
    allvisible, allfrozen = visibilitymap_count(ctx.backend, vac.rel, vac.heap.vm_counts, vac.rel_pages)
    vac.eager_scan_remaining_successes = int(MAX_EAGER_FREEZE_SUCCESS_RATE * (allvisible - allfrozen))
    if vac.eager_scan_remaining_successes == 0:
        return
    vac.next_eager_scan_region_start = first_region_end % EAGER_SCAN_REGION_SIZE
    vac.eager_scan_max_fails_per_region = int(failure_rate * EAGER_SCAN_REGION_SIZE)
    ratio = 1.0 - vac.next_eager_scan_region_start / EAGER_SCAN_REGION_SIZE
    vac.eager_scan_remaining_fails = int(vac.eager_scan_max_fails_per_region * ratio)


def _lazy_check_wraparound_failsafe(ctx: ScanContext, vac: _LVRelState) -> bool:
    """``lazy_check_wraparound_failsafe``: True once the failsafe has engaged.

    ``vacuum_xid_failsafe_check`` (relfrozenxid or relminmxid older than
    ``vacuum_failsafe_age``) is true from the ``failsafe_at_check``-th evaluation on: the model's
    stand-in for a table whose XID age crosses the limit while VACUUM runs. Engaging it drops the
    ring (``vacrel->bstrategy = NULL``; the phase I stream keeps its own references, see
    ``_lazy_scan_heap``), turns off index vacuuming, index cleanup and truncation, and stops the
    cost-based delay (``VacuumCostActive = false``) — the same in 18, 19 and 20devel.
    """
    if vac.failsafe_active:
        return True
    vac.failsafe_checks += 1
    if vac.failsafe_at_check is None or vac.failsafe_checks < vac.failsafe_at_check:
        return False
    vac.failsafe_active = True
    vac.bstrategy = None
    vac.do_index_vacuuming = False
    vac.do_index_cleanup = False
    vac.do_rel_truncate = False
    be = ctx.backend
    be.vacuum_cost_active = False
    be.stats.vacuum_cost_balance = 0
    return True


def _visit(ctx: ScanContext, vac: _LVRelState, phase: str, block: int, ntuples: int) -> None:
    ctx.visit(block)
    ctx.process_page(ntuples)
    vac.visits[phase] = vac.visits.get(phase, 0) + 1


def _scan_heap_page(
    ctx: ScanContext,
    vac: _LVRelState,
    buf: int,
    block: int,
    blk_info: int,
    vm: VMBuffer,
    data_checksums: bool,
) -> tuple[bool, int]:
    """One page of ``lazy_scan_heap``'s loop up to the buffer release: (record FSM now?, ndeleted)."""
    be = ctx.backend
    vac.scanned_pages += 1
    eager = bool(blk_info & VAC_BLK_WAS_EAGER_SCANNED)
    if eager:
        vac.eager_scanned_pages += 1
    vm.pin(block)
    page = vac.heap.page(block)
    _visit(ctx, vac, "heap", block, page.nlive + page.ndead)
    if page.is_empty:
        # lazy_scan_new_or_empty: an empty page is set all-visible and all-frozen.
        if not page.all_visible:
            be.mark_buffer_dirty(buf, wal_logged=True)
            vm.set_bits()
            vac.vm_new_visible_pages += 1
            vac.vm_new_visible_frozen_pages += 1
        be.release_buffer(buf)
        return True, 0
    allvis_vm = bool(blk_info & VAC_BLK_ALL_VISIBLE_ACCORDING_TO_VM)
    ndeleted = page.ndead
    # A HOT-updated dead tuple is pruned to a redirect: removed, but no LP_DEAD item.
    lpdead = page.ndead - page.nhot if vac.nindexes > 0 else 0
    vac.tuples_deleted += ndeleted
    vac.live_tuples += page.nlive
    if page.nlive > 0:
        vac.nonempty_pages = block + 1
    if lpdead:
        vac.lpdead_item_pages += 1
        vac.lpdead_items += lpdead
        vac.dead_items.add(block, page.lpdead_offsets)
    all_visible = lpdead == 0
    freeze = page.all_frozen or vac.aggressive or eager
    all_frozen = all_visible and freeze
    froze = freeze and not page.all_frozen and page.nlive > 0
    if froze:
        vac.tuples_frozen += page.nlive
        vac.new_frozen_tuple_pages += 1
    wal = ndeleted > 0 or froze
    dirty = take_hint_bits(vac.heap.rel, page) or wal
    vm_page_frozen = False
    if not allvis_vm and all_visible:
        dirty = True
        vm.set_bits()
        vac.vm_new_visible_pages += 1
        if all_frozen:
            vac.vm_new_visible_frozen_pages += 1
            vm_page_frozen = True
    elif allvis_vm and all_frozen and not page.all_frozen:
        dirty = True
        vm.set_bits()
        vac.vm_new_frozen_pages += 1
        vm_page_frozen = True
    if dirty:
        # Hint bits alone are WAL-logged (a full-page image) only with data checksums.
        be.mark_buffer_dirty(buf, wal_logged=wal or data_checksums)
    if eager:
        if vm_page_frozen:
            if vac.eager_scan_remaining_successes > 0:
                vac.eager_scan_remaining_successes -= 1
            if vac.eager_scan_remaining_successes == 0:
                vac.eager_scan_remaining_fails = 0
                vac.next_eager_scan_region_start = InvalidBlockNumber
                vac.eager_scan_max_fails_per_region = 0
        elif vac.eager_scan_remaining_fails > 0:
            vac.eager_scan_remaining_fails -= 1
    be.release_buffer(buf)
    return vac.nindexes == 0 or not vac.do_index_vacuuming or lpdead == 0, ndeleted


def _next_buffer(
    be: Backend,
    rel: Relation,
    stream: Any | None,
    callback: Callable[[Any, Any], Any],
    strategy: BufferAccessStrategy | None,
) -> tuple[int, Any]:
    """A heap phase's next buffer and its per-buffer data; a negative buffer at the end.

    Streamed, ``read_stream_next_buffer``. Unstreamed (PostgreSQL 16), the phase makes the same
    block choice itself, synchronously: the stream's ``callback`` is called directly (it returns
    ``(block, data)`` or ``InvalidBlockNumber``) and the block is read with one
    ``ReadBufferExtended`` with the VACUUM's strategy. Phases I and III take their heap pages so.
    """
    if stream is not None:
        buf, data = stream.next_buffer_with_data()
        return buf, data
    nxt = callback(None, None)
    if nxt == InvalidBlockNumber:
        return -1, None
    block, data = nxt
    return be.read_buffer(rel, block, ForkNumber.MAIN, strategy), data


def _lazy_scan_heap(
    ctx: ScanContext,
    vac: _LVRelState,
    streamed: bool,
    opts: IndexVacuumOptions,
    indexes: list[Relation],
    dead_items_max: int | None,
    data_checksums: bool,
) -> None:
    """``lazy_scan_heap`` (phase I, with the phase II/III rounds it triggers).

    The failsafe (``_lazy_check_wraparound_failsafe``) is checked every
    ``FAILSAFE_EVERY_PAGES`` scanned pages and inside each round of index vacuuming. Once it has
    engaged, PostgreSQL 18 (18.6 has it) and the development branch call
    ``read_stream_clear_strategy`` on the phase I stream before its next
    ``read_stream_next_buffer`` (once: ``strategy_cleared``), so the rest of phase I reads
    without the ring; 19beta1 does not, and its stream keeps reading through the ring it began
    with although ``vacrel->bstrategy`` is gone. Unstreamed (PostgreSQL 16), each page is read
    with ``vacrel->bstrategy``, so the ring goes with the failsafe.
    """
    from .. import begin_stream

    be = ctx.backend
    rel = vac.rel
    cb_vm = VMBuffer(be, rel, vac.heap.vm_flags)  # next_unskippable_vmbuffer
    vm = VMBuffer(be, rel, vac.heap.vm_flags)  # the consumer's vmbuffer
    next_fsm = 0
    blkno = 0
    strategy_cleared = False
    clears_strategy = not (ctx.version_at_least("19") and not ctx.version_at_least("20devel"))

    def callback(stream: Any, private: Any) -> Any:
        return _next_block(vac, cb_vm)

    # Any: the stream of the instance's version (18's gains clear_strategy with the stream models).
    stream: Any = None
    if streamed:
        stream = begin_stream(
            be,
            rel,
            callback,
            None,
            flags=READ_STREAM_MAINTENANCE,
            strategy=vac.bstrategy,
            per_buffer_data=True,
        )
        ctx.track_stream(stream)
    while True:
        vacuum_delay_point(be)
        if vac.scanned_pages > 0 and vac.scanned_pages % FAILSAFE_EVERY_PAGES == 0:
            _lazy_check_wraparound_failsafe(ctx, vac)
        if (
            dead_items_max is not None
            and vac.dead_items.num_items > 0
            and vac.dead_items.num_items > dead_items_max
        ):
            vm.release()
            vac.consider_bypass = False
            _lazy_vacuum(ctx, vac, streamed, opts, indexes)
            fsm_vacuum_range(be, rel, next_fsm, blkno + 1)
            next_fsm = blkno
        if clears_strategy and vac.failsafe_active and not strategy_cleared:
            if stream is not None:
                stream.clear_strategy()  # read_stream_clear_strategy (18, 20devel)
            strategy_cleared = True
        buf, blk_info = _next_buffer(be, rel, stream, callback, vac.bstrategy)
        if buf < 0:
            break
        blkno = be.buffer_block(buf)
        record_now, ndeleted = _scan_heap_page(ctx, vac, buf, blkno, blk_info, vm, data_checksums)
        if record_now:
            record_free_space(be, rel, blkno)
            if vac.nindexes == 0 and ndeleted > 0 and blkno - next_fsm >= VACUUM_FSM_EVERY_PAGES:
                fsm_vacuum_range(be, rel, next_fsm, blkno)
                next_fsm = blkno
    vm.release()
    if stream is not None:
        stream.end()
    cb_vm.release()
    if vac.dead_items.num_items > 0:
        _lazy_vacuum(ctx, vac, streamed, opts, indexes)
    if vac.rel_pages > next_fsm:
        fsm_vacuum_range(be, rel, next_fsm, vac.rel_pages)
    if vac.nindexes > 0 and vac.do_index_cleanup:
        for idx in indexes:
            vac.indstats[idx.name] = index_vacuumcleanup(
                ctx, idx, vac.indstats.get(idx.name), vac.bstrategy, streamed, opts
            )


def _lazy_vacuum(
    ctx: ScanContext,
    vac: _LVRelState,
    streamed: bool,
    opts: IndexVacuumOptions,
    indexes: list[Relation],
) -> None:
    """``lazy_vacuum``: bypass decision, then every index's bulk delete and phase III."""
    if vac.nindexes == 0:
        vac.dead_items.reset()
        return
    if not vac.do_index_vacuuming:
        vac.dead_items.reset()
        return
    bypass = False
    if vac.consider_bypass and vac.rel_pages > 0:
        bypass = vac.lpdead_item_pages < vac.rel_pages * BYPASS_THRESHOLD_PAGES
    if bypass:
        vac.do_index_vacuuming = False
        vac.bypassed = True
        vac.lp_dead_removed = False
    elif _lazy_vacuum_all_indexes(ctx, vac, streamed, opts, indexes):
        _lazy_vacuum_heap_rel(ctx, vac, streamed)
    # else: the failsafe engaged during index vacuuming; no phase III from now on.
    vac.dead_items.reset()


def _lazy_vacuum_all_indexes(
    ctx: ScanContext,
    vac: _LVRelState,
    streamed: bool,
    opts: IndexVacuumOptions,
    indexes: list[Relation],
) -> bool:
    """``lazy_vacuum_all_indexes``: False when the failsafe ended the round early."""
    if _lazy_check_wraparound_failsafe(ctx, vac):
        return False  # wraparound emergency: don't even start an index scan
    allindexes = True
    for idx in indexes:
        # lazy_vacuum_one_index: ivinfo.strategy = vacrel->bstrategy
        vac.indstats[idx.name] = index_bulkdelete(
            ctx, idx, vac.dead_items, vac.indstats.get(idx.name), vac.bstrategy, streamed, opts
        )
        if _lazy_check_wraparound_failsafe(ctx, vac):
            allindexes = False  # end the current index scan
            break
    vac.num_index_scans += 1
    return allindexes


def _lazy_vacuum_heap_rel(ctx: ScanContext, vac: _LVRelState, streamed: bool) -> None:
    """``lazy_vacuum_heap_rel`` (phase III): every block with dead items, ascending."""
    from .. import begin_stream

    be = ctx.backend
    rel = vac.rel
    blocks = vac.dead_items.blocks()
    it = iter(blocks)
    vm = VMBuffer(be, rel, vac.heap.vm_flags)

    def callback(stream: Any, private: Any) -> Any:
        b = next(it, None)
        return InvalidBlockNumber if b is None else (b, b)

    stream = None
    if streamed:
        stream = begin_stream(
            be,
            rel,
            callback,
            None,
            flags=READ_STREAM_MAINTENANCE | READ_STREAM_USE_BATCHING,
            strategy=vac.bstrategy,
            per_buffer_data=True,
        )
        ctx.track_stream(stream)
    while True:
        vacuum_delay_point(be)
        buf, _ = _next_buffer(be, rel, stream, callback, vac.bstrategy)
        if buf < 0:
            break
        block = be.buffer_block(buf)
        vm.pin(block)
        page = vac.heap.page(block)
        _visit(ctx, vac, "phase3", block, page.nlive + page.ndead)
        be.mark_buffer_dirty(buf, wal_logged=True)
        # heap_page_is_all_visible: with the LP_DEAD items gone the page is all-visible.
        vm.set_bits()
        vac.vm_new_visible_pages += 1
        if page.nlive == 0 or vac.aggressive:
            vac.vm_new_visible_frozen_pages += 1
        be.release_buffer(buf)
        record_free_space(be, rel, block)
        vac.phase3_pages += 1
    if stream is not None:
        stream.end()
    vm.release()


def _page_has_used_items(vac: _LVRelState, page: HeapPage) -> bool:
    """After VACUUM: does the page still hold any used line pointer?"""
    if page.nlive > 0:
        return True
    return page.ndead > 0 and not vac.lp_dead_removed and vac.nindexes > 0


def _should_attempt_truncation(vac: _LVRelState) -> bool:
    """``should_attempt_truncation``."""
    if not vac.do_rel_truncate or vac.failsafe_active:
        return False
    freeable = vac.rel_pages - vac.nonempty_pages
    return freeable > 0 and (
        freeable >= REL_TRUNCATE_MINIMUM or freeable >= vac.rel_pages // REL_TRUNCATE_FRACTION
    )


def _count_nondeletable_pages(ctx: ScanContext, vac: _LVRelState) -> int:
    """``count_nondeletable_pages``: backwards from the end, one read per block, with advice."""
    be = ctx.backend
    rel = vac.rel
    blkno = vac.rel_pages
    prefetched_until = InvalidBlockNumber
    while blkno > vac.nonempty_pages:
        be.check_for_interrupts()
        blkno -= 1
        if prefetched_until > blkno:
            start = blkno & ~(PREFETCH_SIZE - 1)
            for p in range(start, blkno + 1):
                be.prefetch_buffer(rel, ForkNumber.MAIN, p)
            prefetched_until = start
        buf = be.read_buffer(rel, blkno, ForkNumber.MAIN, vac.bstrategy)
        page = vac.heap.page(blkno)
        _visit(ctx, vac, "truncate", blkno, page.nlive + page.ndead)
        used = _page_has_used_items(vac, page)
        be.release_buffer(buf)
        if used:
            return blkno + 1
    return vac.nonempty_pages


def _lazy_truncate_heap(ctx: ScanContext, vac: _LVRelState) -> None:
    """``lazy_truncate_heap``: one pass (no lock waiters in the model)."""
    be = ctx.backend
    rel = vac.rel
    orig = vac.rel_pages
    if rel.nblocks(ForkNumber.MAIN) != orig:
        return
    new_pages = _count_nondeletable_pages(ctx, vac)
    if new_pages >= orig:
        return
    # RelationTruncate: drop the removed blocks' buffers, then shrink the maps and the heap.
    truncate_maps(be, rel, new_pages)
    be.instance.pool.drop_relation_buffers(rel, ForkNumber.MAIN, new_pages)
    rel.truncate(ForkNumber.MAIN, new_pages)
    vac.removed_pages += orig - new_pages
    vac.rel_pages = new_pages


@register_scan(
    "vacuum",
    streamed_since="18",
    models="heap_vacuum_rel → lazy_scan_heap, lazy_vacuum, lazy_vacuum_heap_rel, lazy_truncate_heap "
    "(vacuumlazy.c) with the index AMs' ambulkdelete/amvacuumcleanup",
    description="VACUUM of a table and its indexes: streamed = the version's code (18: phase I, phase III, "
    "btree and GiST streamed; 19 and 20devel: hash bucket pages too), with the wraparound failsafe "
    "(18 and 20devel clear the phase I stream's ring, 19beta1 keeps it); "
    "unstreamed = PostgreSQL 16 (every page one ReadBuffer)",
    params=(
        ScanParam("disable_page_skipping", bool, False, "DISABLE_PAGE_SKIPPING (aggressive, no VM skipping)"),
        ScanParam("freeze", bool, False, "FREEZE: an aggressive VACUUM"),
        ScanParam("index_cleanup", str, "auto", "INDEX_CLEANUP", choices=_INDEX_CLEANUP),
        ScanParam("truncate", bool, True, "TRUNCATE (vacuum_truncate)"),
        ScanParam(
            "buffer_usage_limit",
            int,
            None,
            "BUFFER_USAGE_LIMIT in kB (0 = no ring; default vacuum_buffer_usage_limit)",
            minimum=0,
            maximum=16 * 1024 * 1024,
        ),
        ScanParam(
            "eager_first_region_end",
            int,
            None,
            "enable eager scanning with this end of the first region (the random draw, 0..4095)",
            minimum=0,
            maximum=EAGER_SCAN_REGION_SIZE - 1,
        ),
        ScanParam(
            "max_eager_freeze_failure_rate",
            float,
            0.03,
            "vacuum_max_eager_freeze_failure_rate",
            minimum=0.0,
            maximum=1.0,
        ),
        ScanParam(
            "dead_items_max",
            int,
            None,
            "dead TIDs the store holds before a round of index and heap vacuuming (maintenance_work_mem)",
            minimum=1,
        ),
        ScanParam(
            "hash_stream",
            bool,
            None,
            "stream hash bucket pages (default: as the version does, off in 18, on from 19)",
        ),
        ScanParam(
            "failsafe_at_check",
            int,
            None,
            "the wraparound failsafe engages at this evaluation of lazy_check_wraparound_failsafe "
            "(1 = the precheck before phase I; then every 4 GB of scanned pages and before and after "
            "each index's bulk delete; default: never)",
            minimum=1,
        ),
        ScanParam(
            "hash_metapage_cached", bool, False, "the backend has the hash metapage cached (read at the end)"
        ),
        ScanParam("data_checksums", bool, True, "data checksums on: hint-bit changes are WAL-logged"),
    ),
)
def vacuum(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    disable_page_skipping: bool = False,
    freeze: bool = False,
    index_cleanup: str = "auto",
    truncate: bool = True,
    buffer_usage_limit: int | None = None,
    eager_first_region_end: int | None = None,
    max_eager_freeze_failure_rate: float = 0.03,
    dead_items_max: int | None = None,
    hash_stream: bool | None = None,
    failsafe_at_check: int | None = None,
    hash_metapage_cached: bool = False,
    data_checksums: bool = True,
) -> dict[str, Any]:
    be = ctx.backend
    strategy = vacuum_strategy(be, buffer_usage_limit)
    if hash_stream is None:
        hash_stream = ctx.version_at_least("19")  # hashbulkdelete streams its buckets from 19
    indexes = table_indexes(ctx.instance, rel)
    vac = _LVRelState(
        rel=rel,
        heap=HeapView(rel),
        rel_pages=rel.nblocks(ForkNumber.MAIN),
        aggressive=freeze or disable_page_skipping,
        skipwithvm=not disable_page_skipping,
        nindexes=len(indexes),
        do_index_vacuuming=index_cleanup != "off",
        do_index_cleanup=index_cleanup != "off",
        do_rel_truncate=truncate,
        consider_bypass=index_cleanup == "auto",
        bstrategy=strategy,
        failsafe_at_check=failsafe_at_check,
    )
    opts = IndexVacuumOptions(
        hash_stream=hash_stream,
        hash_metapage_cached=hash_metapage_cached,
        streams_of_19=ctx.version_at_least("19"),  # GIN and BRIN cleanup, bloom's passes
    )
    orig_pages = vac.rel_pages
    begin_vacuum_cost(be)
    _eager_scan_setup(ctx, vac, eager_first_region_end, max_eager_freeze_failure_rate)
    # heap_vacuum_rel: a failsafe precheck before dead_items_alloc and lazy_scan_heap.
    _lazy_check_wraparound_failsafe(ctx, vac)
    _lazy_scan_heap(ctx, vac, streamed, opts, indexes, dead_items_max, data_checksums)
    if vac.nindexes > 0 and not vac.do_index_vacuuming:
        vac.lp_dead_removed = False
    if _should_attempt_truncation(vac):
        _lazy_truncate_heap(ctx, vac)
    visibilitymap_count(be, rel, vac.heap.vm_counts, vac.rel_pages)
    end_vacuum_cost(be)
    out = {
        "rel_pages": orig_pages,
        "scanned_pages": vac.scanned_pages,
        "skipped_pages": orig_pages - vac.scanned_pages,
        "eager_scanned_pages": vac.eager_scanned_pages,
        "tuples_deleted": vac.tuples_deleted,
        "tuples_frozen": vac.tuples_frozen,
        "live_tuples": vac.live_tuples,
        "lpdead_items": vac.lpdead_items,
        "lpdead_item_pages": vac.lpdead_item_pages,
        "nonempty_pages": vac.nonempty_pages,
        "vm_new_visible_pages": vac.vm_new_visible_pages,
        "vm_new_visible_frozen_pages": vac.vm_new_visible_frozen_pages,
        "vm_new_frozen_pages": vac.vm_new_frozen_pages,
        "skipped_all_visible": vac.skippedallvis,
        "num_index_scans": vac.num_index_scans,
        "index_vacuum_bypassed": vac.bypassed,
        "phase3_pages": vac.phase3_pages,
        "removed_pages": vac.removed_pages,
        "new_rel_pages": vac.rel_pages,
        "indexes": {n: (s.as_dict() if s is not None else None) for n, s in sorted(vac.indstats.items())},
        "pages_by_phase": dict(sorted(vac.visits.items())),
    }
    if failsafe_at_check is not None:
        # VERBOSE says "index scan bypassed by failsafe"; asked about only when it may engage.
        out["failsafe"] = vac.failsafe_active
    return out
