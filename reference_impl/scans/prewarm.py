"""pg_prewarm: loading a block range into shared buffers, the OS page cache, or neither.

``pg_prewarm(rel, mode, fork, first_block, last_block)`` (``contrib/pg_prewarm/pg_prewarm.c``) is
the simplest consumer of a read stream there is, which is why the project uses it as the
reference for "what a stream over a plain block range does":

* **'buffer'** pulls ``[first_block, last_block]`` into shared buffers. PostgreSQL 18 streams it:
  a ``BlockRangeReadStreamPrivate`` callback, flags ``MAINTENANCE | FULL | USE_BATCHING`` (no
  ramp-up: the first read is already ``io_combine_limit`` blocks; look-ahead depth from
  ``maintenance_io_concurrency``) and **no strategy**, so the pages stay in the pool whatever the
  relation's size (there is no BULKREAD ring here, unlike a sequential scan). Each buffer is
  released as soon as it is returned. The unstreamed variant is PostgreSQL 16's loop: one
  ``ReadBufferExtended(RBM_NORMAL, no strategy)`` per block, i.e. one one-block read per
  uncached block. The range is fixed when the call starts (``nblocks`` is read once); both
  variants visit exactly the range and answer the number of blocks.

* **'read'** reads each block with ``smgrread`` into a private page: synchronous, one block per
  request, outside the buffer manager. Nothing becomes resident in shared buffers and nothing is
  counted in ``pg_stat_io`` (the storage layer still sees one physical read per block, and the
  OS page cache keeps the data). There is no streamed form in PostgreSQL (a read stream hands
  out buffers; this mode has none), so the scan is registered with the unstreamed variant only.

* **'prefetch'** issues ``PrefetchBuffer`` for each block: ``posix_fadvise(WILLNEED)`` for blocks
  not in the pool, nothing with ``debug_io_direct=data``. No read is issued by the backend, and
  the call returns without waiting. Unstreamed only, for the same reason.

Block-range checks follow the C function: the fork must exist, ``first_block`` and ``last_block``
must lie inside the fork (an empty fork accepts only the defaults and prewarms nothing), and the
answer is the number of blocks handled.
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelUsageError
from ..read_stream import (
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    block_range_read_stream_cb,
)
from ..storage.relation import FORK_NAMES, ForkNumber, Relation, fork_from_name
from .base import ScanContext, ScanParam, register_scan

__all__ = ["pg_prewarm", "pg_prewarm_read", "pg_prewarm_prefetch", "prewarm_range"]

PREWARM_BUFFER_FLAGS = READ_STREAM_MAINTENANCE | READ_STREAM_FULL | READ_STREAM_USE_BATCHING

_RANGE_PARAMS = (
    ScanParam("fork", str, "main", "relation fork to prewarm", choices=tuple(FORK_NAMES.values())),
    ScanParam("first_block", int, None, "first block (default 0)", minimum=0),
    ScanParam("last_block", int, None, "last block, inclusive (default the fork's last block)", minimum=0),
)


def prewarm_range(
    rel: Relation, fork: str | ForkNumber, first_block: int | None, last_block: int | None
) -> tuple[ForkNumber, int, int]:
    """The fork and the inclusive block range ``pg_prewarm`` works on (its argument checks).

    Returns ``(fork, first, last)``; ``last < first`` means nothing to do (an empty fork).
    """
    forknum = fork_from_name(fork)
    if not rel.exists(forknum):
        raise ModelUsageError(
            f'fork "{FORK_NAMES[forknum]}" does not exist for relation {rel.name!r}: '
            f"existing forks are {', '.join(FORK_NAMES[f] for f in rel.forks())}"
        )
    nblocks = rel.nblocks(forknum)
    if first_block is None:
        first = 0
    elif not 0 <= first_block < nblocks:
        raise ModelUsageError(
            f"first_block {first_block} is invalid: starting block number must be between 0 and "
            f"{nblocks - 1} (fork {FORK_NAMES[forknum]} of {rel.name!r} has {nblocks} blocks)"
        )
    else:
        first = first_block
    if last_block is None:
        last = nblocks - 1
    elif not 0 <= last_block < nblocks:
        raise ModelUsageError(
            f"last_block {last_block} is invalid: ending block number must be between 0 and "
            f"{nblocks - 1} (fork {FORK_NAMES[forknum]} of {rel.name!r} has {nblocks} blocks)"
        )
    else:
        last = last_block
    return forknum, first, last


def _answer(blocks_done: int, forknum: ForkNumber, first: int, last: int, **extra: int) -> dict[str, Any]:
    """What every mode answers, in this key order.

    The number of blocks handled (the C function's result), the mode's own counts (``extra``),
    then the fork and the range as checked.
    """
    return {
        "blocks": blocks_done,
        **extra,
        "fork": FORK_NAMES[forknum],
        "first_block": first,
        "last_block": last,
    }


@register_scan(
    "pg_prewarm",
    streamed_since="18",
    models="pg_prewarm(rel, 'buffer', fork, first, last) (contrib/pg_prewarm/pg_prewarm.c)",
    description=(
        "load a block range into shared buffers; streamed = PostgreSQL 18 (MAINTENANCE|FULL|"
        "USE_BATCHING, no strategy), unstreamed = PostgreSQL 16 (one ReadBuffer per block)"
    ),
    params=_RANGE_PARAMS,
)
def pg_prewarm(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    fork: str = "main",
    first_block: int | None = None,
    last_block: int | None = None,
) -> dict[str, Any]:
    forknum, first, last = prewarm_range(rel, fork, first_block, last_block)
    be = ctx.backend
    blocks_done = 0
    if streamed:
        from .. import begin_stream

        stream = begin_stream(
            be,
            rel,
            block_range_read_stream_cb,
            BlockRangeReadStreamPrivate(first, last + 1),
            fork=forknum,
            flags=PREWARM_BUFFER_FLAGS,
            strategy=None,
        )
        ctx.track_stream(stream)
        # The C loop runs over the range, not until the stream ends: it takes exactly as many
        # buffers as blocks it asked for (an error aborts without ending the stream).
        for block in range(first, last + 1):
            be.check_for_interrupts()
            buf = stream.next_buffer()
            be.release_buffer(buf)
            ctx.visit(block)
            blocks_done += 1
        stream.end()
    else:
        for block in range(first, last + 1):
            be.check_for_interrupts()
            buf = be.read_buffer(rel, block, forknum, None)
            be.release_buffer(buf)
            ctx.visit(block)
            blocks_done += 1
    return _answer(blocks_done, forknum, first, last)


@register_scan(
    "pg_prewarm_read",
    models="pg_prewarm(rel, 'read', fork, first, last) (contrib/pg_prewarm/pg_prewarm.c): smgrread",
    description=(
        "read a block range with smgrread into a private page (synchronous, not through shared "
        "buffers, no pg_stat_io reads); no streamed form exists in PostgreSQL 18 or master"
    ),
    params=_RANGE_PARAMS,
    variants=("unstreamed",),
)
def pg_prewarm_read(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    fork: str = "main",
    first_block: int | None = None,
    last_block: int | None = None,
) -> dict[str, Any]:
    forknum, first, last = prewarm_range(rel, fork, first_block, last_block)
    be = ctx.backend
    storage = be.storage
    costs = be.costs
    clock = be.clock
    copy_us = 0 if storage.direct_io else int(costs.copy_us_per_block)
    submit_us = int(costs.io_submit_us)
    blocks_done = 0
    for block in range(first, last + 1):
        be.check_for_interrupts()
        # smgrread: a synchronous one-block read the buffer manager never sees.
        out = storage.read(rel, forknum, block, 1, clock.now + submit_us)
        clock.wait_until(out.complete_at + copy_us)
        if out.error is not None:
            raise out.error
        ctx.visit(block)
        blocks_done += 1
    return _answer(blocks_done, forknum, first, last)


@register_scan(
    "pg_prewarm_prefetch",
    models="pg_prewarm(rel, 'prefetch', fork, first, last) (contrib/pg_prewarm/pg_prewarm.c): PrefetchBuffer",
    description=(
        "posix_fadvise(WILLNEED) for each block not in shared buffers (none with direct I/O); no "
        "read is issued and nothing becomes resident in shared buffers"
    ),
    params=_RANGE_PARAMS,
    variants=("unstreamed",),
)
def pg_prewarm_prefetch(
    ctx: ScanContext,
    rel: Relation,
    *,
    streamed: bool,
    fork: str = "main",
    first_block: int | None = None,
    last_block: int | None = None,
) -> dict[str, Any]:
    forknum, first, last = prewarm_range(rel, fork, first_block, last_block)
    be = ctx.backend
    blocks_done = 0
    advised = 0
    for block in range(first, last + 1):
        be.check_for_interrupts()
        if be.prefetch_buffer(rel, forknum, block):
            advised += 1
        ctx.visit(block)
        blocks_done += 1
    return _answer(blocks_done, forknum, first, last, advised=advised)
