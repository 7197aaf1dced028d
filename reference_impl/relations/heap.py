"""Heap content: pages, visibility-map and free-space-map pages of a synthetic table, made lazily.

``HeapContent`` is the ``content`` object of a synthetic table's ``Relation``: scans ask it
``page(fork, block)`` when they examine a page, never when they read one, so the read path stays
independent of what pages hold. Nothing is generated up front. Blocks are grouped in chunks of
1024; the first time a block of a chunk is needed, the whole chunk's per-block numbers (line
pointers, dead tuples, visibility bits, hint bits) are drawn with one numpy generator seeded by
``(seed, chunk)`` and kept in a small LRU cache. So the same spec always gives the same pages, in
any order of access, and an 8,388,608-block table costs a few cached chunks of memory however
much of it a scan touches.

A page's numbers follow one rule set (see ``spec.py``): line pointers per page from
``tuples_per_page``; the visibility map from ``vm_pattern``; dead tuples only on pages that are
not all-visible; hint bits set on all-visible pages and, with ``hinted_fraction``, on others.
Which offsets are dead is drawn per page, only when asked. Blocks appended after the spec's
``nblocks`` (a table growing during a scan) follow the same distribution of tuples but are never
all-visible, have no dead tuples and no hint bits: they were just inserted.

Tuples are numbered in heap order (block by block, offset by offset, dead ones included); an
index entry refers to tuple *h* by that number, and ``entry_tids`` turns numbers back into TIDs.
``rows(block)`` makes seeded faker rows for a page's live tuples, for tests that look at data.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ModelUsageError
from ..storage.relation import FORK_NAMES, ForkNumber, Relation
from .layout import (
    FSM_SLOTS_PER_PAGE,
    HEAPBLOCKS_PER_VM_PAGE,
    MAX_HEAP_TUPLES_PER_PAGE,
    heap_free_space,
    heap_tuple_space,
)
from .mixing import seed_words, uniform01
from .spec import RelationSpec

__all__ = ["HeapContent", "HeapPage", "VMPage", "FSMPage", "CHUNK_BLOCKS"]

CHUNK_BLOCKS = 1024
_CACHE_CHUNKS = 64
_RUNS_STREAM = 0x52554E53
_DEAD_STREAM = 0xDEAD


_OFFSETS: dict[int, npt.NDArray[np.uint16]] = {}


def _all_offsets(n: int) -> npt.NDArray[np.uint16]:
    """``1 .. n`` as a shared read-only array (pages of a table mostly have the same count)."""
    arr = _OFFSETS.get(n)
    if arr is None:
        arr = np.arange(1, n + 1, dtype=np.uint16)
        arr.flags.writeable = False
        _OFFSETS[n] = arr
    return arr


class HeapPage:
    """One heap page as ``heap_prepare_pagescan``/``heap_page_prune`` would see it (``bufpage.h``).

    ``max_offset`` line pointers (``PageGetMaxOffsetNumber``): ``nlive`` visible tuples and
    ``ndead`` dead, unpruned ones, of which ``nhot`` were HOT-updated (their live heap-only
    successors are the page's last ``nhot`` offsets); ``all_visible``/``all_frozen`` mirror the page's VM bits,
    ``hinted`` says whether the tuples' hint bits are already set (a scan that must set them
    dirties the page), ``free_space`` is ``PageGetHeapFreeSpace``.
    """

    __slots__ = (
        "block",
        "nlive",
        "ndead",
        "max_offset",
        "all_visible",
        "all_frozen",
        "hinted",
        "tuple_len",
        "nhot",
        "_content",
    )

    def __init__(
        self,
        content: HeapContent,
        block: int,
        nitems: int,
        ndead: int,
        all_visible: bool,
        all_frozen: bool,
        hinted: bool,
        nhot: int = 0,
    ) -> None:
        self._content = content
        self.block = block
        self.max_offset = nitems
        self.ndead = ndead
        self.nhot = nhot
        self.nlive = nitems - ndead
        self.all_visible = all_visible
        self.all_frozen = all_frozen
        self.hinted = hinted
        self.tuple_len = 24 + content.spec.tuple_width  # t_len of each tuple (header + data)

    @property
    def free_space(self) -> int:
        """``PageGetHeapFreeSpace`` (computed on demand: most scans never ask)."""
        return heap_free_space(self._content.spec.tuple_width, self.max_offset)

    @property
    def dead_offsets(self) -> npt.NDArray[np.uint16]:
        """Offsets (ascending) of the dead, unpruned tuples."""
        return self._content._dead_offsets(self.block, self.max_offset, self.ndead, self.nhot)

    @property
    def hot_offsets(self) -> npt.NDArray[np.uint16]:
        """The HOT-updated dead tuples (the first ``nhot`` dead offsets): pruning makes each a
        redirect to its heap-only successor, so VACUUM needs no LP_DEAD item for it."""
        return self.dead_offsets[: self.nhot]

    @property
    def lpdead_offsets(self) -> npt.NDArray[np.uint16]:
        """The dead tuples pruning turns into LP_DEAD items (index entries to remove)."""
        return self.dead_offsets[self.nhot :]

    @property
    def live_offsets(self) -> npt.NDArray[np.uint16]:
        """Offsets (ascending) of the visible tuples (read-only array)."""
        allo = _all_offsets(self.max_offset)
        if self.ndead == 0:
            return allo
        return np.setdiff1d(allo, self.dead_offsets, assume_unique=True)

    def __repr__(self) -> str:
        flags = "".join(
            c for c, on in (("V", self.all_visible), ("F", self.all_frozen), ("H", self.hinted)) if on
        )
        return (
            f"HeapPage({self.block}, live={self.nlive}, dead={self.ndead}, max_offset={self.max_offset}"
            f"{', ' + flags if flags else ''})"
        )


class VMPage:
    """One visibility-map page (``visibilitymap.c``): the bits of 32672 heap blocks.

    ``first_heap_block`` .. ``first_heap_block + nheap_blocks - 1`` are the heap blocks it covers
    (up to the table's current size); ``all_visible``/``all_frozen`` count the bits set.
    """

    __slots__ = ("block", "first_heap_block", "nheap_blocks", "all_visible", "all_frozen")

    def __init__(self, block: int, first: int, n: int, nvis: int, nfrozen: int) -> None:
        self.block = block
        self.first_heap_block = first
        self.nheap_blocks = n
        self.all_visible = nvis
        self.all_frozen = nfrozen

    def __repr__(self) -> str:
        return (
            f"VMPage({self.block}, heap {self.first_heap_block}+{self.nheap_blocks}, "
            f"visible={self.all_visible}, frozen={self.all_frozen})"
        )


class FSMPage:
    """One free-space-map page (``freespace.c``): ``level`` 0 is a leaf of 4069 heap-block slots.

    ``logical`` is the page's number within its level (``FSMAddress.logpageno``);
    ``first_heap_block``/``nheap_blocks`` are the heap blocks under it.
    """

    __slots__ = ("block", "level", "logical", "first_heap_block", "nheap_blocks")

    def __init__(self, block: int, level: int, logical: int, first: int, n: int) -> None:
        self.block = block
        self.level = level
        self.logical = logical
        self.first_heap_block = first
        self.nheap_blocks = n

    @property
    def is_leaf(self) -> bool:
        return self.level == 0

    def __repr__(self) -> str:
        return f"FSMPage({self.block}, level={self.level}, logical={self.logical})"


def fsm_physical_to_logical(block: int) -> tuple[int, int]:
    """Inverse of ``fsm_logical_to_physical`` for the tree sizes a table can have: (level, page)."""
    if block == 0:
        return 2, 0
    rest = block - 1
    group, within = divmod(rest, FSM_SLOTS_PER_PAGE + 1)
    if within == 0:
        return 1, group
    return 0, group * FSM_SLOTS_PER_PAGE + within - 1


class _Chunk:
    __slots__ = ("nitems", "ndead", "visible", "frozen", "hinted", "nhot")

    def __init__(
        self,
        nitems: npt.NDArray[np.int64],
        ndead: npt.NDArray[np.int64],
        visible: npt.NDArray[np.bool_],
        frozen: npt.NDArray[np.bool_],
        hinted: npt.NDArray[np.bool_],
        nhot: npt.NDArray[np.int64],
    ) -> None:
        self.nitems = nitems
        self.ndead = ndead
        self.visible = visible
        self.frozen = frozen
        self.hinted = hinted
        self.nhot = nhot


class HeapContent:
    """The lazily generated pages of a synthetic heap (``PageContent`` of its ``Relation``)."""

    def __init__(self, spec: RelationSpec) -> None:
        self.spec = spec
        self.rel: Relation | None = None
        self._chunks: OrderedDict[int, _Chunk] = OrderedDict()
        self._fixed = spec.fixed_tuples_per_page
        self._chunk_totals: list[int] = []  # line pointers per chunk, filled in order
        self._chunk_cum: npt.NDArray[np.int64] | None = None
        self._faker: Any = None
        self._runs_key = seed_words(spec.seed, _RUNS_STREAM)
        self._indexed_cum_cache: dict[int, npt.NDArray[np.int64]] = {}

    def bind(self, rel: Relation) -> None:
        """Attach the relation whose current fork sizes bound ``page()``."""
        self.rel = rel

    # ------------------------------------------------------------------------------ generation
    def _chunk(self, c: int) -> _Chunk:
        ch = self._chunks.get(c)
        if ch is not None:
            self._chunks.move_to_end(c)
            return ch
        ch = self._make_chunk(c)
        self._chunks[c] = ch
        if len(self._chunks) > _CACHE_CHUNKS:
            self._chunks.popitem(last=False)
        return ch

    def _make_chunk(self, c: int) -> _Chunk:
        spec = self.spec
        n = CHUNK_BLOCKS
        start = c * n
        blocks = np.arange(start, start + n, dtype=np.int64)
        within = blocks < spec.nblocks
        # One generator per chunk, drawn from in a fixed order; made only when something is random.
        gen: list[np.random.Generator] = []

        def rng() -> np.random.Generator:
            if not gen:
                gen.append(np.random.default_rng([spec.seed & 0xFFFFFFFF, spec.seed >> 32, 0x4845, c]))
            return gen[0]

        tpp = spec.tuples_per_page
        cap = min(spec.page_capacity, MAX_HEAP_TUPLES_PER_PAGE)
        fixed = self._fixed
        if fixed is not None:
            nitems = np.full(n, fixed, dtype=np.int64)
        elif tpp[0] == "cycle":  # type: ignore[index]
            counts = np.asarray(tpp[1:], dtype=np.int64)  # type: ignore[index]
            nitems = counts[blocks % len(counts)]
        elif tpp[0] == "poisson":  # type: ignore[index]
            nitems = np.minimum(rng().poisson(float(tpp[1]), n), cap).astype(np.int64)  # type: ignore[index]
        else:
            nitems = rng().integers(int(tpp[1]), int(tpp[2]) + 1, n).astype(np.int64)  # type: ignore[index]
        avf = spec.all_visible_fraction
        aff = spec.all_frozen_fraction
        if spec.vm_cycle is not None:
            marks = np.frombuffer(spec.vm_cycle.encode(), dtype=np.uint8)[blocks % len(spec.vm_cycle)]
            frozen = marks == ord("F")
            visible = frozen | (marks == ord("V"))
        elif avf == 0.0:
            visible = np.zeros(n, dtype=bool)
            frozen = visible
        elif spec.vm_pattern == "random":
            u = rng().random(n)
            visible = u < avf
            frozen = u < aff
        elif spec.vm_pattern == "prefix":
            visible = blocks < round(avf * spec.nblocks)
            frozen = blocks < round(aff * spec.nblocks)
        else:
            u = uniform01(blocks // spec.vm_run_blocks, self._runs_key)
            visible = u < avf
            frozen = u < aff
        if spec.vacuumed:
            # VACUUM marks a page without line pointers all-visible and all-frozen whatever the
            # pattern says (lazy_scan_new_or_empty); measured on an 18.6 server by the oracle.
            empty = nitems == 0
            visible = visible | empty
            frozen = frozen | empty
        visible = visible & within
        frozen = frozen & within
        if spec.dead_per_page is not None:
            ndead = np.minimum(nitems, spec.dead_per_page)
            ndead = np.where(visible | ~within, 0, ndead).astype(np.int64)
        elif spec.dead_fraction > 0.0:
            ndead = rng().binomial(nitems, spec.dead_fraction)
            ndead = np.where(visible | ~within, 0, ndead).astype(np.int64)
        else:
            ndead = np.zeros(n, dtype=np.int64)
        if spec.dead_every is not None:
            ndead = np.where(blocks % spec.dead_every == 0, ndead, 0)
        # A HOT-updated tuple needs its live successor on the same page.
        nhot = np.minimum(np.minimum(ndead, nitems - ndead), spec.hot_per_page)
        if spec.hinted_fraction >= 1.0:
            hinted = within.copy()
        else:
            hinted = (visible | (rng().random(n) < spec.hinted_fraction)) & within
        return _Chunk(nitems, ndead, visible, frozen, hinted, nhot)

    def _dead_offsets(self, block: int, nitems: int, ndead: int, nhot: int = 0) -> npt.NDArray[np.uint16]:
        if ndead == 0:
            return np.empty(0, dtype=np.uint16)
        rng = np.random.default_rng([self.spec.seed & 0xFFFFFFFF, self.spec.seed >> 32, _DEAD_STREAM, block])
        # The last nhot offsets are the heap-only successors of the HOT-updated ones: live.
        picked = rng.choice(nitems - nhot, size=ndead, replace=False) + 1
        return np.sort(picked).astype(np.uint16)

    # ------------------------------------------------------------------------------ pages
    def _size(self, fork: ForkNumber) -> int:
        if self.rel is not None:
            return self.rel.nblocks(fork)
        return self.spec.nblocks if fork == ForkNumber.MAIN else 0

    def _check(self, fork: ForkNumber, block: int) -> None:
        size = self._size(fork)
        if not 0 <= block < size:
            raise ModelUsageError(
                f"page {block} of fork {FORK_NAMES[ForkNumber(fork)]} of {self.spec.name!r} does not "
                f"exist: allowed 0..{size - 1}"
                if size
                else f"fork {FORK_NAMES[ForkNumber(fork)]} of {self.spec.name!r} has no pages (block {block})"
            )

    def page(self, fork: ForkNumber, block: int) -> HeapPage | VMPage | FSMPage:
        """The page ``block`` of ``fork`` (``PageContent`` protocol)."""
        self._check(fork, block)
        if fork == ForkNumber.MAIN:
            return self.heap_page(block)
        if fork == ForkNumber.VM:
            return self._vm_page(block)
        if fork == ForkNumber.FSM:
            return self._fsm_page(block)
        raise ModelUsageError(f"the init fork of heap {self.spec.name!r} has no pages")

    def heap_page(self, block: int) -> HeapPage:
        c, i = divmod(block, CHUNK_BLOCKS)
        ch = self._chunk(c)
        return HeapPage(
            self,
            block,
            int(ch.nitems[i]),
            int(ch.ndead[i]),
            bool(ch.visible[i]),
            bool(ch.frozen[i]),
            bool(ch.hinted[i]),
            int(ch.nhot[i]),
        )

    def nlive(self, block: int) -> int:
        """Visible tuples on a heap page (the fast path scans use)."""
        c, i = divmod(block, CHUNK_BLOCKS)
        ch = self._chunk(c)
        return int(ch.nitems[i] - ch.ndead[i])

    def _range_sum(self, first: int, n: int, what: str) -> int:
        total = 0
        b = first
        end = first + n
        while b < end:
            c, i = divmod(b, CHUNK_BLOCKS)
            j = min(CHUNK_BLOCKS, i + end - b)
            total += int(np.count_nonzero(getattr(self._chunk(c), what)[i:j]))
            b += j - i
        return total

    def _vm_page(self, block: int) -> VMPage:
        first = block * HEAPBLOCKS_PER_VM_PAGE
        n = max(0, min(HEAPBLOCKS_PER_VM_PAGE, self._size(ForkNumber.MAIN) - first))
        return VMPage(
            block, first, n, self._range_sum(first, n, "visible"), self._range_sum(first, n, "frozen")
        )

    def _fsm_page(self, block: int) -> FSMPage:
        level, logical = fsm_physical_to_logical(block)
        span = FSM_SLOTS_PER_PAGE ** (level + 1)
        first = logical * span
        n = max(0, min(span, self._size(ForkNumber.MAIN) - first))
        return FSMPage(block, level, logical, first, n)

    # ------------------------------------------------------------------------------ VM queries
    def vm_status(self, block: int) -> tuple[bool, bool]:
        """``visibilitymap_get_status``: (all-visible, all-frozen) of a heap block."""
        c, i = divmod(block, CHUNK_BLOCKS)
        ch = self._chunk(c)
        return bool(ch.visible[i]), bool(ch.frozen[i])

    def vm_counts(self) -> tuple[int, int]:
        """``visibilitymap_count``: all-visible and all-frozen heap blocks of the whole table."""
        n = self._size(ForkNumber.MAIN)
        if self.spec.all_visible_fraction == 0.0 and self._fixed is not None and self._fixed > 0:
            return 0, 0  # no bit set anywhere: every page has line pointers and none is all-visible
        return self._range_sum(0, n, "visible"), self._range_sum(0, n, "frozen")

    def vm_bits(self, first: int, n: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """All-visible and all-frozen flags of heap blocks ``first .. first + n - 1``."""
        vis = np.empty(n, dtype=bool)
        frz = np.empty(n, dtype=bool)
        b = first
        while b < first + n:
            c, i = divmod(b, CHUNK_BLOCKS)
            j = min(CHUNK_BLOCKS, i + first + n - b)
            ch = self._chunk(c)
            vis[b - first : b - first + j - i] = ch.visible[i:j]
            frz[b - first : b - first + j - i] = ch.frozen[i:j]
            b += j - i
        return vis, frz

    # ------------------------------------------------------------------------------ tuple numbers
    def _chunk_items(self, c: int) -> int:
        return int(self._chunk(c).nitems.sum())

    def _ensure_cum(self, nchunks: int) -> npt.NDArray[np.int64]:
        totals = self._chunk_totals
        while len(totals) < nchunks:
            totals.append(self._chunk_items(len(totals)))
        if self._chunk_cum is None or len(self._chunk_cum) != len(totals) + 1:
            self._chunk_cum = np.concatenate(([0], np.cumsum(np.asarray(totals, dtype=np.int64))))
        return self._chunk_cum

    def tuples_before(self, block: int) -> int:
        """Line pointers (live + dead) on blocks ``0 .. block - 1``: tuple number of (block, 1)."""
        fixed = self._fixed
        if fixed is not None:
            return block * fixed
        c, i = divmod(block, CHUNK_BLOCKS)
        cum = self._ensure_cum(c)
        return int(cum[c]) + int(self._chunk(c).nitems[:i].sum())

    def total_entries(self) -> int:
        """Line pointers of the table as built (``spec.nblocks`` blocks) that an index lists:
        all of them but the heap-only tuples of HOT updates."""
        if self.spec.hot_per_page:
            return int(self._ensure_indexed_cum(-(-self.spec.nblocks // CHUNK_BLOCKS))[-1])
        return self.tuples_before(self.spec.nblocks)

    def _indexed(self, c: int) -> npt.NDArray[np.int64]:
        ch = self._chunk(c)
        counts: npt.NDArray[np.int64] = ch.nitems - ch.nhot
        if (c + 1) * CHUNK_BLOCKS > self.spec.nblocks:
            counts = np.where(
                np.arange(c * CHUNK_BLOCKS, (c + 1) * CHUNK_BLOCKS) < self.spec.nblocks, counts, 0
            )
        return counts

    def _ensure_indexed_cum(self, nchunks: int) -> npt.NDArray[np.int64]:
        totals = [int(self._indexed(c).sum()) for c in range(nchunks)]
        return np.concatenate(([0], np.cumsum(np.asarray(totals, dtype=np.int64))))

    def entry_tids(self, h: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(blocks, offsets) of index entry numbers ``h`` (heap order, dead tuples included; with
        HOT updates the heap-only tuples, each page's last ``nhot`` offsets, are skipped)."""
        hs = np.asarray(h, dtype=np.int64)
        if self.spec.hot_per_page:
            return self._indexed_tids(hs)
        fixed = self._fixed
        if fixed is not None:
            if fixed == 0:
                raise ModelUsageError(f"heap {self.spec.name!r} has no tuples")
            return hs // fixed, hs % fixed + 1
        nchunks = -(-self.spec.nblocks // CHUNK_BLOCKS)
        cum = self._ensure_cum(nchunks)
        chunk_of = np.searchsorted(cum, hs, side="right") - 1
        blocks = np.empty_like(hs)
        offsets = np.empty_like(hs)
        for c in np.unique(chunk_of):
            sel = chunk_of == c
            items = self._chunk(int(c)).nitems
            local_cum = np.concatenate(([0], np.cumsum(items)))
            rel = hs[sel] - cum[c]
            idx = np.searchsorted(local_cum, rel, side="right") - 1
            blocks[sel] = int(c) * CHUNK_BLOCKS + idx
            offsets[sel] = rel - local_cum[idx] + 1
        return blocks, offsets

    def _indexed_tids(self, hs: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        nchunks = -(-self.spec.nblocks // CHUNK_BLOCKS)
        cum = self._indexed_cum_cache.get(nchunks)
        if cum is None:
            cum = self._indexed_cum_cache[nchunks] = self._ensure_indexed_cum(nchunks)
        chunk_of = np.searchsorted(cum, hs, side="right") - 1
        blocks = np.empty_like(hs)
        offsets = np.empty_like(hs)
        for c in np.unique(chunk_of):
            sel = chunk_of == c
            local_cum = np.concatenate(([0], np.cumsum(self._indexed(int(c)))))
            rel = hs[sel] - cum[c]
            idx = np.searchsorted(local_cum, rel, side="right") - 1
            blocks[sel] = int(c) * CHUNK_BLOCKS + idx
            offsets[sel] = rel - local_cum[idx] + 1
        return blocks, offsets

    # ------------------------------------------------------------------------------ rows
    def rows(self, block: int) -> list[dict[str, Any]]:
        """The live tuples of a heap page as rows: ``ctid``, ``id`` (tuple number) and, with
        ``payload``, seeded faker columns (``name``, ``email``, ``city``, ``amount``)."""
        self._check(ForkNumber.MAIN, block)
        page = self.heap_page(block)
        base = self.tuples_before(block)
        offsets = [int(o) for o in page.live_offsets]
        if not self.spec.payload:
            return [{"ctid": (block, o), "id": base + o - 1} for o in offsets]
        fake = self._faker
        if fake is None:
            from faker import Faker

            fake = self._faker = Faker()
        fake.seed_instance(self.spec.seed * 1_000_003 + block)
        out = []
        for o in offsets:
            out.append(
                {
                    "ctid": (block, o),
                    "id": base + o - 1,
                    "name": fake.name(),
                    "email": fake.email(),
                    "city": fake.city(),
                    "amount": fake.pyint(min_value=0, max_value=100_000),
                }
            )
        return out

    def tuple_space(self) -> int:
        """Bytes one tuple takes on a page (tuple + line pointer)."""
        return heap_tuple_space(self.spec.tuple_width)

    def __repr__(self) -> str:
        return f"HeapContent({self.spec.name!r}, nblocks={self.spec.nblocks}, seed={self.spec.seed})"
