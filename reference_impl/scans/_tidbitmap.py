"""A TID bitmap with exact and lossy pages (``tidbitmap.c``), as a bitmap heap scan iterates it.

``tbm_add_tuples`` adds TIDs one at a time; a page's first TID creates an exact entry, and when
the table holds more entries than ``maxentries`` (from ``work_mem``: ``tbm_calculate_entries``,
``maxbytes / (sizeof(PagetableEntry) + 2 pointers)`` = ``maxbytes / 64`` on 64-bit builds, at
least 16), ``tbm_lossify`` turns exact pages into bits of lossy *chunks* of 256 pages
(``PAGES_PER_CHUNK`` = ``BLCKSZ / 32``) until at most ``maxentries / 2`` entries remain, never
lossifying a page that would be its own chunk header (block divisible by 256); if that is not
enough, ``maxentries`` is raised to twice the entry count. TIDs added to a lossy page are absorbed.

PostgreSQL lossifies pages in hash-table order (``simplehash`` over ``murmurhash32``), which a
model cannot usefully reproduce; this one lossifies in ascending block order. That choice only
decides *which* pages are lossy: the blocks iterated, their order and the rows a scan returns do
not depend on it (a lossy page is rechecked, and exactly its matching tuples pass).

``iterate()`` yields ``TBMIterateResult``-like tuples in ascending block order, merging exact pages
and the set bits of lossy chunks (``tbm_private_iterate``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["TIDBitmap", "TBMIterateResult", "PAGES_PER_CHUNK", "tbm_calculate_entries"]

PAGES_PER_CHUNK = 8192 // 32
_ENTRY_BYTES = 64  # sizeof(PagetableEntry) = 48, plus two pointers of the iteration arrays
_INT_MAX = 2147483647


def tbm_calculate_entries(maxbytes: int) -> int:
    """``tbm_calculate_entries``: page-table entries that fit in ``maxbytes``."""
    return max(16, min(maxbytes // _ENTRY_BYTES, _INT_MAX - 1))


@dataclass(frozen=True, slots=True)
class TBMIterateResult:
    """``TBMIterateResult``: a block, whether it is lossy, and its offsets when exact."""

    blockno: int
    lossy: bool
    offsets: tuple[int, ...]

    @property
    def recheck(self) -> bool:
        return self.lossy


class TIDBitmap:
    """``TIDBitmap`` (``tidbitmap.c``) for one backend: exact pages and lossy chunks."""

    def __init__(self, maxbytes: int) -> None:
        self.maxentries = tbm_calculate_entries(maxbytes)
        self.pages: dict[int, list[int]] = {}
        self.chunks: dict[int, set[int]] = {}
        self.lossify_calls = 0

    @property
    def nentries(self) -> int:
        return len(self.pages) + len(self.chunks)

    def _is_lossy(self, block: int) -> bool:
        chunk = self.chunks.get(block - block % PAGES_PER_CHUNK)
        return chunk is not None and block in chunk

    def _mark_lossy(self, block: int) -> None:
        head = block - block % PAGES_PER_CHUNK
        if block != head:
            self.pages.pop(block, None)
        chunk = self.chunks.get(head)
        if chunk is None:
            chunk = self.chunks[head] = set()
            if head in self.pages:  # the chunk header page was exact: it becomes lossy too
                del self.pages[head]
                chunk.add(head)
        chunk.add(block)

    def _lossify(self) -> None:
        self.lossify_calls += 1
        for block in sorted(self.pages):
            if block % PAGES_PER_CHUNK == 0:
                continue
            self._mark_lossy(block)
            if self.nentries <= self.maxentries // 2:
                return
        if self.nentries > self.maxentries // 2:
            self.maxentries = min(self.nentries, (_INT_MAX - 1) // 2) * 2

    def add_tuples(self, blocks: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> None:
        """``tbm_add_tuples`` for TIDs in the given order."""
        pages = self.pages
        current = -1
        entry: list[int] | None = None
        for b, o in zip(blocks.tolist(), offsets.tolist()):
            if b != current:
                current = b
                if self._is_lossy(b):
                    entry = None
                else:
                    entry = pages.get(b)
                    if entry is None:
                        head = b - b % PAGES_PER_CHUNK
                        if b == head and head in self.chunks:
                            entry = None  # the chunk header exists as a lossy chunk
                            self.chunks[head].add(b)
                        else:
                            entry = pages[b] = []
            if entry is not None:
                entry.append(o)
            if self.nentries > self.maxentries:
                self._lossify()
                current = -1

    def iterate(self) -> Iterator[TBMIterateResult]:
        """``tbm_private_iterate``: every page in ascending block order."""
        exact = sorted(self.pages)
        lossy = sorted(b for chunk in self.chunks.values() for b in chunk)
        i = j = 0
        while i < len(exact) or j < len(lossy):
            if j < len(lossy) and (i >= len(exact) or lossy[j] < exact[i]):
                yield TBMIterateResult(lossy[j], True, ())
                j += 1
            else:
                b = exact[i]
                yield TBMIterateResult(b, False, tuple(sorted(set(self.pages[b]))))
                i += 1

    def blocks(self) -> list[int]:
        return [r.blockno for r in self.iterate()]
