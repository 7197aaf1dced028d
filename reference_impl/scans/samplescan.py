"""TABLESAMPLE scans: SYSTEM, BERNOULLI, SYSTEM_ROWS, SYSTEM_TIME (``nodeSamplescan.c``).

A sample scan is a heap scan whose *block order* belongs to the sampling method:

* SYSTEM (``system.c``) chooses blocks whose hash with the seed falls below a cutoff: ascending,
  with gaps;
* BERNOULLI (``bernoulli.c``) chooses tuples, not blocks, so it reads every block in
  sequential-scan order, from the synchronized-scan location on a large table;
* SYSTEM_ROWS and SYSTEM_TIME (``tsm_system_rows.c``, ``tsm_system_time.c``) walk every block in a
  seeded stride order ``first + k·step (mod nblocks)`` and stop when the scan node has returned
  enough rows, or when enough time has passed since the first block request.

Which blocks and tuples are chosen is bit-exact (``reference_impl.sampling``): the seed of
``REPEATABLE(x)`` is ``hashfloat8(x)``; SYSTEM_ROWS, SYSTEM_TIME and an unseeded SYSTEM or
BERNOULLI draw theirs from the backend's PRNG, so here they take it as the ``seed`` parameter.

The scan's switches come from the method (``sample_method_switches``): a BULKREAD strategy iff
``use_bulkread`` (SYSTEM: percentage ≥ 1) *and* the table is larger than ``NBuffers / 4``;
synchronized scanning only for BERNOULLI (a method without ``NextSampleBlock``) on a large table.

**Unstreamed (PostgreSQL 18).** ``heapam_scan_sample_next_block`` releases the previous buffer,
asks the method for the next block and reads it with ``ReadBufferExtended`` and the strategy: one
synchronous one-block read per miss, no look-ahead. The slot is cleared when a page's tuples are
exhausted, so between pages only the scan buffer is pinned.

**Streamed (the sample-scan thread's patch).** The method's ``NextSampleBlock`` becomes the
callback of a read stream created with the scan's strategy (BERNOULLI: the sequential scan's
callback, with its sync-scan reports and start block). Flags: ``SEQUENTIAL | USE_BATCHING`` for
BERNOULLI, ``DEFAULT | USE_BATCHING`` for the block-choosing methods (the patch text is not in
the thread; this choice only changes read-ahead advice under ``io_method=sync`` with buffered
I/O). Two consequences the thread discusses are reproduced:

* SYSTEM_ROWS checks the scan node's returned-row count in the callback, i.e. at look-ahead time,
  so blocks selected before the consumer reached the count are still read and pinned, and the
  consumer walks through them returning nothing ("a small number of unused speculative
  reads"). The answer counts only the pages consumed while rows were still wanted;
  ``ScanContext.notes["speculative_pages"]`` counts the others. A ``LIMIT`` stops the consumer
  and the stream's end drains what was queued (read, not consumed).
* SYSTEM_TIME checks the clock in the callback too: "The time limit is checked while selecting
  blocks. As blocks can be selected and read ahead, any blocks already queued when the limit
  expires are still processed." The answer reports the deadline, the pages consumed after it
  and the overshoot on the virtual clock; the stream's look-ahead when the limit was found
  expired is ``queued_at_expiry``.

Answers (equal for both variants, except SYSTEM_TIME whose block count depends on time):
``rows``, ``blocks`` (pages that were sampled, in visit order), ``tid_digest`` (an
order-independent digest of the returned TIDs), ``nblocks`` (the size the scan saw), ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..read_stream import READ_STREAM_DEFAULT, READ_STREAM_SEQUENTIAL, READ_STREAM_USE_BATCHING
from ..sampling import (
    SampleScanSwitches,
    SystemRowsSampler,
    SystemTimeSampler,
    bernoulli_cutoff,
    bernoulli_tuple_selected,
    hashfloat8,
    sample_method_switches,
    system_sample_block_chunks,
)
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._heapfetch import TidDigest
from .base import ScanContext, ScanParam, register_scan
from .heapscan import HeapScan

__all__ = [
    "tablesample_system",
    "tablesample_bernoulli",
    "tablesample_system_rows",
    "tablesample_system_time",
    "SampleHeapScan",
    "system_time_deadline",
]

_U32 = 0xFFFFFFFF


def system_time_deadline(start_us: int, millis: float) -> int:
    """The first virtual-clock microsecond at which SYSTEM_TIME's limit counts as expired.

    ``tsm_system_time`` stops when ``elapsed_ms >= millis`` with ``elapsed_ms`` a double.
    """
    d = math.ceil(millis * 1000.0)
    while d > 0 and (d - 1) / 1000.0 >= millis:
        d -= 1
    while d / 1000.0 < millis:
        d += 1
    return start_us + d


class _SystemBlocks:
    """``system_nextsampleblock``: selected blocks ascending, decided lazily chunk by chunk."""

    def __init__(self, percent: float, seed: int) -> None:
        self.percent = percent
        self.seed = seed
        self._it: Iterator[int] | None = None

    def _blocks(self, nblocks: int) -> Iterator[int]:
        for chunk in system_sample_block_chunks(nblocks, self.percent, self.seed):
            yield from chunk.tolist()

    def __call__(self, nblocks: int) -> int:
        if self._it is None:
            self._it = self._blocks(nblocks)
        b = next(self._it, None)
        if b is None:
            self._it = None  # sampler->nextblock = 0: a rescan starts again
            return InvalidBlockNumber
        return b


class SampleHeapScan(HeapScan):
    """A heap scan of ``SO_TYPE_SAMPLESCAN`` (``heap_beginscan`` via ``table_beginscan_sampling``)
    whose block source is the method's ``NextSampleBlock`` (``heapam_scan_sample_next_block``).

    ``next_block(nblocks)`` is ``NextSampleBlock``; ``None`` means the method has none (BERNOULLI)
    and the scan walks the table sequentially from its start block, wrapping, with sync reports.
    """

    def __init__(
        self,
        ctx: ScanContext,
        rel: Relation,
        *,
        streamed: bool,
        next_block: Callable[[int], int] | None,
        use_bulkread: bool,
        allow_sync: bool,
        pagemode: bool = True,
        on_block: Callable[[Any, int], None] | None = None,
    ) -> None:
        self._next_sample_block = next_block
        self._on_block = on_block
        flags = READ_STREAM_USE_BATCHING | (
            READ_STREAM_SEQUENTIAL if next_block is None else READ_STREAM_DEFAULT
        )
        super().__init__(
            ctx,
            rel,
            streamed=streamed,
            allow_strat=use_bulkread,
            allow_sync=allow_sync,
            use_slot=True,
            stream_flags=flags,
            # heapam_scan_sample_next_block: page-at-a-time visibility only in page mode.
            sets_hints=pagemode,
            read_only=True,  # nodeSamplescan: ScanRelIsReadOnly
        )

    def _callback(self, stream: Any, private: Any) -> int:
        if self.nblocks == 0:
            return InvalidBlockNumber
        if self._next_sample_block is None:
            block = super()._callback(stream, private)
        else:
            block = self._next_sample_block(self.nblocks)
        if self._on_block is not None:
            self._on_block(stream, block)
        return block


def _begin_sample_scan(
    ctx: ScanContext,
    rel: Relation,
    switches: SampleScanSwitches,
    *,
    streamed: bool,
    next_block: Callable[[int], int] | None,
    on_block: Callable[[Any, int], None] | None = None,
) -> SampleHeapScan:
    """``table_beginscan_sampling``: a sample scan with its method's switches.

    ``BeginSampleScan`` chose them: whether the scan may use the BULKREAD strategy and
    synchronized scanning (each still only on a large enough table, ``HeapScan`` decides).
    """
    return SampleHeapScan(
        ctx,
        rel,
        streamed=streamed,
        next_block=next_block,
        use_bulkread=switches.use_bulkread,
        allow_sync=switches.allow_sync,
        pagemode=switches.use_pagemode,
        on_block=on_block,
    )


def _every_live(block: int, maxoff: int, live: np.ndarray) -> np.ndarray:
    """The tuple choice of SYSTEM, SYSTEM_ROWS and SYSTEM_TIME: every live tuple of a chosen block."""
    return live


def _page_tuples(rel: Relation, block: int) -> tuple[int, np.ndarray]:
    """(max offset, live offsets) of a page; a relation without content has one tuple per page."""
    content = rel.content
    if content is None:
        return 1, np.ones(1, dtype=np.uint16)
    page = content.page(ForkNumber.MAIN, block)
    return page.max_offset, page.live_offsets


def _run(
    ctx: ScanContext,
    rel: Relation,
    scan: SampleHeapScan,
    *,
    choose: Callable[[int, int, np.ndarray], np.ndarray],
    pagemode: bool,
    limit: int | None,
    donetuples: list[int] | None = None,
    exhausted: Callable[[int], bool] | None = None,
    on_visit: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The page loop shared by every method (``tablesample_getnext``).

    ``donetuples`` is the scan node's returned-row counter as the method sees it (updated after
    every row); ``exhausted(n)`` is SYSTEM_ROWS' "enough rows" test of ``NextSampleTuple``.
    """
    digest = TidDigest()
    blocks: list[int] = []
    rows = 0
    speculative = 0
    stopped = False
    for block in scan.pages():
        ctx.visit(block)
        if on_visit is not None:
            on_visit(block)
        maxoff, live = _page_tuples(rel, block)
        if exhausted is not None and exhausted(rows):
            # SYSTEM_ROWS with a stream: a block queued before the row count was reached.
            speculative += 1
            ctx.process_page(maxoff if pagemode else 0)
            continue
        taken = choose(block, maxoff, live)
        ctx.process_page(maxoff if pagemode else len(taken))
        if exhausted is not None or limit is not None:
            n = 0
            for _ in range(taken.size):
                if exhausted is not None and exhausted(rows + n):
                    break
                n += 1
                if limit is not None and rows + n >= limit:
                    break
            taken = taken[:n]
        blocks.append(block)
        if taken.size:
            scan.store_tuple()
            digest.add(block, taken)
            rows += int(taken.size)
            if donetuples is not None:
                donetuples[0] = rows
        if limit is not None and rows >= limit:
            stopped = True
            break
        scan.clear_slot()  # the page's tuples are exhausted: ExecClearTuple
    scan.end()
    scan.clear_slot()
    ctx.notes["speculative_pages"] = speculative
    return {
        "rows": rows,
        "blocks": blocks,
        "tid_digest": digest.value,
        "nblocks": scan.nblocks,
        "limited": stopped,
    }


def _seed_of(repeatable_seed: float | None, seed: int) -> int:
    if repeatable_seed is not None:
        return hashfloat8(repeatable_seed)
    return seed


_SEED = ScanParam(
    "seed", int, 0, "PRNG seed when REPEATABLE is not given (the backend's draw)", minimum=0, maximum=_U32
)
_REPEATABLE = ScanParam("repeatable_seed", float, None, "REPEATABLE(x): the seed is hashfloat8(x)")
_LIMIT = ScanParam("limit", int, None, "stop after this many rows (LIMIT)", minimum=0)
_PERCENT = ScanParam(
    "sample_percent", float, 1.0, "sampling percentage (real, 0..100)", minimum=0.0, maximum=100.0
)


@register_scan(
    "tablesample_system",
    models="SampleNext (nodeSamplescan.c) → heapam_scan_sample_next_block/_tuple with system_nextsampleblock (system.c)",
    description="TABLESAMPLE SYSTEM(p): unstreamed = PostgreSQL 18 (one ReadBufferExtended per sampled "
    "block); streamed = the sample-scan thread's patch (the sampled blocks as the stream's callback)",
    params=(_PERCENT, _REPEATABLE, _SEED, _LIMIT),
)
def tablesample_system(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    sample_percent: float = 1.0,
    repeatable_seed: float | None = None,
    seed: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    s = _seed_of(repeatable_seed, seed)
    sw = sample_method_switches("system", sample_percent)
    scan = _begin_sample_scan(ctx, rel, sw, streamed=streamed, next_block=_SystemBlocks(sample_percent, s))
    out = _run(ctx, rel, scan, choose=_every_live, pagemode=sw.use_pagemode, limit=limit)
    out["seed"] = s
    return out


@register_scan(
    "tablesample_bernoulli",
    models="SampleNext (nodeSamplescan.c) → heapam_scan_sample_next_block (sequential, sync scan) with "
    "bernoulli_nextsampletuple (bernoulli.c)",
    description="TABLESAMPLE BERNOULLI(p): every block in sequential-scan order; unstreamed = PostgreSQL 18; "
    "streamed = the patch (the sequential scan's stream callback, sync start)",
    params=(
        _PERCENT,
        _REPEATABLE,
        _SEED,
        _LIMIT,
        ScanParam("sync_location", int, None, "preset the shared sync-scan location of the table", minimum=0),
    ),
)
def tablesample_bernoulli(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    sample_percent: float = 1.0,
    repeatable_seed: float | None = None,
    seed: int = 0,
    limit: int | None = None,
    sync_location: int | None = None,
) -> dict[str, Any]:
    from .heapscan import sync_scan_table

    s = _seed_of(repeatable_seed, seed)
    sw = sample_method_switches("bernoulli", sample_percent)
    cutoff = bernoulli_cutoff(sample_percent)
    if sync_location is not None:
        sync_scan_table(ctx.instance).report_location(rel.relid, sync_location - sync_location % 16)
    scan = _begin_sample_scan(ctx, rel, sw, streamed=streamed, next_block=None)

    def choose(block: int, maxoff: int, live: np.ndarray) -> np.ndarray:
        if cutoff > _U32:
            return live
        cand = bernoulli_tuple_selected(block, maxoff, s, cutoff)
        return cand[np.isin(cand, live, assume_unique=True)]

    out = _run(ctx, rel, scan, choose=choose, pagemode=sw.use_pagemode, limit=limit)
    out["seed"] = s
    out["start_block"] = scan.startblock
    return out


@register_scan(
    "tablesample_system_rows",
    models="SampleNext (nodeSamplescan.c) → system_rows_nextsampleblock/_nextsampletuple (tsm_system_rows.c)",
    description="TABLESAMPLE SYSTEM_ROWS(n): stride order until n rows were returned; unstreamed = "
    "PostgreSQL 18; streamed = the patch (the row count is checked at look-ahead time)",
    params=(
        ScanParam("rows", int, 100, "rows to return", minimum=0),
        _SEED,
        _LIMIT,
    ),
)
def tablesample_system_rows(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    rows: int = 100,
    seed: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    sampler = SystemRowsSampler(seed)
    sampler.begin_scan(rows)
    sw = sample_method_switches("system_rows")
    done = [0]  # node->donetuples as the callback sees it

    def next_block(nblocks: int) -> int:
        return sampler.next_block(nblocks, done[0])

    scan = _begin_sample_scan(ctx, rel, sw, streamed=streamed, next_block=next_block)

    out = _run(
        ctx,
        rel,
        scan,
        choose=_every_live,
        pagemode=sw.use_pagemode,
        limit=limit,
        donetuples=done,
        exhausted=sampler.tuples_exhausted,
    )
    out["seed"] = seed
    plan = sampler.plan
    out["firstblock"], out["step"] = (plan.firstblock, plan.step) if plan.step else (None, None)
    return out


@register_scan(
    "tablesample_system_time",
    models="SampleNext (nodeSamplescan.c) → system_time_nextsampleblock (tsm_system_time.c)",
    description="TABLESAMPLE SYSTEM_TIME(ms): stride order until ms have passed on the virtual clock; "
    "unstreamed = PostgreSQL 18; streamed = the patch (queued blocks are processed after the deadline)",
    params=(
        ScanParam("time_ms", float, 100.0, "time limit in milliseconds", minimum=0.0),
        _SEED,
        _LIMIT,
    ),
)
def tablesample_system_time(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    time_ms: float = 100.0,
    seed: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    clock = ctx.backend.clock
    sampler = SystemTimeSampler(seed, lambda: clock.now)
    sampler.begin_scan(time_ms)
    sw = sample_method_switches("system_time")
    state: dict[str, Any] = {"start": None, "expired_at": None, "queued": 0, "after": 0, "selected": 0}

    def next_block(nblocks: int) -> int:
        if sampler.plan.scan_starting:
            state["start"] = clock.now
        return sampler.next_block(nblocks)

    def on_block(stream: Any, block: int) -> None:
        if block != InvalidBlockNumber:
            state["selected"] += 1
            return
        plan = sampler.plan
        if state["expired_at"] is None and plan.step and plan.doneblocks <= plan.nblocks:
            state["expired_at"] = clock.now
            if stream is not None:
                state["queued"] = stream.pinned_buffers + stream.pending_read_nblocks

    scan = _begin_sample_scan(ctx, rel, sw, streamed=streamed, next_block=next_block, on_block=on_block)

    def on_visit(block: int) -> None:
        if state["start"] is not None and clock.now >= system_time_deadline(state["start"], time_ms):
            state["after"] += 1

    out = _run(
        ctx,
        rel,
        scan,
        choose=_every_live,
        pagemode=sw.use_pagemode,
        limit=limit,
        on_visit=on_visit,
    )
    end = clock.now
    start = state["start"]
    deadline = system_time_deadline(start, time_ms) if start is not None else None
    out.update(
        seed=seed,
        start_us=start,
        deadline_us=deadline,
        end_us=end,
        expired=state["expired_at"] is not None,
        expired_at_us=state["expired_at"],
        overshoot_us=max(0, end - deadline)
        if deadline is not None and state["expired_at"] is not None
        else 0,
        pages_after_deadline=state["after"],
        queued_at_expiry=state["queued"],
        selected=state["selected"],
    )
    return out
