"""The shared buffer pool: slots, the mapping table, pins, usage counts and victim selection.

This is the part of ``buf_init.c``/``bufmgr.c``/``freelist.c`` that every backend shares:

* ``NBuffers`` slots, each with a tag (which block it holds), state flags (valid, dirty, I/O
  error, zeroed), a shared pin count and a usage count 0..5;
* the mapping table from tag to slot (``BufTableLookup``);
* victim selection (``StrategyGetBuffer``): the strategy's ring first, then the free list
  (every slot, in ascending order, at start-up), then the clock sweep, which decrements usage
  counts of unpinned buffers until it finds one at zero;
* I/Os in flight. A started read holds one extra pin on each of its buffers until it completes
  (``buffer_stage_common``), and marks them *I/O in progress* so that another backend waits for
  it instead of reading the block again (``StartBufferIO``/``WaitIO``). Completion times are known
  when a read is issued; a read completes when virtual time reaches that time and somebody looks
  (``poll``), which makes its buffers valid, leaves them invalid with an error, or (for a short
  read) leaves the undelivered tail to be read again.

Per-backend state (private reference counts, statistics) and the read functions themselves live
in ``bufmgr.Backend``. Buffer numbers are 0-based slot numbers; ``INVALID_BUFFER`` is -1
(PostgreSQL's ``Buffer`` is slot + 1 with 0 invalid).
"""

from __future__ import annotations

import itertools
from bisect import insort
from collections import deque
from typing import Any

from ..clock import VirtualClock
from ..errors import ChecksumFailure, ModelUsageError, NoUnpinnedBuffers
from ..io.handle import InflightIO, finish_io
from ..settings import Settings
from ..storage.relation import FORK_NAMES, ForkNumber, Relation
from ..storage.smgr import Storage
from .strategy import BAS_BULKREAD, BufferAccessStrategy

__all__ = [
    "BufferPool",
    "BufferPool19",
    "InflightIO",
    "INVALID_BUFFER",
    "BM_VALID",
    "BM_DIRTY",
    "BM_IO_ERROR",
    "BM_ZEROED",
    "BM_MAX_USAGE_COUNT",
    "SWEEP_CHUNK",
    "SWEEP_CHUNK_MASK",
]

INVALID_BUFFER = -1
BM_VALID = 1
BM_DIRTY = 2
BM_IO_ERROR = 4
BM_ZEROED = 8
BM_MAX_USAGE_COUNT = 5
# The clock sweep decrements whole chunks of this many buffers at once from a chunk boundary
# (BufferPool.sweep_chunks); a power of two.
SWEEP_CHUNK = 256
SWEEP_CHUNK_MASK = SWEEP_CHUNK - 1

# A buffer's flags once a read has delivered its page intact: valid, no I/O error.
_MAKE_VALID = bytes((f | BM_VALID) & ~BM_IO_ERROR for f in range(256))
# Runs of the values a read's consecutive buffers take, by length, assigned to slices without
# building a list per read; StartReadBuffers reads at most 128 blocks (MAX_IO_COMBINE_LIMIT).
_MAX_RUN = 128
_PINNED_ONCE = [[1] * n for n in range(_MAX_RUN + 1)]
_PINNED_TWICE = [[2] * n for n in range(_MAX_RUN + 1)]
_NO_IO = [[None] * n for n in range(_MAX_RUN + 1)]


class BufferPool:
    """Shared buffers of one instance (``BufferDescriptors``, ``SharedBufHash``, ``StrategyControl``)."""

    def __init__(self, settings: Settings, clock: VirtualClock, storage: Storage) -> None:
        n = settings.nbuffers
        self.settings = settings
        self.clock = clock
        self.storage = storage
        self.nbuffers = n
        self.tag: list[int] = [-1] * n
        self.flags = bytearray(n)
        self.refcount: list[int] = [0] * n
        self.usage: list[int] = [0] * n
        self.page_lsn: list[int] = [0] * n
        self.buf_io: list[InflightIO | None] = [None] * n
        self.mapping: dict[int, int] = {}
        # Every slot number, in order: a read's buffers are compared with a slice of it to find
        # out whether they are consecutive slots (the free list shares its int objects).
        self._slots = list(range(n))
        self.freelist: deque[int] = deque(self._slots)
        self.in_freelist = bytearray(b"\x01" * n)
        self.next_victim = 0
        self.complete_passes = 0
        self.num_allocs = 0
        self.pin_limit = settings.pin_limit  # MaxProportionalPins
        # Scheduled completions as (complete_at, seq, ioh), kept sorted, which is also a valid
        # heap: [0] is the next one due. Reads are almost always scheduled in completion order,
        # so keeping it sorted is an append, and taking the next one a pop from the front of a
        # list as short as the reads in flight.
        self._completions: list[tuple[int, int, InflightIO]] = []
        self._io_seq = itertools.count(1)
        # WAL position model for StrategyRejectBuffer / XLogNeedsFlush.
        self.wal_insert_lsn = 0
        self.wal_flushed_lsn = 0
        self.foreign_reads = 0

    # ------------------------------------------------------------------------------ in-flight I/O
    def register_io(self, ioh: InflightIO) -> None:
        """Mark ``ioh``'s buffers I/O-in-progress and pinned by the I/O (``buffer_stage_common``).

        ``ioh.consecutive`` may be set by a caller that has compared the buffers with the slots
        already; otherwise they are compared here (and it is cleared for a read longer than
        any StartReadBuffers issues).
        """
        bufs = ioh.bufs
        n = len(bufs)
        buf_io = self.buf_io
        refcount = self.refcount
        if n == 1:
            # A one-block read (ReadBuffer, a sampled block, a stream's fast path).
            b = bufs[0]
            ioh.consecutive = False
            buf_io[b] = ioh
            refcount[b] += 1
        elif n <= _MAX_RUN and (ioh.consecutive or (n > 1 and bufs == self._slots[bufs[0] : bufs[0] + n])):
            # Consecutive slots (a scan's usual read): the same updates, as slices.
            lo = bufs[0]
            hi = lo + n
            ioh.consecutive = True
            buf_io[lo:hi] = [ioh] * n
            pins = refcount[lo:hi]
            # Usually each buffer is pinned once, by the backend that issues the read.
            refcount[lo:hi] = _PINNED_TWICE[n] if pins.count(1) == n else [c + 1 for c in pins]
        else:
            ioh.consecutive = False
            for b in bufs:
                buf_io[b] = ioh
                refcount[b] += 1
        ioh.seq = next(self._io_seq)

    def schedule_completion(self, ioh: InflightIO) -> None:
        """Queue ``ioh``'s completion at ``ioh.complete_at`` (ties: in the order reads were issued)."""
        entry = (ioh.complete_at, ioh.seq, ioh)
        comps = self._completions
        if not comps or comps[-1] < entry:
            comps.append(entry)
        else:
            insort(comps, entry)

    def poll(self) -> None:
        """Complete every in-flight read whose completion time has been reached."""
        comps = self._completions
        now = self.clock.now
        while comps and comps[0][0] <= now:
            ioh = comps.pop(0)[2]
            if not ioh.done:
                self.complete_io(ioh)

    def complete_io(self, ioh: InflightIO) -> None:
        """Terminate the I/O: valid / error / short-read tail, and drop the I/O's pins."""
        if ioh.local is not None:
            # A read into a backend's local buffers (a temporary relation).
            ioh.local.complete_io(ioh)
            return
        out = ioh.outcome
        if out is None:
            raise ModelUsageError(f"{ioh!r} completed before it was issued")
        buf_io = self.buf_io
        flags = self.flags
        refcount = self.refcount
        ok = out.ok_blocks
        corrupt = out.corrupt
        error = out.error
        bufs = ioh.bufs
        n = len(bufs)
        if not corrupt and ok == n:
            # Every block arrived intact (the usual case): each buffer becomes valid.
            if n == 1:
                b = bufs[0]
                buf_io[b] = None
                refcount[b] -= 1
                flags[b] = _MAKE_VALID[flags[b]]
            elif ioh.consecutive:
                lo = bufs[0]
                hi = lo + n
                buf_io[lo:hi] = _NO_IO[n]
                pins = refcount[lo:hi]
                # Usually each buffer is pinned by the I/O and by the backend waiting for it.
                refcount[lo:hi] = _PINNED_ONCE[n] if pins.count(2) == n else [c - 1 for c in pins]
                flags[lo:hi] = flags[lo:hi].translate(_MAKE_VALID)
            else:
                no_error = ~BM_IO_ERROR
                for b in bufs:
                    buf_io[b] = None
                    refcount[b] -= 1
                    flags[b] = (flags[b] | BM_VALID) & no_error
            finish_io(ioh, ok, error)
            return
        for i, b in enumerate(bufs):
            buf_io[b] = None
            refcount[b] -= 1
            if i < ok:
                if corrupt and (ioh.start + i) in corrupt:
                    if ioh.zero_on_error:
                        flags[b] = (flags[b] | BM_VALID | BM_ZEROED) & ~BM_IO_ERROR
                    elif ioh.ignore_checksum:
                        flags[b] = (flags[b] | BM_VALID) & ~BM_IO_ERROR
                    else:
                        flags[b] = (flags[b] & ~BM_VALID) | BM_IO_ERROR
                        if error is None:
                            error = ChecksumFailure(ioh.rel.name, FORK_NAMES[ioh.fork], ioh.start + i)
                else:
                    flags[b] = (flags[b] | BM_VALID) & ~BM_IO_ERROR
            elif error is not None:
                flags[b] = (flags[b] & ~BM_VALID) | BM_IO_ERROR
        finish_io(ioh, ok, error)

    def wait_io(self, ioh: InflightIO) -> None:
        """Block until ``ioh`` has completed (``WaitIO`` / ``pgaio_wref_wait``); every read due
        by then completes first, in completion order."""
        if not ioh.done:
            clock = self.clock
            if ioh.complete_at > clock.now:
                if clock._sim is None:
                    clock.now = ioh.complete_at  # VirtualClock.wait_until outside a Simulation
                else:
                    clock.wait_until(ioh.complete_at)
            self.poll()
            if not ioh.done:  # completion time reached but not yet polled in completion order
                self.complete_io(ioh)

    def wait_for_owner(self, owner: int) -> None:
        """Wait until every read backend ``owner`` issued has completed (what an observer
        polling ``pg_aios`` for that backend waits for). Staged ``sync`` reads were never issued."""
        for _, _, ioh in sorted(self._completions):
            if ioh.owner == owner and not ioh.done:
                self.wait_io(ioh)

    # ------------------------------------------------------------------------------ victims
    def strategy_get_buffer(self, strategy: BufferAccessStrategy | None) -> tuple[int, bool]:
        """``StrategyGetBuffer``: (buffer, came_from_ring)."""
        refcount = self.refcount
        usage = self.usage
        if strategy is not None:
            cur = strategy.current + 1
            if cur >= strategy.nbuffers:
                cur = 0
            strategy.current = cur
            b = strategy.buffers[cur]
            if b >= 0 and refcount[b] == 0 and usage[b] <= 1:
                return b, True
        return self.get_buffer_outside_ring(strategy), False

    def get_buffer_outside_ring(self, strategy: BufferAccessStrategy | None) -> int:
        """The free list, then the clock sweep; the buffer takes the ring's current slot."""
        refcount = self.refcount
        usage = self.usage
        self.num_allocs += 1
        freelist = self.freelist
        while freelist:
            b = freelist.popleft()
            self.in_freelist[b] = 0
            if refcount[b] == 0 and usage[b] == 0:
                if strategy is not None:
                    strategy.buffers[strategy.current] = b
                return b
        n = self.nbuffers
        trycounter = n
        while True:
            b = self.next_victim
            nb = b + 1
            if nb >= n:
                nb = 0
                self.complete_passes += 1
            self.next_victim = nb
            if refcount[b] == 0:
                u = usage[b]
                if u:
                    usage[b] = u - 1
                    trycounter = n
                    if not nb & SWEEP_CHUNK_MASK:
                        self.sweep_chunks()
                else:
                    if strategy is not None:
                        strategy.buffers[strategy.current] = b
                    return b
            else:
                trycounter -= 1
                if trycounter == 0:
                    raise NoUnpinnedBuffers()

    def get_clean_victim_outside_ring(self) -> int:
        """:meth:`get_buffer_outside_ring` without a ring for a victim that needs no write: the
        buffer, counted in ``num_allocs``, or -1 where the search must go on block by block.

        The search stops, leaving the free list and the clock hand where that search continues,
        before a dirty victim (writing it moves time, after which due completions change pins)
        and at a pinned buffer on the clock, where a search counts down towards
        ``NoUnpinnedBuffers`` (no count is lost: each usage decrement restarted it). Free-list
        entries in use are dropped and usage counts decremented as the search goes, exactly as
        :meth:`get_buffer_outside_ring` does.
        """
        refcount = self.refcount
        usage = self.usage
        flags = self.flags
        freelist = self.freelist
        while freelist:
            b = freelist[0]
            if not refcount[b] and not usage[b]:
                if flags[b] & BM_DIRTY:
                    return -1
                freelist.popleft()
                self.in_freelist[b] = 0
                self.num_allocs += 1
                return b
            freelist.popleft()
            self.in_freelist[b] = 0
        n = self.nbuffers
        b = self.next_victim
        while True:
            if refcount[b]:
                self.next_victim = b
                return -1
            u = usage[b]
            if not u and flags[b] & BM_DIRTY:
                self.next_victim = b
                return -1
            nb = b + 1
            if nb == n:
                nb = 0
                self.complete_passes += 1
            if not u:
                self.next_victim = nb
                self.num_allocs += 1
                return b
            usage[b] = u - 1
            b = nb
            if not b & SWEEP_CHUNK_MASK:
                self.next_victim = b
                b = self.sweep_chunks()

    def sweep_chunks(self) -> int:
        """The clock sweep over whole chunks of unpinned buffers in use, from the hand at a chunk
        boundary; returns the new hand.

        Where every buffer of the next ``SWEEP_CHUNK`` (or up to the pool's end) is unpinned and
        has a usage count, the sweep decrements each and passes on, restarting its countdown
        each time; so the whole chunk is decremented at once. It stops at the first chunk with a
        pinned or unused buffer, which the caller sweeps buffer by buffer.
        """
        refcount = self.refcount
        usage = self.usage
        n = self.nbuffers
        b = self.next_victim
        while True:
            e = min(b + SWEEP_CHUNK, n)
            counts = usage[b:e]
            if 0 in counts or any(refcount[b:e]):
                return b
            if counts.count(1) == e - b:
                usage[b:e] = itertools.repeat(0, e - b)
            else:
                usage[b:e] = [u - 1 for u in counts]
            if e == n:
                e = 0
                self.complete_passes += 1
            b = self.next_victim = e

    def strategy_reject_buffer(self, strategy: BufferAccessStrategy, buf: int, from_ring: bool) -> bool:
        """``StrategyRejectBuffer``: BULKREAD drops a dirty ring buffer that needs a WAL flush."""
        if strategy.btype is not BAS_BULKREAD:
            return False
        if not from_ring or strategy.buffers[strategy.current] != buf:
            return False
        strategy.buffers[strategy.current] = INVALID_BUFFER
        return True

    def strategy_free_buffer(self, buf: int) -> None:
        """``StrategyFreeBuffer``: put a buffer at the head of the free list."""
        if not self.in_freelist[buf]:
            self.in_freelist[buf] = 1
            self.freelist.appendleft(buf)

    def xlog_needs_flush(self, lsn: int) -> bool:
        return lsn > self.wal_flushed_lsn

    # ------------------------------------------------------------------------------ maintenance
    def invalidate_buffer(self, buf: int) -> None:
        """``InvalidateBuffer``: forget a slot's page and return it to the free list."""
        if self.refcount[buf]:
            raise ModelUsageError(f"cannot invalidate buffer {buf}: it is pinned")
        t = self.tag[buf]
        if t >= 0:
            del self.mapping[t]
        self.tag[buf] = -1
        self.flags[buf] = 0
        self.usage[buf] = 0
        self.strategy_free_buffer(buf)

    def drop_relation_buffers(
        self, rel: Relation, fork: ForkNumber | None = None, first_block: int = 0
    ) -> int:
        """``DropRelationBuffers``: drop every page of ``rel`` (a fork, from a block on)."""
        forks = [fork] if fork is not None else list(ForkNumber)
        dropped = 0
        for f in forks:
            base = rel.tag_base(f)
            for t, b in list(self.mapping.items()):
                if base <= t < base + (1 << 32) and t - base >= first_block:
                    self.poll()
                    if self.buf_io[b] is not None:
                        self.wait_io(self.buf_io[b])  # type: ignore[arg-type]
                    self.invalidate_buffer(b)
                    dropped += 1
        return dropped

    def evict_relation(self, rel: Relation) -> tuple[int, int]:
        """``pg_buffercache_evict_relation``: (evicted, skipped) for unpinned valid buffers.

        Buffers that are mapped but not valid (a staged read never executed) are skipped, as the
        server does. Dirty buffers are written first.
        """
        self.poll()
        evicted = skipped = 0
        lo = rel.tag_base(ForkNumber.MAIN)
        hi = rel.tag_base(ForkNumber.INIT) + (1 << 32)
        for t, b in list(self.mapping.items()):
            if not (lo <= t < hi):
                continue
            if self.refcount[b] or not (self.flags[b] & BM_VALID):
                skipped += 1
                continue
            if self.flags[b] & BM_DIRTY:
                _, fork, block = Relation.split_tag(t)
                self.storage.write(rel, fork, block, self.clock.now)
                self.flags[b] &= ~BM_DIRTY
            t2 = self.tag[b]
            del self.mapping[t2]
            self.tag[b] = -1
            self.flags[b] = 0
            self.usage[b] = 0
            evicted += 1
        return evicted, skipped

    def evict_all(self) -> int:
        """Evict every unpinned valid buffer (a cold start between runs)."""
        n = 0
        for rel in self.storage.relations():
            n += self.evict_relation(rel)[0]
        return n

    # ------------------------------------------------------------------------------ queries
    def lookup(self, rel: Relation, fork: ForkNumber, block: int) -> int:
        """The slot holding a block, or ``INVALID_BUFFER`` (no pin, like ``BufTableLookup``)."""
        return self.mapping.get(rel.tag(fork, block), INVALID_BUFFER)

    def is_valid(self, buf: int) -> bool:
        self.poll()
        return bool(self.flags[buf] & BM_VALID)

    def resident_blocks(self, rel: Relation, fork: ForkNumber = ForkNumber.MAIN) -> set[int]:
        """Valid pages of a relation fork in the pool (what ``pg_buffercache`` shows)."""
        self.poll()
        base = rel.tag_base(fork)
        flags = self.flags
        return {
            t - base for t, b in self.mapping.items() if base <= t < base + (1 << 32) and flags[b] & BM_VALID
        }

    def mapped_invalid_blocks(self, rel: Relation, fork: ForkNumber = ForkNumber.MAIN) -> set[int]:
        """Pages mapped to a slot but not valid (staged reads never executed, failed reads)."""
        self.poll()
        base = rel.tag_base(fork)
        flags = self.flags
        return {
            t - base
            for t, b in self.mapping.items()
            if base <= t < base + (1 << 32) and not flags[b] & BM_VALID and self.buf_io[b] is None
        }

    def pinned_buffers(self) -> dict[int, int]:
        """Buffers with a non-zero shared pin count (``pinning_backends`` > 0)."""
        return {b: c for b, c in enumerate(self.refcount) if c}

    def buffer_state(self, buf: int) -> dict[str, Any]:
        t = self.tag[buf]
        relid, fork, block = Relation.split_tag(t) if t >= 0 else (None, None, None)
        return {
            "buffer": buf,
            "relid": relid,
            "fork": None if fork is None else FORK_NAMES[fork],
            "block": block,
            "valid": bool(self.flags[buf] & BM_VALID),
            "dirty": bool(self.flags[buf] & BM_DIRTY),
            "io_error": bool(self.flags[buf] & BM_IO_ERROR),
            "usage": self.usage[buf],
            "pins": self.refcount[buf],
            "io_in_progress": self.buf_io[buf] is not None,
        }

    def ios_in_flight(self) -> int:
        return sum(1 for _, _, ioh in self._completions if not ioh.done)


class BufferPool19(BufferPool):
    """The shared buffer pool of PostgreSQL 19 and later: no free list (``freelist.c``).

    19 removed ``firstFreeBuffer``/``lastFreeBuffer``, ``StrategyFreeBuffer`` and
    ``have_free_buffer``: ``StrategyGetBuffer`` is the ring, then the clock sweep alone. A new
    pool's buffers (all unused) are found by the sweep from buffer 0, in the same order the free
    list gave them, but the hand moves (a complete pass when it wraps), and a buffer
    ``InvalidateBuffer`` drops (``DropRelationBuffers``) is no longer put first in line: the
    sweep reaches it when it gets there (usage count 0). The free list of the base class stays
    empty, so every victim search in the model goes straight to the sweep.
    """

    def __init__(self, settings: Settings, clock: VirtualClock, storage: Storage) -> None:
        super().__init__(settings, clock, storage)
        # StrategyCtlShmemInit: the clock-sweep hand at 0, and no list of free buffers.
        self.freelist.clear()
        self.in_freelist = bytearray(self.nbuffers)

    def invalidate_buffer(self, buf: int) -> None:
        """``InvalidateBuffer`` of PostgreSQL 19: forget a slot's page (tag, flags and usage
        count cleared); no ``StrategyFreeBuffer``."""
        if self.refcount[buf]:
            raise ModelUsageError(f"cannot invalidate buffer {buf}: it is pinned")
        t = self.tag[buf]
        if t >= 0:
            del self.mapping[t]
        self.tag[buf] = -1
        self.flags[buf] = 0
        self.usage[buf] = 0

    def strategy_free_buffer(self, buf: int) -> None:
        """PostgreSQL 19 has no free list (``StrategyFreeBuffer`` is gone)."""
        raise ModelUsageError("StrategyFreeBuffer does not exist in PostgreSQL 19: there is no free list")
