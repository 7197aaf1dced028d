"""TID range scan: ``SELECT ... WHERE ctid >= '(a,b)' AND ctid <= '(c,d)'`` (``nodeTidrangescan.c``).

``heap_set_tidrange`` clamps the bounds to the relation (lowest TID ``(0,1)``, highest
``(nblocks−1, MaxOffsetNumber)``), turns an empty range into zero blocks, and otherwise installs
``heap_setscanlimits(start = block(min), count = block(max) − block(min) + 1)``. The scan is an
ordinary heap scan restricted to those blocks: no strategy and no synchronized scanning whatever
the table size (``table_beginscan_tidrange``), page mode, and in PostgreSQL 18 the same
``SEQUENTIAL | USE_BATCHING`` stream as a sequential scan (``scans.md`` §2.7), so the pages of the
range are read with the usual ramp 1, 2, 4, … ``io_combine_limit``.

``heap_getnextslot_tidrange`` then filters tuples outside the exact bounds: below the minimum on
the first page it clears the slot and continues; past the maximum on the last page it clears the
slot and reports the end of the scan (forward scans). The executor's slot pins follow
``scans.md`` §2.4, including the ``ExecClearTuple`` of every filtered tuple.

Streamed is PostgreSQL 18; unstreamed reads each block of the range with ``ReadBufferExtended``
as PostgreSQL 16 did.
"""

from __future__ import annotations

from typing import Any

from ..storage.relation import ForkNumber, Relation
from ._heapfetch import TidDigest
from .base import EXPLAIN_IO_PARAM, ScanContext, ScanParam, register_scan
from .heapscan import HeapScan

__all__ = ["tidrangescan", "MAX_OFFSET_NUMBER", "tidrange_limits"]

MAX_OFFSET_NUMBER = 2048  # MaxOffsetNumber for 8 kB pages


def tidrange_limits(
    nblocks: int, mintid: tuple[int, int], maxtid: tuple[int, int]
) -> tuple[int, int, tuple[int, int], tuple[int, int]] | None:
    """``heap_set_tidrange``: (start block, block count, low TID, high TID); ``None`` = unset."""
    if nblocks == 0:
        return None
    highest = (nblocks - 1, MAX_OFFSET_NUMBER)
    lowest = (0, 1)
    if maxtid < highest:
        highest = maxtid
    if mintid > lowest:
        lowest = mintid
    if highest < lowest:
        return 0, 0, lowest, highest
    return lowest[0], highest[0] - lowest[0] + 1, lowest, highest


@register_scan(
    "tidrangescan",
    streamed_since="18",
    models="TidRangeNext (nodeTidrangescan.c) → heap_set_tidrange / heap_getnextslot_tidrange (heapam.c)",
    description="TID range scan: streamed = PostgreSQL 18 (SEQUENTIAL stream over the block range, no "
    "strategy); unstreamed = one ReadBufferExtended per block (PostgreSQL 16)",
    params=(
        ScanParam("start_block", int, 0, "block of the lower ctid bound", minimum=0, maximum=0xFFFFFFFE),
        ScanParam(
            "start_offset", int, 1, "offset of the lower ctid bound", minimum=0, maximum=MAX_OFFSET_NUMBER
        ),
        ScanParam(
            "end_block", int, None, "block of the upper ctid bound (default: no upper bound)", minimum=0
        ),
        ScanParam("end_offset", int, MAX_OFFSET_NUMBER, "offset of the upper ctid bound", minimum=0),
        ScanParam("limit", int, None, "stop after this many tuples (LIMIT)", minimum=0),
        EXPLAIN_IO_PARAM,
    ),
)
def tidrangescan(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    start_block: int = 0,
    start_offset: int = 1,
    end_block: int | None = None,
    end_offset: int = MAX_OFFSET_NUMBER,
    limit: int | None = None,
    explain_io: bool = False,
) -> dict[str, Any]:
    scan = HeapScan(
        ctx,
        rel,
        streamed=streamed,
        allow_strat=False,
        allow_sync=False,
        sets_hints=True,
        read_only=True,  # nodeTidrangescan: ScanRelIsReadOnly
        instrument=ctx.check_explain_io("tidrangescan", explain_io),
    )
    mintid = (start_block, start_offset)
    maxtid = (end_block, end_offset) if end_block is not None else (0xFFFFFFFE, MAX_OFFSET_NUMBER)
    limits = tidrange_limits(scan.nblocks, mintid, maxtid)
    if limits is not None:
        scan.set_scan_limits(limits[0], limits[1])
        low, high = limits[2], limits[3]
    else:
        low, high = mintid, maxtid
    content = rel.content
    digest = TidDigest()
    rows = 0
    blocks: list[int] = []
    done = False
    for block in scan.pages():
        ctx.visit(block)
        # A relation without a content model has one visible tuple per page (heap_page_live).
        page = content.page(ForkNumber.MAIN, block) if content is not None else None
        offsets = [int(o) for o in page.live_offsets] if page is not None else [1]
        ctx.process_page(page.max_offset if page is not None else 1)
        taken: list[int] = []
        for off in offsets:
            tid = (block, off)
            if tid < low:
                scan.clear_slot()
                continue
            if tid > high:
                scan.clear_slot()
                done = True
                break
            scan.store_tuple()
            taken.append(off)
            rows += 1
            if limit is not None and rows >= limit:
                done = True
                break
        if taken:
            blocks.append(block)
            digest.add(block, taken)
        if done:
            break
    if not done:
        scan.clear_slot()  # the scan reported no more tuples
    scan.end()
    scan.clear_slot()
    return {
        "rows": rows,
        "tid_digest": digest.value,
        "blocks": blocks,
        "start_block": limits[0] if limits is not None else None,
        "numblocks": limits[1] if limits is not None else 0,
    }
