"""Helpers shared by the heap-side scans: TID digests, finding an index, walking a btree range.

* ``TidDigest`` summarises a set of TIDs by an order-independent 64-bit sum of mixed TIDs plus a
  count, so two variants that return the same tuples (possibly in another order, e.g. a
  synchronized BERNOULLI scan starting elsewhere) give the same answer without keeping millions
  of TIDs.
* ``find_index`` resolves the index a bitmap or index scan uses: by name, or the table's first
  index of the wanted kind (from the synthetic relation's spec).
* ``btree_range_leaves`` is the index side of a btree range scan (``_bt_first`` / ``_bt_next``):
  from the root down to the leaf holding the first key (``_bt_search``, each page released as the
  next is read), then right along the leaf level while the leaves hold keys of the range. Every
  page is one ``ReadBuffer`` without strategy (context ``normal``), as ``_bt_getbuf`` does; a leaf
  is released as soon as its items are copied (an MVCC plain index scan drops the leaf pin at
  once). The metapage is read first only when the backend has no cached copy (``rd_amcache``).
* ``btree_key_range`` resolves both at once for a range scan: the btree and the ranks of the range
  (on an index on an expression, widened to whole runs of equal values: the SQL range is
  ``expr >= a AND expr < b`` with ``a``, ``b`` from ``EntryMap.key_bounds``).
* ``btree_range_params`` declares the parameters of such a range scan (the index, the key range,
  the cached metapage, ``LIMIT``); ``begin_heap_fetch_stream`` starts the heap read stream both
  the bitmap heap scan and the index-scan prototype use (``DEFAULT | USE_BATCHING``, no
  strategy, the fetch's TIDs as per-buffer data).
* ``ReturnedRows`` is the executor side of a heap fetch: the live tuples among a page's
  candidate TIDs become rows (``LIMIT`` honoured), and the slot keeps the page of the last row
  returned pinned; ``end_scan`` drops the scan buffer, the stream and the slot in the order the
  node's end-scan does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from ..buffers.bufmgr import Backend
from ..errors import ModelUsageError
from ..read_stream import READ_STREAM_DEFAULT, READ_STREAM_USE_BATCHING
from ..relations.btree import BTreeContent
from ..relations.mixing import mix64, seed_words
from ..storage.relation import ForkNumber, Relation
from .base import ScanContext, ScanParam

__all__ = [
    "TidDigest",
    "find_index",
    "btree_range_leaves",
    "key_range",
    "btree_key_range",
    "btree_range_params",
    "begin_heap_fetch_stream",
    "ReturnedRows",
]

_DIGEST_KEY = seed_words(0x54494453)
_M64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15
_OFFSET = (int(_DIGEST_KEY) * _GOLDEN + _GOLDEN) & _M64
_SMALL = 24


def _mix_int(x: int) -> int:
    """``relations.mixing.mix64`` of one word with the digest key, on Python ints (no numpy cost)."""
    z = (x + _OFFSET) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class TidDigest:
    """An order-independent digest of a multiset of TIDs (count + wrapped sum of mixed TIDs)."""

    __slots__ = ("count", "_sum")

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0

    def add(self, block: int, offsets: npt.NDArray[Any] | list[int]) -> None:
        n = len(offsets)
        if n == 0:
            return
        if n <= _SMALL:
            base = block << 16
            total = self._sum
            for o in offsets if isinstance(offsets, list) else offsets.tolist():
                total += _mix_int(base | o)
            self._sum = total & _M64
        else:
            keys = (np.uint64(block) << np.uint64(16)) | np.asarray(offsets, dtype=np.uint64)
            self._sum = (self._sum + int(mix64(keys, _DIGEST_KEY).sum(dtype=np.uint64))) & _M64
        self.count += n

    @property
    def value(self) -> int:
        return self._sum


def find_index(ctx: Any, rel: Relation, name: str | None, kind: str) -> Relation:
    """The index ``name`` of ``rel``, or its first index of ``kind`` (``ModelUsageError`` if none)."""
    instance = ctx.instance
    if name is not None:
        idx = instance.relation(name)
        if getattr(idx.content, "kind", None) != kind:
            raise ModelUsageError(f"index {name!r} is not a {kind} index")
        return idx
    spec = getattr(rel.content, "spec", None)
    if spec is not None:
        for ispec in spec.indexes:
            if ispec.kind == kind:
                return instance.relation(ispec.default_name(spec.name))
    raise ModelUsageError(
        f"relation {rel.name!r} has no {kind} index: build it with RelationSpec(indexes=(IndexSpec({kind!r}),))"
    )


def key_range(total: int, key_start: float, selectivity: float) -> tuple[int, int]:
    """Key ranks ``[lo, hi)`` of ``WHERE key >= start AND key < start + selectivity`` (fractions)."""
    lo = min(total, int(key_start * total))
    hi = min(total, lo + round(selectivity * total))
    return lo, hi


def btree_key_range(
    ctx: ScanContext, rel: Relation, index: str | None, key_start: float, selectivity: float
) -> tuple[Relation, BTreeContent, int, int]:
    """The btree a range scan of ``rel`` uses (``find_index``), its content, and ranks ``[lo, hi)``."""
    irel = find_index(ctx, rel, index, "btree")
    bt = irel.content
    assert isinstance(bt, BTreeContent)
    lo, hi = key_range(bt.entries.total, key_start, selectivity)
    # On an index on an expression the range is of values: it takes every entry whose value lies
    # between those of ranks lo and hi - 1 (WHERE expr >= a AND expr < b, see key_bounds).
    lo, hi = bt.entries.key_group_span(lo, hi)
    return irel, bt, lo, hi


def btree_range_leaves(
    backend: Backend,
    index: Relation,
    lo: int,
    hi: int,
    *,
    metapage_cached: bool,
    pages_read: list[int],
) -> Iterator[npt.NDArray[np.int64]]:
    """Read the btree pages a scan of key ranks ``[lo, hi)`` needs; yield each leaf's ranks in range.

    ``pages_read`` receives every index block pinned, in order.
    """
    bt = index.content
    if not isinstance(bt, BTreeContent):
        raise ModelUsageError(f"index {index.name!r} is not a synthetic btree")

    def read(block: int) -> int:
        pages_read.append(block)
        return backend.read_buffer(index, block, ForkNumber.MAIN, None)

    if not metapage_cached:
        backend.release_buffer(read(0))
    if hi <= lo or bt.nleaves == 0:
        return
    start = lo
    if bt.entries.descending and lo > 0:
        # On a DESC column the range's first bound is ``key < b`` (b the key of rank lo - 1):
        # _bt_first searches for b with nextkey semantics, so when rank lo starts a leaf the
        # descent ends on the leaf to its left (its pivot is below b in index order) and steps
        # right from there: one more leaf read (measured on 18.6: bitmapscan-descending).
        start = lo - 1
    pos = bt.leaf_of_rank(start)
    buf = -1
    for block in bt.descent(pos):
        if buf >= 0:
            backend.release_buffer(buf)
        buf = read(block)
    while True:
        first, n = bt.leaf_ranks(pos)
        ranks = np.arange(max(lo, first), min(hi, first + n), dtype=np.int64)
        backend.release_buffer(buf)
        yield ranks
        pos += 1
        if pos >= bt.nleaves or bt.leaf_ranks(pos)[0] >= hi:
            return
        buf = read(bt.leaf_block(pos))


def btree_range_params(*own: ScanParam) -> tuple[ScanParam, ...]:
    """The parameters of a scan of a btree key range, with the node's ``own`` before the last two.

    ``index``, ``key_start`` and ``selectivity`` choose the range, ``metapage_cached`` and
    ``limit`` come last (the order ``--help`` lists them in).
    """
    return (
        ScanParam("index", str, None, "btree index name (default: the table's first btree)"),
        ScanParam(
            "key_start",
            float,
            0.0,
            "start of the key range, as a fraction of the keys",
            minimum=0.0,
            maximum=1.0,
        ),
        ScanParam("selectivity", float, 0.01, "fraction of the keys in the range", minimum=0.0, maximum=1.0),
        *own,
        ScanParam("metapage_cached", bool, True, "the backend's relcache already holds the btree metapage"),
        ScanParam("limit", int, None, "stop after this many rows (LIMIT)", minimum=0),
    )


def begin_heap_fetch_stream(
    ctx: ScanContext, rel: Relation, callback: Callable[[Any, Any], Any], *, instrument: bool = False
) -> Any:
    """Start (and track) the heap read stream of a TID-driven fetch.

    ``callback`` returns ``(block, per-buffer data)`` or ``InvalidBlockNumber``. Flags
    ``DEFAULT | USE_BATCHING`` and no strategy, whatever the table's size: neither
    ``bitmapheap_stream_read_next`` nor the index-prefetch prototype uses a ring. ``instrument``:
    ``heap_beginscan``'s ``SO_SCAN_INSTRUMENT`` (19), ``read_stream_enable_stats`` on it.
    """
    from .. import begin_stream

    stream = begin_stream(
        ctx.backend,
        rel,
        callback,
        None,
        flags=READ_STREAM_DEFAULT | READ_STREAM_USE_BATCHING,
        per_buffer_data=True,
    )
    if instrument:
        ctx.instrument_stream(stream)
    return ctx.track_stream(stream)


class ReturnedRows:
    """The rows a heap-fetching executor node returns, and the slot pin of the last one.

    ``ExecStoreBufferHeapTuple`` pins the page of the row the slot holds, so between pages the
    page of the last row returned stays pinned besides the scan's own buffer; the pin moves only
    when a page yields a row. ``limit`` is the query's ``LIMIT`` (``None``: none).
    """

    __slots__ = ("_backend", "limit", "rows", "digest", "slot", "limited")

    def __init__(self, backend: Backend, limit: int | None) -> None:
        self._backend = backend
        self.limit = limit
        self.rows = 0
        self.digest = TidDigest()
        self.slot = -1  # the buffer the slot pins, -1 for none
        self.limited = False  # the LIMIT stopped the scan

    def take(self, buf: int, block: int, candidates: npt.NDArray[Any], live: npt.NDArray[Any]) -> bool:
        """Return the live tuples among ``candidates`` of page ``block`` (held in ``buf``).

        Returns True when the ``LIMIT`` is reached: the node stops asking for pages.
        """
        taken = candidates[np.isin(candidates, live)]
        if self.limit is not None:
            taken = taken[: max(0, self.limit - self.rows)]
        if taken.size:
            if self.slot != buf:
                if self.slot >= 0:
                    self._backend.release_buffer(self.slot)
                self.slot = buf
                self._backend.incr_buffer_refcount(buf)
            self.digest.add(block, taken)
            self.rows += int(taken.size)
        if self.limit is not None and self.rows >= self.limit:
            self.limited = True
        return self.limited

    def end_scan(self, buf: int, stream: Any | None) -> None:
        """The end of the scan: the held scan buffer, then the stream (drained), then the slot."""
        be = self._backend
        if buf >= 0:
            be.release_buffer(buf)
        if stream is not None:
            stream.end()
        if self.slot >= 0:
            be.release_buffer(self.slot)
