"""ANALYZE's block sampling (``acquire_sample_rows``, ``analyze.c``; ``scans.md`` §5).

ANALYZE of one table reads a random sample of ``min(nblocks, targrows)`` blocks, where
``targrows = 300 × statistics target`` (default 100 → 30,000), chosen by Knuth's algorithm S
(``BlockSampler``, ascending), examines every tuple of each sampled page, keeps ``targrows`` live
rows by reservoir sampling (Vitter's algorithms X and Z: ``RowReservoir``), and counts live and
dead rows to estimate the table's totals. Both seeds come from the backend's PRNG in PostgreSQL,
so here they are parameters (``sampler_seed``, ``reservoir_seed``); ``reference_impl.sampling``
reproduces the choices bit for bit for a given seed.

The ring is ANALYZE's strategy: ``GetAccessStrategyWithSize(BAS_VACUUM,
vacuum_buffer_usage_limit)`` (2 MB → 256 buffers; 0 → no strategy), or the command's
``BUFFER_USAGE_LIMIT`` (the ``buffer_usage_limit_kb`` parameter). Reads through it are counted in
context ``vacuum``.

**Streamed (PostgreSQL 18).** The block sampler is the callback of a read stream with flags
``MAINTENANCE | USE_BATCHING`` and the ring: sampled blocks that are consecutive block numbers
share a read as far as the ramp and ``io_combine_limit`` allow; a gap starts a new read. The
consumer (``heapam_scan_analyze_next_block``/``_next_tuple``) share-locks each page, examines it,
and releases the buffer (the slot is cleared too) before asking for the next one.

**Unstreamed (PostgreSQL 16).** One ``ReadBufferExtended`` with the ring per sampled block, plus
the prefetching of that version: a second block sampler with the same seed runs
``maintenance_io_concurrency`` blocks ahead and issues ``PrefetchBuffer`` advice for each (no read;
nothing with direct I/O).

**Then** ``do_analyze_rel`` calls ``visibilitymap_count``, which reads every page of the
visibility-map fork, one page per read without strategy (context ``normal``), to store
``relallvisible``/``relallfrozen``. A table without a VM fork reads nothing there.

Answer (equal for both variants): ``sampled_blocks``, ``blocks_digest``, ``liverows``,
``deadrows``, ``numrows``, ``sample_digest`` (the reservoir's TIDs), ``totalrows`` and
``totaldeadrows`` (the estimates ``acquire_sample_rows`` returns), ``relallvisible``,
``relallfrozen``, ``vm_pages``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..buffers.strategy import BAS_VACUUM, get_access_strategy_with_size
from ..read_stream import READ_STREAM_MAINTENANCE, READ_STREAM_USE_BATCHING
from ..sampling import BlockSampler, RowReservoir, analyze_targrows
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation
from ._heapfetch import TidDigest
from .base import ScanContext, ScanParam, register_scan

__all__ = ["analyze"]


def _page(rel: Relation, block: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(max offset, live offsets, dead offsets); a relation without content has one live tuple."""
    content = rel.content
    if content is None:
        return 1, np.ones(1, dtype=np.uint16), np.empty(0, dtype=np.uint16)
    page = content.page(ForkNumber.MAIN, block)
    return page.max_offset, page.live_offsets, page.dead_offsets


@register_scan(
    "analyze",
    streamed_since="18",
    models="acquire_sample_rows (analyze.c) with BlockSampler/reservoir (sampling.c), "
    "heapam_scan_analyze_next_block/_next_tuple, then visibilitymap_count (visibilitymap.c)",
    description="ANALYZE's sample: streamed = PostgreSQL 18 (block sampler as stream callback, VACUUM ring); "
    "unstreamed = PostgreSQL 16 (ReadBufferExtended per sampled block + PrefetchBuffer advice)",
    params=(
        ScanParam(
            "statistics_target",
            int,
            None,
            "largest per-column statistics target (default: the GUC)",
            minimum=1,
            maximum=10000,
        ),
        ScanParam(
            "sampler_seed",
            int,
            0,
            "seed of the block sampler (the backend's first PRNG draw)",
            minimum=0,
            maximum=0xFFFFFFFF,
        ),
        ScanParam(
            "reservoir_seed",
            int,
            1,
            "seed of the row reservoir (the second draw)",
            minimum=0,
            maximum=0xFFFFFFFF,
        ),
        ScanParam(
            "buffer_usage_limit_kb",
            int,
            None,
            "BUFFER_USAGE_LIMIT in kB (default: vacuum_buffer_usage_limit; 0 = no ring)",
            minimum=0,
            maximum=16777216,
        ),
    ),
)
def analyze(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    statistics_target: int | None = None,
    sampler_seed: int = 0,
    reservoir_seed: int = 1,
    buffer_usage_limit_kb: int | None = None,
) -> dict[str, Any]:
    from .. import begin_stream
    from ..errors import SettingError

    be = ctx.backend
    settings = be.settings
    target = statistics_target if statistics_target is not None else settings.default_statistics_target
    targrows = analyze_targrows(target)
    limit_kb = (
        buffer_usage_limit_kb if buffer_usage_limit_kb is not None else settings.vacuum_buffer_usage_limit
    )
    if 0 < limit_kb < 128:
        raise SettingError(f"BUFFER_USAGE_LIMIT {limit_kb} kB is invalid: allowed 0 or 128 .. 16777216 kB")
    strategy = get_access_strategy_with_size(BAS_VACUUM, limit_kb, settings.nbuffers)
    totalblocks = rel.nblocks(ForkNumber.MAIN)
    bs = BlockSampler(totalblocks, targrows, sampler_seed)
    reservoir = RowReservoir(targrows, reservoir_seed)
    sample: list[tuple[int, int]] = []
    liverows = deadrows = 0
    blocks = TidDigest()
    nsampled = 0

    def examine(block: int) -> None:
        nonlocal liverows, deadrows, nsampled
        ctx.visit(block)
        nsampled += 1
        blocks.add(block, [0])
        maxoff, live, dead = _page(rel, block)
        ctx.process_page(maxoff)
        deadrows += int(dead.size)
        for off in live.tolist():
            liverows += 1
            slot = reservoir.offer()
            if slot is None:
                continue
            if slot == len(sample):
                sample.append((block, off))
            else:
                sample[slot] = (block, off)

    if streamed:

        def callback(stream: Any, private: Any) -> int:
            return bs.next() if bs.has_more() else InvalidBlockNumber

        stream = ctx.track_stream(
            begin_stream(
                be,
                rel,
                callback,
                None,
                flags=READ_STREAM_MAINTENANCE | READ_STREAM_USE_BATCHING,
                strategy=strategy,
            )
        )
        while True:
            be.check_for_interrupts()
            buf = stream.next_buffer()
            if buf < 0:
                break
            examine(be.buffer_block(buf))
            be.release_buffer(buf)
        stream.end()
    else:
        mic = rel.tablespace_mic if rel.tablespace_mic is not None else settings.maintenance_io_concurrency
        prefetch_bs = BlockSampler(totalblocks, targrows, sampler_seed) if mic > 0 else None
        if prefetch_bs is not None:
            for _ in range(mic):
                if not prefetch_bs.has_more():
                    break
                be.prefetch_buffer(rel, ForkNumber.MAIN, prefetch_bs.next())
        while bs.has_more():
            block = bs.next()
            ahead = prefetch_bs.next() if prefetch_bs is not None and prefetch_bs.has_more() else None
            be.check_for_interrupts()
            buf = be.read_buffer(rel, block, ForkNumber.MAIN, strategy)
            if ahead is not None:
                be.prefetch_buffer(rel, ForkNumber.MAIN, ahead)
            examine(block)
            be.release_buffer(buf)

    # visibilitymap_count: every VM page, one read each, no strategy.
    vm_pages = rel.nblocks(ForkNumber.VM) if rel.exists(ForkNumber.VM) else 0
    relallvisible = relallfrozen = 0
    content = rel.content
    for v in range(vm_pages):
        buf = be.read_buffer(rel, v, ForkNumber.VM, None)
        if content is not None:
            vm = content.page(ForkNumber.VM, v)
            relallvisible += vm.all_visible
            relallfrozen += vm.all_frozen
        be.release_buffer(buf)

    digest = TidDigest()
    for b, o in sample:
        digest.add(b, [o])
    if nsampled > 0:
        totalrows = math.floor((liverows / nsampled) * totalblocks + 0.5)
        totaldeadrows = math.floor((deadrows / nsampled) * totalblocks + 0.5)
    else:
        totalrows = totaldeadrows = 0
    if strategy is not None:
        strategy.free()
    return {
        "targrows": targrows,
        "sampled_blocks": nsampled,
        "blocks_digest": blocks.value,
        "liverows": liverows,
        "deadrows": deadrows,
        "numrows": len(sample),
        "sample_digest": digest.value,
        "totalrows": totalrows,
        "totaldeadrows": totaldeadrows,
        "relallvisible": relallvisible,
        "relallfrozen": relallfrozen,
        "vm_pages": vm_pages,
    }
