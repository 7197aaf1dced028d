"""The storage manager: a catalog of relations and the physical reads and writes below buffers.

``Storage`` plays the part of ``smgr.c``/``md.c`` plus the kernel below them. The buffer manager
asks it for one vectored read of consecutive blocks of one segment (``smgrstartreadv``); it
checks the request against the fork's size (a read at or past the end fails, as ``mdreadv``
does when ``preadv`` returns 0 bytes), lets the fault plan decide its fate, and asks the page
cache (buffered I/O) or the device directly (``debug_io_direct=data``) when the data will be in
memory. It returns a ``ReadOutcome``; nothing happens to buffers here. Without a fault plan (no
faults armed) a read takes a shorter path with the same result: nothing can delay, shorten,
fail or corrupt it.

Relations are created here through a back door (fixtures write straight into simulated storage,
never through the implementation under test, as fsspec's abstract tests do).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ModelUsageError, PgError, ReadBeyondEOF, ReadIOError
from .device import Device
from .faults import FaultPlan
from .pagecache import PageCache
from .relation import FORK_NAMES, RELSEG_SIZE, ForkNumber, PageContent, Relation

__all__ = ["Storage", "ReadOutcome"]


@dataclass(slots=True)
class ReadOutcome:
    """The fate of one physical read: when it completes and what it delivered."""

    complete_at: int
    ok_blocks: int  # blocks delivered, from the start of the request
    error: PgError | None = None  # raised by whoever waits for this read
    corrupt: Sequence[int] = ()  # blocks failing page verification


class Storage:
    """Relations and their files over one device (models ``smgr.c``/``md.c`` and the kernel)."""

    def __init__(
        self,
        device: Device,
        *,
        direct_io: bool = False,
        page_cache: PageCache | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.device = device
        self.direct_io = direct_io
        self.page_cache = page_cache if page_cache is not None else PageCache(device)
        self.faults = faults if faults is not None else FaultPlan()
        self._relations: dict[str, Relation] = {}
        self._by_id: dict[int, Relation] = {}
        self._next_relid = itertools.count(16384)
        self.physical_reads = 0
        self.physical_read_blocks = 0
        self.physical_writes = 0
        self.prefetch_calls = 0

    # ------------------------------------------------------------------------------ catalog
    def create_relation(
        self,
        name: str,
        main_blocks: int = 0,
        *,
        forks: dict[ForkNumber, int] | None = None,
        content: PageContent | None = None,
        persistence: str = "p",
        is_catalog: bool = False,
        temp_owner: int | None = None,
    ) -> Relation:
        """Create a relation with the given fork sizes (main fork = ``main_blocks`` by default)."""
        if not name or not isinstance(name, str):
            raise ModelUsageError(f"relation name {name!r} is invalid: allowed a non-empty string")
        if name in self._relations:
            raise ModelUsageError(f"relation {name!r} already exists")
        sizes = dict(forks) if forks is not None else {ForkNumber.MAIN: main_blocks}
        rel = Relation(
            name,
            next(self._next_relid),
            sizes,
            persistence=persistence,
            is_catalog=is_catalog,
            content=content,
            temp_owner=temp_owner,
        )
        self._relations[name] = rel
        self._by_id[rel.relid] = rel
        return rel

    def add_relation(self, rel: Relation) -> Relation:
        """Register a relation built elsewhere (e.g. by a synthetic-relation generator)."""
        if rel.name in self._relations:
            raise ModelUsageError(f"relation {rel.name!r} already exists")
        if rel.relid in self._by_id:
            raise ModelUsageError(f"relid {rel.relid} of {rel.name!r} is already used")
        self._relations[rel.name] = rel
        self._by_id[rel.relid] = rel
        return rel

    def new_relid(self) -> int:
        return next(self._next_relid)

    def relation(self, name: str) -> Relation:
        try:
            return self._relations[name]
        except KeyError:
            known = ", ".join(sorted(self._relations)) or "none"
            raise ModelUsageError(f"no relation named {name!r} (known: {known})") from None

    def relation_by_id(self, relid: int) -> Relation:
        return self._by_id[relid]

    def relations(self) -> list[Relation]:
        return list(self._relations.values())

    def drop_relation(self, name: str) -> None:
        rel = self._relations.pop(name)
        del self._by_id[rel.relid]

    # ------------------------------------------------------------------------------ I/O
    @staticmethod
    def file_key(rel: Relation, fork: ForkNumber | int, block: int) -> int:
        """One key per segment file (device sequentiality and page cache are per file)."""
        return (rel.tag_base(fork) >> 16) | (block // RELSEG_SIZE)

    def read(self, rel: Relation, fork: ForkNumber, start: int, n: int, at_us: int) -> ReadOutcome:
        """One physical vectored read of [start, start+n) issued at ``at_us``."""
        if self.faults.faults:
            return self._read_with_faults(rel, fork, start, n, at_us)
        # No fault plan: the read is issued at at_us and delivers every block up to the end of
        # the fork, and none is corrupt.
        self.physical_reads += 1
        size = rel._nblocks[fork]  # -1: the fork does not exist
        nblocks = size if size > 0 else 0
        if start >= nblocks:
            return ReadOutcome(at_us + 1, 0, ReadBeyondEOF(rel.name, FORK_NAMES[fork], start, nblocks))
        ok = n if start + n <= nblocks else nblocks - start
        self.physical_read_blocks += ok
        key = (rel._tag_bases[fork] >> 16) | (start // RELSEG_SIZE)  # file_key, inlined
        if self.direct_io:
            return ReadOutcome(self.device.read(at_us, key, start, ok), ok)
        return ReadOutcome(self.page_cache.read(at_us, key, start, ok, nblocks), ok)

    def _read_with_faults(
        self, rel: Relation, fork: ForkNumber, start: int, n: int, at_us: int
    ) -> ReadOutcome:
        """:meth:`read` when a fault plan is armed: the plan decides the read's fate first."""
        self.physical_reads += 1
        size = rel._nblocks[fork]  # -1: the fork does not exist
        nblocks = size if size > 0 else 0
        fate = self.faults.on_read(rel.name, fork, start, n, at_us)
        at = at_us + (fate.extra_us if fate is not None else 0)
        if start >= nblocks:
            return ReadOutcome(at + 1, 0, ReadBeyondEOF(rel.name, FORK_NAMES[fork], start, nblocks))
        ok = n if start + n <= nblocks else nblocks - start
        if fate is not None:
            if fate.eio:
                done = self._timing(rel, fork, start, n, at, nblocks)
                return ReadOutcome(done, 0, ReadIOError(rel.name, FORK_NAMES[fork], start, n))
            if 0 <= fate.ok_blocks < ok:
                ok = fate.ok_blocks
        self.physical_read_blocks += ok
        done = self._timing(rel, fork, start, ok, at, nblocks)
        corrupt = [b for b in fate.corrupt if b < start + ok] if fate is not None else ()
        return ReadOutcome(done, ok, None, corrupt)

    def _timing(self, rel: Relation, fork: ForkNumber, start: int, n: int, at: int, nblocks: int) -> int:
        key = (rel._tag_bases[fork] >> 16) | (start // RELSEG_SIZE)  # file_key, inlined
        if self.direct_io:
            return self.device.read(at, key, start, n)
        return self.page_cache.read(at, key, start, n, nblocks)

    def prefetch(self, rel: Relation, fork: ForkNumber, start: int, n: int, at_us: int) -> bool:
        """``smgrprefetch`` = ``posix_fadvise(WILLNEED)`` per segment; no-op with direct I/O."""
        if self.direct_io:
            return False
        nblocks = rel.nblocks(fork)
        end = min(start + n, nblocks)
        b = start
        while b < end:
            seg_end = min(end, (b // RELSEG_SIZE + 1) * RELSEG_SIZE)
            self.prefetch_calls += 1
            self.page_cache.advise(at_us, self.file_key(rel, fork, b), b, seg_end - b, nblocks)
            b = seg_end
        return True

    def write(self, rel: Relation, fork: ForkNumber | int, block: int, at_us: int) -> int:
        """Write one page (a dirty buffer being evicted); returns the completion time."""
        self.physical_writes += 1
        key = (rel._tag_bases[fork] >> 16) | (block // RELSEG_SIZE)  # file_key, inlined
        if self.direct_io:
            return self.device.write(at_us, key, block, 1)
        return self.page_cache.write(at_us, key, block)
