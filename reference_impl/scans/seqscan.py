"""Sequential scan: ``SELECT count(*) FROM t`` (``nodeSeqscan.c`` over ``heap_getnextslot``).

Streamed, this is PostgreSQL 18's sequential scan; unstreamed, the one-block-at-a-time scan of
PostgreSQL 16. Parameters cover what the fidelity and conformance tests vary: a ``LIMIT`` (the
stream is ended early and its look-ahead drained), several passes with rescans in between
(optionally resizing the table first, to cross the ``NBuffers / 4`` threshold and exercise the
strategy swap), a synchronized-scan start location, and blocks appended while the scan runs.
"""

from __future__ import annotations

from typing import Any

from ..storage.relation import ForkNumber, Relation
from .base import EXPLAIN_IO_PARAM, ScanContext, ScanParam, heap_page_live, register_scan
from .heapscan import HeapScan, sync_scan_table

__all__ = ["seqscan"]


@register_scan(
    "seqscan",
    streamed_since="18",
    models="SeqNext (nodeSeqscan.c) → heap_getnextslot / heapgettup_pagemode (heapam.c)",
    description="heap sequential scan counting visible tuples (SELECT count(*))",
    params=(
        ScanParam("limit", int, None, "stop after this many tuples (LIMIT)", minimum=0),
        ScanParam("passes", int, 1, "scan passes, with heap_rescan between them", minimum=1, maximum=100),
        ScanParam(
            "rescan_nblocks", int, None, "resize the table to this many blocks before each rescan", minimum=0
        ),
        ScanParam("grow_during", int, 0, "blocks appended to the table after the first page", minimum=0),
        ScanParam("sync_location", int, None, "preset the shared sync-scan location of the table", minimum=0),
        ScanParam("slot", bool, True, "executor tuple slot pins (False: heap_getnext callers)"),
        ScanParam(
            "rescan_fix",
            bool,
            None,
            "heap_rescan makes the stream follow the strategy initscan chose (the seed thread's fix, "
            "in no version: off by default, as 18.6, 19 and 20devel servers run)",
        ),
        EXPLAIN_IO_PARAM,
    ),
)
def seqscan(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    limit: int | None = None,
    passes: int = 1,
    rescan_nblocks: int | None = None,
    grow_during: int = 0,
    sync_location: int | None = None,
    slot: bool = True,
    rescan_fix: bool | None = None,
    explain_io: bool = False,
) -> dict[str, Any]:
    if sync_location is not None:
        sync_scan_table(ctx.instance).report_location(rel.relid, sync_location - sync_location % 16)
    scan = HeapScan(
        ctx,
        rel,
        streamed=streamed,
        use_slot=slot,
        rescan_fix=rescan_fix,
        sets_hints=True,
        read_only=True,  # nodeSeqscan: ScanRelIsReadOnly
        instrument=ctx.check_explain_io("seqscan", explain_io),
    )
    rows = 0
    digest = 0
    per_pass: list[int] = []
    grown = False
    # No try/finally: an error aborts the transaction, which drops pins without ending the
    # stream (run_scan calls Backend.abort); only a scan that finishes calls heap_endscan.
    for p in range(passes):
        if p > 0:
            if rescan_nblocks is not None:
                rel.set_nblocks(ForkNumber.MAIN, rescan_nblocks)
            scan.rescan()
            scan.clear_slot()  # ExecReScanSeqScan clears the slot after heap_rescan
        pass_rows = 0
        stopped = False
        content = rel.content
        for block in scan.pages():
            ctx.visit(block)
            if grow_during and not grown:
                rel.extend(ForkNumber.MAIN, grow_during)
                grown = True
            nlive = 1 if content is None else heap_page_live(rel, block)
            ctx.process_page(nlive)
            take = nlive
            if limit is not None:
                take = min(nlive, limit - rows)
            if take > 0:
                if scan.slot_buf != scan.cbuf:
                    scan.store_tuple()
                rows += take
                pass_rows += take
                digest = (digest * 1000003 + block * 131 + take) & 0xFFFFFFFFFFFF
            if limit is not None and rows >= limit:
                stopped = True
                break
        if not stopped:
            scan.clear_slot()  # heap_getnextslot found no more tuples
        per_pass.append(pass_rows)
        if stopped:
            break
    scan.end()
    scan.clear_slot()
    return {"rows": rows, "digest": digest, "rows_per_pass": per_pass, "nblocks_at_start": scan.nblocks}
