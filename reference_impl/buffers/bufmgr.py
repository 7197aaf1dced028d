"""One backend's buffer manager: pinning, ``StartReadBuffers``/``WaitReadBuffers``, ``ReadBuffer``.

This module is the harness's view of PostgreSQL's ``bufmgr.c`` read path, and the object handed
to a ``ReadStream`` implementation. Everything a stream does to the buffer pool goes through it,
so pins, hits and reads are observed here, outside the stream, exactly as a real server's
``pg_stat_io`` and ``pg_buffercache`` see them.

The read path (PostgreSQL 18):

``start_read_buffers(op, buffers, index, block, n, flags)`` pins ``n`` consecutive blocks in
order (``PinBufferForBlock``). A hit on the first block ends the call at once: one block, no I/O.
A hit on a later block cuts the read before it and leaves that buffer pinned for the caller to
pass back (*forwarding*). A miss on the first block caps the read at the segment boundary
(``mdmaxcombine``), so blocks beyond it are not even pinned. Then, with an asynchronous
``io_method``, one I/O is issued at once (``AsyncReadBuffers``), covering the blocks from the first
for which I/O can be started up to the first whose I/O another backend has in progress; with
``io_method=sync`` nothing is read yet (read-ahead advice may be given).

``wait_read_buffers(op)`` waits for the I/O (or, under ``sync``, performs it), raises the read's
error if it failed, and keeps issuing I/Os for blocks still not done (a short read, or blocks
another backend was reading), counting blocks somebody else made valid meanwhile as hits.

``read_buffer`` is the unstreamed ``ReadBufferExtended``: a one-block ``StartReadBuffer`` flagged
synchronous, so a miss costs exactly one one-block read done by the backend itself, even under
``io_method=worker``.

Private reference counts follow ``PrivateRefCount`` exactly (see ``refcount.py``), because the
pin budget a stream gets (``get_additional_pin_limit``) is computed from them.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Protocol

from ..clock import VirtualClock
from ..costs import CpuCosts
from ..errors import (
    ModelUsageError,
    NoUnpinnedBuffers,
    OtherSessionTempRelation,
    PgError,
    PinLeakError,
    QueryCanceled,
)
from ..io.methods import IOMethod
from ..observer import ReadPathObserver, combine, overrides
from ..settings import Settings
from ..stats import BackendStats, ReadRecord, RelationStats
from ..storage.device import Device
from ..storage.relation import FORK_NAMES, RELSEG_SIZE, ForkNumber, Relation
from ..storage.smgr import Storage
from .localbuf import LocalBuffers, buffer_is_local, local_buffer, local_id
from .pool import (
    BM_DIRTY,
    BM_MAX_USAGE_COUNT,
    BM_VALID,
    BM_ZEROED,
    INVALID_BUFFER,
    SWEEP_CHUNK_MASK,
    BufferPool,
    InflightIO,
)
from .refcount import REFCOUNT_ARRAY_ENTRIES, PrivateRefCount
from .strategy import BufferAccessStrategy, io_context_for_strategy

__all__ = [
    "Backend",
    "ReadBuffersOperation",
    "READ_BUFFERS_ZERO_ON_ERROR",
    "READ_BUFFERS_ISSUE_ADVICE",
    "READ_BUFFERS_IGNORE_CHECKSUM_FAILURES",
    "READ_BUFFERS_SYNCHRONOUSLY",
    "RBM_NORMAL",
    "RBM_ZERO_ON_ERROR",
    "RBM_ZERO_AND_LOCK",
]

READ_BUFFERS_ZERO_ON_ERROR = 1 << 0
READ_BUFFERS_ISSUE_ADVICE = 1 << 1
READ_BUFFERS_IGNORE_CHECKSUM_FAILURES = 1 << 2
READ_BUFFERS_SYNCHRONOUSLY = 1 << 3

RBM_NORMAL = "normal"
RBM_ZERO_ON_ERROR = "zero_on_error"
RBM_ZERO_AND_LOCK = "zero_and_lock"
_MODES = (RBM_NORMAL, RBM_ZERO_ON_ERROR, RBM_ZERO_AND_LOCK)


class BufferManagerHost(Protocol):
    """The instance a backend runs on (:class:`~reference_impl.instance.Instance`), as the
    buffer manager uses it: the shared buffer pool, storage, the I/O method and the clock.

    The instance starts backends, so it depends on this module; this module knows it only
    through this protocol.
    """

    settings: Settings
    clock: VirtualClock
    costs: CpuCosts
    device: Device
    storage: Storage
    pool: BufferPool
    io_method: IOMethod
    debug: bool

    def prewarm(self, rel: Relation, blocks: range | list[int] | None = None, fork: ForkNumber = ...) -> None:
        """Make blocks resident without counting anything (``Instance.prewarm``)."""


class ReadBuffersOperation:
    """``ReadBuffersOperation``: the caller-owned state of one started read."""

    __slots__ = (
        "rel",
        "fork",
        "strategy",
        "buffers",
        "index",
        "blocknum",
        "nblocks",
        "nblocks_done",
        "flags",
        "ioh",
        "context",
        "relstats",
        "foreign_io",
    )

    def __init__(
        self,
        rel: Relation,
        fork: ForkNumber = ForkNumber.MAIN,
        strategy: BufferAccessStrategy | None = None,
    ) -> None:
        self.rel = rel
        self.fork = fork
        self.strategy = strategy
        self.buffers: list[int] = []
        self.index = 0
        self.blocknum = 0
        self.nblocks = 0
        self.nblocks_done = 0
        self.flags = 0
        self.ioh: InflightIO | None = None
        self.context = "normal" if strategy is None else strategy.context  # IOContextForStrategy
        self.relstats: Any = None
        # PostgreSQL 19: the head block's I/O was in progress (this backend's or another's) and
        # ``ioh`` is that I/O, which WaitReadBuffers waits for (``operation->foreign_io``).
        self.foreign_io = False

    def set_strategy(self, strategy: BufferAccessStrategy | None) -> None:
        self.strategy = strategy
        self.context = io_context_for_strategy(strategy)


class Backend:
    """One backend process's buffer manager state and read functions (``bufmgr.c``), as
    PostgreSQL 18 has them; :class:`~reference_impl.buffers.bufmgr19.Backend19` is 19's."""

    #: The private reference counts' implementation (``PrivateRefCountArray`` and hash).
    refcount_class: type[PrivateRefCount] = PrivateRefCount

    def __init__(
        self,
        instance: BufferManagerHost,
        backend_id: int,
        name: str,
        *,
        record_reads: bool = True,
    ) -> None:
        self.instance = instance
        self.id = backend_id
        self.name = name
        self.pool: BufferPool = instance.pool
        self.clock = instance.clock
        self.settings = instance.settings
        self.storage = instance.storage
        self.io_method = instance.io_method
        self.costs = instance.costs
        self.refs = self.refcount_class()
        # The private count's two tables and the shared pin counts, which are never replaced,
        # for the per-block paths.
        self._ref_pos = self.refs.pos
        self._ref_ovf = self.refs.ovf
        self._refcount = self.pool.refcount
        self.stats = BackendStats(read_log=[] if record_reads else None)
        self.warnings: list[str] = []
        self.vacuum_cost_active = False
        self._cpu_debt = 0.0
        self._zero_damaged = instance.settings.zero_damaged_pages
        self._ignore_checksum = instance.settings.ignore_checksum_failure
        self._sync_method = self.io_method.name == "sync"
        self.cancel_pending = False
        # Heuristic read-ahead for unstreamed reads (``reference_impl.readahead``), off unless
        # asked for: an object with ``on_read_buffer(backend, rel, fork, block, strategy)``.
        self.readahead: Any = None
        # The local buffers of this backend's temporary relations (localbuf.c), made on first use.
        self.local: LocalBuffers | None = None
        # Read-path observers (reference_impl.observer): none, one, or a fan-out to several.
        self._observers: tuple[ReadPathObserver, ...] = ()
        # Per group of events, the observers that listen to it (see _set_observers): None when
        # none does, so an event nobody overrides costs its site one test.
        self._stream_observer: ReadPathObserver | None = None
        self._start_observer: ReadPathObserver | None = None
        self._io_observer: ReadPathObserver | None = None
        self._wait_observer: ReadPathObserver | None = None
        self._release_observer: ReadPathObserver | None = None
        self._flush_observer: ReadPathObserver | None = None
        # Set while an observed StartReadBuffers / WaitReadBuffers runs its body.
        self._in_observed_start = False
        self._in_observed_wait = False

    # ------------------------------------------------------------------------------ observers
    def add_observer(self, observer: ReadPathObserver) -> None:
        """Attach ``observer`` to this backend's read path (see :mod:`reference_impl.observer`)."""
        if not isinstance(observer, ReadPathObserver):
            raise ModelUsageError(f"{observer!r} is not a ReadPathObserver")
        if observer not in self._observers:
            self._set_observers((*self._observers, observer))

    def remove_observer(self, observer: ReadPathObserver) -> None:
        """Detach ``observer`` (nothing happens if it is not attached)."""
        if observer in self._observers:
            self._set_observers(tuple(o for o in self._observers if o is not observer))

    def _set_observers(self, observers: tuple[ReadPathObserver, ...]) -> None:
        self._observers = observers

        def listening(*events: str) -> ReadPathObserver | None:
            return combine(tuple(o for o in observers if any(overrides(o, e) for e in events)))

        # Each site calls only the observers that override one of its events: a flush timer
        # adds nothing to a read, a wait recorder nothing to a pin or a release.
        self._stream_observer = listening("stream_begun")
        self._start_observer = listening("read_buffers_starting", "read_buffers_started")
        self._io_observer = listening("io_issued", "io_completed")
        self._wait_observer = listening("read_buffers_waiting", "read_buffers_waited")
        self._release_observer = listening("buffer_released")
        self._flush_observer = listening("buffer_flushed")

    @property
    def observers(self) -> tuple[ReadPathObserver, ...]:
        """The attached observers, in the order they hear each event."""
        return self._observers

    # ------------------------------------------------------------------------------ time
    @property
    def now(self) -> int:
        return self.clock.now

    def cpu(self, us: float) -> None:
        """Spend ``us`` microseconds of CPU (fractions accumulate)."""
        d = self._cpu_debt + us
        if d >= 1.0:
            whole = int(d)
            self._cpu_debt = d - whole
            clock = self.clock
            if clock._sim is None:
                clock.now += whole  # VirtualClock.advance outside a Simulation
            else:
                clock.advance(whole)
        else:
            self._cpu_debt = d

    def check_for_interrupts(self) -> None:
        """``CHECK_FOR_INTERRUPTS``: raise a pending cancel."""
        if self.cancel_pending:
            self.cancel_pending = False
            raise QueryCanceled()

    # ------------------------------------------------------------------------------ pin limits
    def get_pin_limit(self) -> int:
        """``GetPinLimit()`` = ``MaxProportionalPins``."""
        return self.pool.pin_limit

    def get_additional_pin_limit(self) -> int:
        """``GetAdditionalPinLimit()``: the fair share minus the *estimated* pins held."""
        est = self.refs.estimated_pins
        limit = self.pool.pin_limit
        return 0 if est > limit else limit - est

    def limit_additional_pins(self, n: int) -> int:
        """``LimitAdditionalPins``."""
        if n <= 1:
            return n
        return min(n, max(self.get_additional_pin_limit(), 1))

    def pinned_buffers(self) -> dict[int, int]:
        """Buffers this backend pins, with its private pin count of each."""
        return self.refs.pinned()

    # ------------------------------------------------------------------------------ pins
    def _relstats(self, rel: Relation) -> Any:
        return self.stats.relation(rel.name)

    def pin_buffer_for_block(
        self,
        rel: Relation,
        fork: ForkNumber,
        block: int,
        strategy: BufferAccessStrategy | None,
        context: str,
        relstats: Any,
    ) -> tuple[int, bool]:
        """``PinBufferForBlock`` → ``BufferAlloc``: (buffer, found-valid)."""
        pool = self.pool
        refs = self.refs
        refs.reserve()
        tag = rel.tag(fork, block)
        buf = pool.mapping.get(tag)
        if buf is not None:
            return buf, self._pin_mapped(buf, strategy, context, relstats)
        buf = self._get_victim_buffer(strategy, context)
        pool.mapping[tag] = buf
        pool.tag[buf] = tag
        pool.flags[buf] = 0
        pool.usage[buf] = 1
        relstats.blks_fetched += 1
        return buf, False

    def _pin_mapped(
        self, buf: int, strategy: BufferAccessStrategy | None, context: str, relstats: Any
    ) -> bool:
        """``PinBuffer`` on a buffer found in the mapping table; True if it is valid (a hit)."""
        pool = self.pool
        if self.refs.pin(buf):
            pool.refcount[buf] += 1
            u = pool.usage[buf]
            if strategy is None:
                if u < BM_MAX_USAGE_COUNT:
                    pool.usage[buf] = u + 1
            elif u == 0:
                pool.usage[buf] = 1
        if pool._completions and pool._completions[0][0] <= self.clock.now:
            pool.poll()
        relstats.blks_fetched += 1
        if not pool.flags[buf] & BM_VALID:
            return False
        relstats.blks_hit += 1
        st = self.stats
        st.shared_blks_hit += 1
        st.io[context].hits += 1
        if self.vacuum_cost_active:
            st.vacuum_cost_balance += self.settings.vacuum_cost_page_hit
        return True

    def _get_victim_buffer(self, strategy: BufferAccessStrategy | None, context: str) -> int:
        """``GetVictimBuffer``: a clean, unmapped, pinned buffer."""
        pool = self.pool
        refs = self.refs
        if strategy is not None and strategy.freed:
            # Use after free: PostgreSQL 18's heap_rescan bug. In C the ring's memory is usually
            # still intact, so the model goes on with it and counts the uses; debug mode stops.
            strategy.uses_after_free += 1
            if self.instance.debug:
                raise ModelUsageError(f"{strategy!r} was freed and is still used (dangling strategy pointer)")
        if refs.reserved < 0:
            refs.reserve()
        if pool._completions and pool._completions[0][0] <= self.clock.now:
            pool.poll()
        while True:
            if strategy is not None:
                # GetBufferFromRing, inlined: the next ring slot if its buffer can be reused.
                cur = strategy.current + 1
                if cur >= strategy.nbuffers:
                    cur = 0
                strategy.current = cur
                buf = strategy.buffers[cur]
                if buf >= 0 and pool.refcount[buf] == 0 and pool.usage[buf] <= 1:
                    from_ring = True
                else:
                    buf = pool.get_buffer_outside_ring(strategy)
                    from_ring = False
            else:
                buf, from_ring = pool.strategy_get_buffer(strategy)
            # PinBuffer_Locked: the reserved private entry takes the buffer.
            i = refs.reserved
            refs.reserved = -1
            refs.arr_buf[i] = buf
            refs.arr_cnt[i] = 1
            refs.pos[buf] = i
            pool.refcount[buf] += 1
            f = pool.flags[buf]
            if f & BM_DIRTY:
                needs_flush = pool.xlog_needs_flush(pool.page_lsn[buf])
                if (
                    strategy is not None
                    and needs_flush
                    and pool.strategy_reject_buffer(strategy, buf, from_ring)
                ):
                    self._unpin(buf)
                    continue
                self._write_victim(buf, context)
            if f & BM_VALID:
                if from_ring:
                    self.stats.io[context].reuses += 1
                else:
                    self.stats.io[context].evictions += 1
            t = pool.tag[buf]
            if t >= 0:
                del pool.mapping[t]
                pool.tag[buf] = -1
            pool.flags[buf] = 0
            pool.usage[buf] = 0
            return buf

    def _alloc_unmapped_run(self, tag: int, n: int, buffers: list[int], index: int) -> tuple[int, int]:
        """``PinBufferForBlock`` → ``BufferAlloc`` without a ring for the blocks from ``tag``,
        the first of which is not in the pool, up to ``n`` of them, as far as each is not in the
        pool and its victim is clean: (blocks pinned, victims that held a valid page).

        The steps are those of :meth:`start_read_buffers`' loop for a miss, in the same order
        (each block is looked up after the previous victim's old block was unmapped). Reads due
        are completed once, before the first victim: only a write moves time, and no victim here
        needs one. A victim is the clock hand's buffer, or the free list's head, when it is
        unpinned, unused and clean (the usual cases), else
        :meth:`BufferPool.get_clean_victim_outside_ring`'s, which stops before a dirty victim or
        at a pinned buffer. Each victim is pinned and given usage 1 before the next search,
        which thus passes over it. Its private entry is taken afterwards, for the whole run
        (:meth:`PrivateRefCount.pin_new_run`): nothing in between reads the private counts. The
        caller goes on block by block from the first block not done.

        Where the free list's head, or (the list empty) the buffers from the clock hand up to
        the pool's end, are consecutive slots that are all such usual victims,
        :meth:`_take_slot_run` takes them up to the first block found in the pool; the loop
        goes on from the first block not done that way.
        """
        pool = self.pool
        comps = pool._completions
        if comps and comps[0][0] <= self.clock.now:
            pool.poll()
        mapping = pool.mapping
        pool_tag = pool.tag
        pool_flags = pool.flags
        refcount = pool.refcount
        usage = pool.usage
        freelist = pool.freelist
        nbuffers = pool.nbuffers
        j = index  # the next slot of buffers
        valid = searched = 0
        if freelist:
            # The free list's head: every buffer in ascending order at start-up, and after a
            # relation's buffers were dropped, the dropped ones.
            lo = freelist[0]
            m = min(n, len(freelist), nbuffers - lo)
            if list(islice(freelist, m)) == pool._slots[lo : lo + m]:
                k, valid = self._take_slot_run(tag, lo, m, buffers, j)
                if k:
                    for _ in range(k):
                        freelist.popleft()
                    pool.in_freelist[lo : lo + k] = bytes(k)
                    j += k
        hand = pool.next_victim
        if not freelist and j - index < n:
            # The clock sweep from the hand, up to the pool's end.
            m = min(n - (j - index), nbuffers - hand)
            k, v = self._take_slot_run(tag + j - index, hand, m, buffers, j)
            if k:
                hand += k
                if hand == nbuffers:
                    hand = 0
                    pool.complete_passes += 1
                valid += v
                j += k
        for t in range(tag + j - index, tag + n):
            if t in mapping:
                break
            if (
                not freelist
                and not refcount[hand]
                and not usage[hand]
                and not (f := pool_flags[hand]) & BM_DIRTY
            ):
                # The clock sweep's usual case: the buffer under the hand is the victim.
                b = hand
                hand += 1
                if hand == nbuffers:
                    hand = 0
                    pool.complete_passes += 1
            elif (
                freelist
                and not refcount[b := freelist[0]]
                and not usage[b]
                and not (f := pool_flags[b]) & BM_DIRTY
            ):
                # The free list's usual case: its head is the victim.
                freelist.popleft()
                pool.in_freelist[b] = 0
            else:
                pool.next_victim = hand
                b = pool.get_clean_victim_outside_ring()  # counts its allocation
                hand = pool.next_victim
                if b < 0:
                    break
                f = pool_flags[b]
                searched += 1
            if f & BM_VALID:
                valid += 1
            refcount[b] = 1
            usage[b] = 1
            pool_flags[b] = 0
            old = pool_tag[b]
            if old >= 0:
                del mapping[old]
            mapping[t] = b
            pool_tag[b] = t
            buffers[j] = b
            j += 1
        pool.next_victim = hand
        k = j - index
        pool.num_allocs += k - searched
        if k:
            self.refs.pin_new_run(buffers[index:j])
        return k, valid

    def _alloc_ring_run(
        self, strategy: BufferAccessStrategy, tag: int, n: int, buffers: list[int], index: int
    ) -> tuple[int, int, int]:
        """:meth:`_alloc_unmapped_run` for a read through ``strategy``'s ring (not freed): the
        blocks from ``tag``, the first of which is not in the pool, up to ``n`` of them, as far
        as each is not in the pool and its victim is clean: (blocks pinned, victims from the
        ring that held a valid page, other victims that did), counted by the caller as reuses
        and evictions.

        The steps are those of :meth:`start_read_buffers`' loop for a miss with a ring, in the
        same order, and a run can be done at once for :meth:`_alloc_unmapped_run`'s reasons:
        reads due are completed once, before the first victim, as no victim here needs a write;
        each victim is pinned and given usage 1 before the next one is chosen; the private
        entries are taken afterwards for the whole run (:meth:`PrivateRefCount.pin_new_run`).
        A victim is the ring's next slot's buffer if it can be reused (``GetBufferFromRing``:
        unpinned, usage at most 1) and is clean; if the slot is empty or its buffer pinned,
        :meth:`BufferPool.get_clean_victim_outside_ring`'s buffer, which takes the slot (as
        :meth:`BufferPool.get_buffer_outside_ring` gives it). The run stops, leaving the ring's
        position before the block, at a block in the pool, a dirty ring buffer (the loop writes
        it or, if it needs a WAL flush, the BULKREAD ring rejects it), an outside search that
        stops, and an unpinned ring buffer used more than once: a search outside the ring
        decrements usage counts, and if it stopped, the loop would find that buffer reusable.
        """
        pool = self.pool
        comps = pool._completions
        if comps and comps[0][0] <= self.clock.now:
            pool.poll()
        mapping = pool.mapping
        pool_tag = pool.tag
        pool_flags = pool.flags
        refcount = pool.refcount
        usage = pool.usage
        ring = strategy.buffers
        size = strategy.nbuffers
        cur = strategy.current
        j = index  # the next slot of buffers
        reused = evicted = 0
        for t in range(tag, tag + n):
            if t in mapping:
                break
            c = cur + 1
            if c == size:
                c = 0
            b = ring[c]
            if b >= 0 and not refcount[b]:
                # GetBufferFromRing's usual case: the slot's buffer, unless it was used since.
                if usage[b] > 1:
                    break
                f = pool_flags[b]
                if f & BM_DIRTY:
                    break
                if f & BM_VALID:
                    reused += 1
            else:
                # An empty slot, or a buffer somebody pins: StrategyGetBuffer's free list and
                # clock sweep, whose buffer takes the slot (AddBufferToRing).
                b = pool.get_clean_victim_outside_ring()  # counts its allocation
                if b < 0:
                    break
                ring[c] = b
                if pool_flags[b] & BM_VALID:
                    evicted += 1
            cur = c
            refcount[b] = 1
            usage[b] = 1
            pool_flags[b] = 0
            old = pool_tag[b]
            if old >= 0:
                del mapping[old]
            mapping[t] = b
            pool_tag[b] = t
            buffers[j] = b
            j += 1
        strategy.current = cur
        k = j - index
        if k:
            self.refs.pin_new_run(buffers[index:j])
        return k, reused, evicted

    def _take_slot_run(self, tag: int, lo: int, m: int, buffers: list[int], j: int) -> tuple[int, int]:
        """The consecutive slots from ``lo`` as the victims of the blocks from ``tag``, up to
        ``m`` of them, in :meth:`_alloc_unmapped_run`'s loop's order, if all ``m`` are
        unpinned, unused and clean (no flag but valid): (victims taken, of which held a valid
        page); (0, 0), with nothing changed, if one is not. The run stops before the first block
        found in the pool. The caller takes the slots off the free list or moves the clock hand
        past them.

        The loop's steps for these blocks then give this state: each victim is the next slot;
        its old block is unmapped and the new one mapped before the next block is looked up
        (in this order, so the mapping table's order is the loop's and a block held by an
        earlier victim of the run is no longer in the pool); the victims are pinned once, used
        once, their flags cleared, as slices. The mapping table is updated in a loop written in
        Python, which costs fewer machine instructions than ``dict.update`` over ``zip``, and
        keeps one int object per tag in the table and in ``pool.tag``.
        """
        pool = self.pool
        hi = lo + m
        flags = pool.flags
        if (
            any(pool.refcount[lo:hi])
            or any(pool.usage[lo:hi])
            or flags.count(BM_VALID, lo, hi) + flags.count(0, lo, hi) != m
        ):
            return 0, 0
        mapping = pool.mapping
        pool_tag = pool.tag
        slots = pool._slots[lo:hi]
        t = tag
        for b in slots:
            if t in mapping:
                break
            old = pool_tag[b]
            if old >= 0:
                del mapping[old]
            mapping[t] = b
            pool_tag[b] = t
            t += 1
        k = t - tag
        if k < m:
            hi = lo + k
            del slots[k:]
        valid = flags.count(BM_VALID, lo, hi)
        ones = [1] * k
        pool.refcount[lo:hi] = ones
        pool.usage[lo:hi] = ones
        flags[lo:hi] = bytes(k)
        buffers[j : j + k] = slots
        return k, valid

    def _write_victim(self, buf: int, context: str) -> None:
        """``GetVictimBuffer`` on a dirty victim it keeps: flush WAL up to the page's LSN if
        needed (``XLogFlush``), then write the page (``FlushBuffer``)."""
        pool = self.pool
        if pool.xlog_needs_flush(pool.page_lsn[buf]):
            self.cpu(self.costs.wal_flush_us)
            pool.wal_flushed_lsn = pool.wal_insert_lsn
        self._flush_buffer(buf, context)

    def _flush_buffer(self, buf: int, context: str) -> None:
        """``FlushBuffer``: write a dirty page synchronously before reusing its slot."""
        pool = self.pool
        tag = pool.tag[buf]
        rf = tag >> 32  # Relation.split_tag, inlined: (relid << 2 | fork, block)
        storage = self.storage
        t0 = self.clock.now
        done = storage.write(storage._by_id[rf >> 2], rf & 3, tag & 0xFFFFFFFF, t0)
        self.stats.io[context].writes += 1
        self.stats.shared_blks_written += 1
        pool.flags[buf] &= ~BM_DIRTY
        self.clock.wait_until(done)
        if self._flush_observer is not None:
            self._flush_observer.buffer_flushed(self, buf, context, t0, self.clock.now)

    def _unpin(self, buf: int) -> None:
        if self.refs.unpin(buf):
            self.pool.refcount[buf] -= 1

    def release_buffer(self, buf: int) -> None:
        """``ReleaseBuffer``."""
        if self._release_observer is not None:
            self._release_observer.buffer_released(self, buf)
        # PrivateRefCount.unpin, inlined. The array first: a scan's page in hand is there (the
        # tuple slot's extra pin moves its entry back from the hash), and so is every pin of a
        # backend holding at most 8.
        if buf in self._ref_pos:
            pos = self._ref_pos
            i = pos[buf]
            refs = self.refs
            cnt = refs.arr_cnt
            c = cnt[i] - 1
            if c:
                cnt[i] = c
                return
            refs.arr_buf[i] = -1
            del pos[buf]
            refs.reserved = i
            self._refcount[buf] -= 1
            return
        # The entry is in the hash table (a stream holding more than 8 pins keeps most of them
        # there), usually with this last pin: one look-up, then the deletion.
        hashed = self._ref_ovf.get(buf)
        if hashed == 1:
            del self._ref_ovf[buf]
            self._refcount[buf] -= 1
            return
        if hashed is not None:
            self._ref_ovf[buf] = hashed - 1
            return
        if buf < 0:
            if buffer_is_local(buf) and self.local is not None:
                self.local.unpin(local_id(buf))  # UnpinLocalBuffer
                return
            raise ModelUsageError(f"ReleaseBuffer of invalid buffer {buf}")
        if self.refs.unpin(buf):
            self._refcount[buf] -= 1

    def incr_buffer_refcount(self, buf: int) -> None:
        """``IncrBufferRefCount``: an extra pin on a buffer this backend already pins."""
        if buf < -1 and self.local is not None:
            bufid = local_id(buf)
            if not self.local.local_refcount[bufid]:
                raise ModelUsageError(f"IncrBufferRefCount on local buffer {buf} which is not pinned")
            self.local.local_refcount[bufid] += 1
            return
        refs = self.refs
        i = refs.pos.get(buf)
        if i is not None:
            refs.arr_cnt[i] += 1
        else:
            refs.incr(buf)

    def buffer_block(self, buf: int) -> int:
        """``BufferGetBlockNumber``."""
        if buf < 0:
            return self._local_tag(buf) & 0xFFFFFFFF
        return self.pool.tag[buf] & 0xFFFFFFFF

    def buffer_tag(self, buf: int) -> tuple[int, ForkNumber, int]:
        relid, fork, block = Relation.split_tag(self._local_tag(buf) if buf < 0 else self.pool.tag[buf])
        return relid, ForkNumber(fork), block

    def buffer_is_zeroed(self, buf: int) -> bool:
        """True if the page was zeroed by ``zero_damaged_pages`` (its content is lost)."""
        if buf < 0:
            self._local_tag(buf)
            return bool(self.local.flags[local_id(buf)] & BM_ZEROED)  # type: ignore[union-attr]
        return bool(self.pool.flags[buf] & BM_ZEROED)

    def _local_tag(self, buf: int) -> int:
        """The tag of local buffer ``buf`` (a ``ModelUsageError`` for any other negative number)."""
        local = self.local
        if not buffer_is_local(buf) or local is None or local_id(buf) >= local.nbuffers:
            raise ModelUsageError(f"buffer {buf} is invalid: not a buffer of this backend")
        return local.tag[local_id(buf)]

    def lock_buffer(self, buf: int) -> None:
        """``LockBuffer`` / ``ConditionalLockBuffer`` of a pinned buffer, as far as the read path
        sees it: in 18 the content lock is an LWLock of the buffer header and leaves the private
        reference counts alone (no lock contention is modelled), so nothing happens."""

    def mark_buffer_dirty(self, buf: int, *, wal_logged: bool = False) -> None:
        """``MarkBufferDirty``; ``wal_logged`` gives the page an LSN not yet flushed (an FPI)."""
        if buf < 0:
            # MarkLocalBufferDirty: no WAL, no vacuum cost.
            self._local_tag(buf)
            local = self.local
            assert local is not None
            if not local.local_refcount[local_id(buf)]:
                raise ModelUsageError(
                    f"MarkBufferDirty on local buffer {buf} which this backend does not pin"
                )
            local.flags[local_id(buf)] |= BM_DIRTY
            return
        pool = self.pool
        refs = self.refs
        if buf not in refs.pos and buf not in refs.ovf:
            raise ModelUsageError(f"MarkBufferDirty on buffer {buf} which this backend does not pin")
        if not pool.flags[buf] & BM_DIRTY:
            pool.flags[buf] |= BM_DIRTY
            if self.vacuum_cost_active:
                self.stats.vacuum_cost_balance += self.settings.vacuum_cost_page_dirty
        if wal_logged:
            pool.wal_insert_lsn += 1
            pool.page_lsn[buf] = pool.wal_insert_lsn

    def flush_wal(self) -> None:
        """``XLogFlush`` up to the insert position (commit)."""
        pool = self.pool
        if pool.wal_flushed_lsn < pool.wal_insert_lsn:
            self.cpu(self.costs.wal_flush_us)
            pool.wal_flushed_lsn = pool.wal_insert_lsn

    # ------------------------------------------------------------------------------ reads
    def start_read_buffers(
        self,
        op: ReadBuffersOperation,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        *,
        allow_forwarding: bool = True,
    ) -> tuple[int, bool]:
        """``StartReadBuffers``: returns (blocks accepted, wait needed).

        ``buffers[index:index+nblocks]`` holds ``INVALID_BUFFER`` or buffers forwarded by the
        previous call; on return it holds the pinned buffers, including forwarded ones past the
        accepted count.

        A one-block read with nothing forwarded is :meth:`pin_buffer_for_block` itself. Otherwise
        the blocks are pinned in one loop (``PinBufferForBlock`` for each, in order). A read
        whose first block is a miss (and with nothing forwarded) first goes through
        :meth:`_alloc_unmapped_run`, which pins the misses as long as their victims are clean
        and the clock meets no pinned buffer, usually the whole read; or, with a ring not
        freed, through :meth:`_alloc_ring_run`, which does the same as long as the ring's
        buffers can be reused and are clean. The loop goes on from there. In the loop, a block
        not in the pool is handled inline: a victim comes from the strategy's ring
        (``GetBufferFromRing``) or the free list or the clock sweep (``GetVictimBuffer`` →
        ``StrategyGetBuffer``), takes a private refcount entry
        (``ReservePrivateRefCountEntry``, ``PinBuffer_Locked``), and the block is mapped to it
        (``BufferAlloc``). These are the steps of :meth:`pin_buffer_for_block` and
        :meth:`_get_victim_buffer` on the same state with the same results (only the reservation
        moves from before the mapping lookup to the pin, as nothing in between reads the private
        counts). The uncommon cases still call them: a buffer found in the mapping table, a
        freed strategy, a dirty ring buffer the ring rejects. A dirty victim is written through
        :meth:`_write_victim`, as :meth:`_get_victim_buffer` does.

        Observers hear ``read_buffers_starting`` and ``read_buffers_started`` around it
        (:meth:`_observed_start_read_buffers`); without observers this costs one test.
        """
        if self._start_observer is not None and not self._in_observed_start:
            return self._observed_start_read_buffers(
                op, buffers, index, blocknum, nblocks, flags, allow_forwarding
            )
        if not 1 <= nblocks <= 128:
            raise ModelUsageError(f"StartReadBuffers nblocks {nblocks} is out of range 1..128")
        rel = op.rel
        strategy = op.strategy
        relstats = op.relstats
        if relstats is None:
            relstats = op.relstats = self.stats.relation(rel.name)
        if rel.persistence == "t":
            return self._start_read_local_buffers(
                op, buffers, index, blocknum, nblocks, flags, allow_forwarding
            )
        if nblocks == 1 and (not allow_forwarding or buffers[index] == INVALID_BUFFER):
            # One block and nothing forwarded (ReadBuffer, a sampled block, a stream's
            # one-block read): PinBufferForBlock itself, without the run loop's set-up.
            buf, found = self.pin_buffer_for_block(rel, op.fork, blocknum, strategy, op.context, relstats)
            buffers[index] = buf
            if found:
                # One hit: the loop's 1 * buffer_hit_us + 0 * buffer_alloc_us is this same float.
                return self._first_block_hit(op, buffers, index, blocknum, flags, self.costs.buffer_hit_us)
            return self._read_pinned_buffers(op, buffers, index, blocknum, 1, flags, 0, 1)
        tag = rel._tag_bases[op.fork] + blocknum
        actual = nblocks
        hits = misses = 0
        i = 0
        # The loop counts allocations, fetches, evictions and reuses in locals; they are added
        # to the shared counters once per call, also when it raises (the counters only add up,
        # and nothing the loop calls reads them).
        allocs = fetched = evicted = reused = 0
        if (
            nblocks > 1
            and tag not in self.pool.mapping
            and (strategy is None or not strategy.freed)
            and (not allow_forwarding or buffers[index : index + nblocks].count(INVALID_BUFFER) == nblocks)
        ):
            # A miss on the first block caps the read at the segment boundary. The misses from
            # there, as far as their victims are clean and the clock meets no pinned buffer, go
            # through _alloc_unmapped_run, or with a ring _alloc_ring_run; the loop below goes
            # on from the first block not done.
            maxcombine = RELSEG_SIZE - blocknum % RELSEG_SIZE
            if maxcombine < actual:
                actual = maxcombine
            if strategy is None:
                i, evicted = self._alloc_unmapped_run(tag, actual, buffers, index)
            else:
                i, reused, evicted = self._alloc_ring_run(strategy, tag, actual, buffers, index)
            misses = fetched = i
            if i == actual:
                relstats.blks_fetched += fetched
                if evicted:
                    self.stats.io[op.context].evictions += evicted
                if reused:
                    self.stats.io[op.context].reuses += reused
                return self._read_pinned_buffers(op, buffers, index, blocknum, actual, flags, 0, misses)
        context = op.context
        pool = self.pool
        pool_flags = pool.flags
        pool_tag = pool.tag
        usage = pool.usage
        refcount = pool.refcount
        mapping = pool.mapping
        mapping_get = mapping.get
        freelist = pool.freelist
        in_freelist = pool.in_freelist
        comps = pool._completions
        clock = self.clock
        refs = self.refs
        arr_buf = refs.arr_buf
        arr_cnt = refs.arr_cnt
        pos = refs.pos
        ovf = refs.ovf
        ctx_stats = self.stats.io[context]
        nbuffers = pool.nbuffers
        plain = strategy is None
        # Victims are found inline unless the strategy was freed (the use-after-free path).
        inline_victims = plain or not strategy.freed  # type: ignore[union-attr]
        if not plain:
            ring = strategy.buffers  # type: ignore[union-attr]
            ring_size = strategy.nbuffers  # type: ignore[union-attr]
        # Reads due for completion are completed before a victim is chosen (as GetVictimBuffer
        # does through BufferPool.poll). Only a call can move the clock or queue a completion, so
        # the next completion time and the time are re-read after each call.
        now = clock.now
        due = comps[0][0] if comps else now + 1
        try:
            while i < actual:
                b = buffers[index + i]
                if allow_forwarding and b != INVALID_BUFFER:
                    if comps and comps[0][0] <= clock.now:
                        pool.poll()
                    found = bool(pool_flags[b] & BM_VALID)
                else:
                    # PinBufferForBlock (BufferAlloc for a block not in the pool).
                    t = tag + i
                    mapped = mapping_get(t)
                    if mapped is None and inline_victims:
                        # GetVictimBuffer. PostgreSQL reserves the private refcount entry before the
                        # lookup; nothing until the pin reads the backend's private counts, so the
                        # model reserves when it pins, below (and at once where finding a victim
                        # can fail).
                        if due <= now:
                            pool.poll()
                            due = comps[0][0] if comps else now + 1
                        if plain:
                            # StrategyGetBuffer without a ring: the head of the free list (every
                            # buffer, in order, at start-up) if it is unused, and once the list is
                            # empty the clock sweep, which decrements usage counts of unpinned
                            # buffers until it finds one at zero; exactly what
                            # BufferPool.get_buffer_outside_ring does.
                            allocs += 1
                            while freelist:
                                b = freelist.popleft()
                                in_freelist[b] = 0
                                if not refcount[b] and not usage[b]:
                                    break
                            else:  # no unused buffer on the free list: the clock sweep
                                victim = pool.next_victim
                                trycounter = nbuffers
                                while True:
                                    b = victim
                                    victim += 1
                                    if victim == nbuffers:
                                        victim = 0
                                        pool.complete_passes += 1
                                    if not refcount[b]:
                                        u = usage[b]
                                        if not u:
                                            break
                                        usage[b] = u - 1
                                        trycounter = nbuffers
                                        if not victim & SWEEP_CHUNK_MASK:
                                            pool.next_victim = victim
                                            victim = pool.sweep_chunks()
                                    else:
                                        trycounter -= 1
                                        if not trycounter:
                                            pool.next_victim = victim
                                            refs.reserve()
                                            raise NoUnpinnedBuffers()
                                pool.next_victim = victim
                        else:
                            # GetBufferFromRing: the ring's next slot, if its buffer is unpinned and
                            # was not used since the ring put it there; else StrategyGetBuffer's
                            # free list and clock sweep, the buffer taking the ring's slot.
                            cur = strategy.current + 1  # type: ignore[union-attr]
                            if cur >= ring_size:
                                cur = 0
                            strategy.current = cur  # type: ignore[union-attr]
                            b = ring[cur]
                            if b >= 0 and not refcount[b] and usage[b] <= 1:
                                from_ring = True
                            else:
                                if refs.reserved < 0:
                                    refs.reserve()
                                b = pool.get_buffer_outside_ring(strategy)
                                from_ring = False
                        # ReservePrivateRefCountEntry, then PinBuffer_Locked: the reserved entry
                        # takes the buffer. With the array full (a stream's usual state), the entry
                        # under the array's clock first moves to the hash table.
                        slot = refs.reserved
                        if slot >= 0:
                            refs.reserved = -1
                        elif len(pos) < REFCOUNT_ARRAY_ENTRIES:
                            refs.reserve()
                            slot = refs.reserved
                            refs.reserved = -1
                        else:
                            slot = refs.clock % REFCOUNT_ARRAY_ENTRIES
                            refs.clock += 1
                            pushed = arr_buf[slot]
                            ovf[pushed] = arr_cnt[slot]
                            del pos[pushed]
                        arr_buf[slot] = b
                        arr_cnt[slot] = 1
                        pos[b] = slot
                        refcount[b] = 1  # every victim is chosen unpinned
                        f = pool_flags[b]
                        if f & BM_DIRTY:
                            if (
                                not plain
                                and pool.xlog_needs_flush(pool.page_lsn[b])
                                and pool.strategy_reject_buffer(strategy, b, from_ring)  # type: ignore[arg-type]
                            ):
                                # StrategyRejectBuffer: a BULKREAD ring gives up a dirty buffer that
                                # would need a WAL flush; GetVictimBuffer unpins it and looks again,
                                # which is _get_victim_buffer's loop from here on (it also counts
                                # and unmaps the victim it returns).
                                self._unpin(b)
                                b = self._get_victim_buffer(strategy, context)
                                f = 0
                            else:
                                self._write_victim(b, context)
                            now = clock.now
                            due = comps[0][0] if comps else now + 1
                        if f & BM_VALID:
                            if not plain and from_ring:
                                reused += 1
                            else:
                                evicted += 1
                        old = pool_tag[b]
                        if old >= 0:
                            del mapping[old]
                        # BufferAlloc: the victim now holds the block (flags cleared, usage 1).
                        mapping[t] = b
                        pool_tag[b] = t
                        pool_flags[b] = 0
                        usage[b] = 1
                        fetched += 1
                        buffers[index + i] = b
                        misses += 1
                        if not i and actual > 1:
                            maxcombine = RELSEG_SIZE - blocknum % RELSEG_SIZE
                            if maxcombine < actual:
                                actual = maxcombine
                        i += 1
                        continue
                    if refs.reserved < 0:
                        refs.reserve()
                    if mapped is not None:
                        b = mapped
                        found = self._pin_mapped(b, strategy, context, relstats)
                    else:
                        b = self._get_victim_buffer(strategy, context)
                        mapping[t] = b
                        pool_tag[b] = t
                        pool_flags[b] = 0
                        usage[b] = 1
                        fetched += 1
                        found = False
                    now = clock.now
                    due = comps[0][0] if comps else now + 1
                    buffers[index + i] = b
                    if found:
                        hits += 1
                    else:
                        misses += 1
                if found:
                    if i == 0:
                        # A forwarded buffer found valid is no hit of this call: no charge.
                        charge = hits * self.costs.buffer_hit_us + misses * self.costs.buffer_alloc_us
                        return self._first_block_hit(op, buffers, index, blocknum, flags, charge)
                    actual = i
                    break
                if i == 0 and actual > 1:
                    maxcombine = RELSEG_SIZE - blocknum % RELSEG_SIZE
                    if maxcombine < actual:
                        actual = maxcombine
                i += 1
        finally:
            if allocs:
                pool.num_allocs += allocs
            if fetched:
                relstats.blks_fetched += fetched
            if evicted:
                ctx_stats.evictions += evicted
            if reused:
                ctx_stats.reuses += reused
        return self._read_pinned_buffers(op, buffers, index, blocknum, actual, flags, hits, misses)

    def _first_block_hit(
        self,
        op: ReadBuffersOperation,
        buffers: list[int],
        index: int,
        blocknum: int,
        flags: int,
        charge: float,
    ) -> tuple[int, bool]:
        """The end of ``StartReadBuffers`` when its first block is valid: the operation covers
        that block alone, done, with no I/O; ``charge`` µs of CPU for the pins; returns
        (1 block, no wait)."""
        self.cpu(charge)
        op.buffers = buffers
        op.index = index
        op.blocknum = blocknum
        op.nblocks = 1
        op.nblocks_done = 1
        op.flags = flags
        op.ioh = None
        return 1, False

    def _read_pinned_buffers(
        self,
        op: ReadBuffersOperation,
        buffers: list[int],
        index: int,
        blocknum: int,
        actual: int,
        flags: int,
        hits: int,
        misses: int,
    ) -> tuple[int, bool]:
        """The end of ``StartReadBuffers`` once ``actual`` blocks are pinned: charge the pins,
        fill in the operation, and start its I/O (``AsyncReadBuffers``), or under ``sync`` only
        give read-ahead advice."""
        self.cpu(hits * self.costs.buffer_hit_us + misses * self.costs.buffer_alloc_us)
        op.buffers = buffers
        op.index = index
        op.blocknum = blocknum
        op.nblocks = actual
        op.nblocks_done = 0
        op.flags = flags
        op.ioh = None
        if not self._sync_method:
            did_start, progress = self._async_read_buffers(op)
            op.nblocks = progress
            return progress, did_start
        op.flags |= READ_BUFFERS_SYNCHRONOUSLY
        if flags & READ_BUFFERS_ISSUE_ADVICE:
            self.cpu(self.costs.fadvise_us)
            self.storage.prefetch(op.rel, op.fork, blocknum, actual, self.clock.now)
        return actual, True

    def _observed_start_read_buffers(
        self,
        op: ReadBuffersOperation,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        allow_forwarding: bool,
    ) -> tuple[int, bool]:
        """:meth:`start_read_buffers` between its two observer events (the flag sends the inner
        call straight to the body)."""
        obs = self._start_observer
        assert obs is not None
        t0 = self.clock.now
        obs.read_buffers_starting(self, op, buffers, index, blocknum, nblocks, flags, allow_forwarding)
        self._in_observed_start = True
        try:
            got, need_wait = self.start_read_buffers(
                op, buffers, index, blocknum, nblocks, flags, allow_forwarding=allow_forwarding
            )
        finally:
            self._in_observed_start = False
        obs.read_buffers_started(self, op, buffers, index, blocknum, nblocks, flags, got, need_wait, t0)
        return got, need_wait

    def start_read_buffer(self, op: ReadBuffersOperation, blocknum: int, flags: int) -> tuple[int, bool]:
        """``StartReadBuffer``: the one-block form; returns (buffer, wait needed)."""
        slot = [INVALID_BUFFER]
        _, need_wait = self.start_read_buffers(op, slot, 0, blocknum, 1, flags, allow_forwarding=False)
        return slot[0], need_wait

    def _can_start_io(self, buf: int, nowait: bool) -> bool:
        """``StartBufferIO(buf, forInput=true, nowait)``."""
        pool = self.pool
        while True:
            ioh = pool.buf_io[buf]
            if ioh is None:
                break
            if nowait:
                return False
            t0 = self.clock.now
            pool.wait_io(ioh)
            self.stats.waits += 1
            self.stats.wait_us += self.clock.now - t0
        return not pool.flags[buf] & BM_VALID

    def _async_read_buffers(self, op: ReadBuffersOperation) -> tuple[bool, int]:
        """``AsyncReadBuffers``: start one I/O for the operation's next blocks."""
        pool = self.pool
        clock = self.clock
        buffers = op.buffers
        base = op.index
        done = op.nblocks_done
        head = buffers[base + done]
        comps = pool._completions
        if comps and comps[0][0] <= clock.now:
            pool.poll()
        buf_io = pool.buf_io
        pool_flags = pool.flags
        # StartBufferIO(head, nowait=false): only a read in progress on the head (waited for)
        # or a head already valid needs _can_start_io.
        if (buf_io[head] is not None or pool_flags[head] & BM_VALID) and not self._can_start_io(head, False):
            self._count_read_by_another(op)
            return False, 1
        return self._start_read_io(op, head)

    def _start_read_io(self, op: ReadBuffersOperation, head: int) -> tuple[bool, int]:
        """``AsyncReadBuffers`` once I/O can be started on the head block (``StartBufferIO``
        said so): the candidates after it, the handle, its submission; (True, blocks read).
        The same in every version; only the head's test differs."""
        pool = self.pool
        clock = self.clock
        buffers = op.buffers
        base = op.index
        done = op.nblocks_done
        buf_io = pool.buf_io
        pool_flags = pool.flags
        io_bufs = buffers[base + done : base + op.nblocks]  # the head, then the candidates
        n = len(io_bufs)
        consecutive = False
        if n > 1:
            # StartBufferIO(nowait=true) on each candidate: the read stops at a block being
            # read or already valid. For consecutive slots with no I/O and no flag set (a
            # scan's fresh victims) no candidate stops it, which three slices show at once.
            hi = head + n
            if (
                io_bufs == pool._slots[head:hi]
                and buf_io[head + 1 : hi].count(None) == n - 1
                and pool_flags.count(0, head + 1, hi) == n - 1
            ):
                consecutive = True
            else:
                n = 1
                for b in io_bufs[1:]:
                    if buf_io[b] is not None or pool_flags[b] & BM_VALID:
                        del io_bufs[n:]
                        break
                    n += 1
        flags = op.flags
        synchronous = (flags & READ_BUFFERS_SYNCHRONOUSLY) != 0
        ioh = InflightIO(
            self.id,
            op.rel,
            op.fork,
            op.blocknum + done,
            io_bufs,
            op.context,
            synchronous,
            (flags & READ_BUFFERS_ZERO_ON_ERROR) != 0 or self._zero_damaged,
            (flags & READ_BUFFERS_IGNORE_CHECKSUM_FAILURES) != 0 or self._ignore_checksum,
        )
        ioh.backend = self
        ioh.consecutive = consecutive
        pool.register_io(ioh)
        st = self.stats
        ctx = st.io[op.context]
        ctx.reads += 1
        ctx.read_bytes += 8192 * n
        st.shared_blks_read += n
        if self.vacuum_cost_active:
            st.vacuum_cost_balance += self.settings.vacuum_cost_page_miss * n
        executes_now = self.io_method.issue(clock.now, ioh, synchronous)
        if not executes_now:
            # Completed by whoever looks after its completion time (BufferPool.poll); a read the
            # backend performs itself is completed right after its wait, below.
            pool.schedule_completion(ioh)
            # Submitting costs the backend CPU (a read it performs itself has that cost in its
            # completion time, which it waits for).
            self.cpu(self.costs.io_submit_us)
        log = st.read_log
        if log is not None:
            rec = ReadRecord(
                op.rel.name,
                FORK_NAMES[op.fork],
                ioh.start,
                n,
                ioh.submit_us,
                ioh.complete_at,
                op.context,
                self.id,
                executes_now,
            )
            ioh.record = rec
            log.append(rec)
        op.ioh = ioh
        if self._io_observer is not None:
            self._io_observer.io_issued(self, ioh)
        if executes_now:
            # The backend performs the read itself: it is blocked until the data is there.
            # Other backends that find the buffers I/O-in-progress meanwhile wait for it
            # (BufferPool.wait_io completes it if they get there first).
            clock.wait_until(ioh.complete_at)
            if not ioh.done:
                pool.complete_io(ioh)
        return True, n

    def _count_read_by_another(self, op: ReadBuffersOperation) -> None:
        """The head block became valid meanwhile (another backend read it): ``AsyncReadBuffers``
        counts it as a hit for this backend and moves on by one block."""
        op.nblocks_done += 1
        op.ioh = None
        st = self.stats
        st.shared_blks_hit += 1
        op.relstats.blks_hit += 1
        st.io[op.context].hits += 1
        if self.vacuum_cost_active:
            st.vacuum_cost_balance += self.settings.vacuum_cost_page_hit

    def wait_read_buffers(self, op: ReadBuffersOperation) -> bool:
        """``WaitReadBuffers``: wait for (or, under ``sync``, perform) the read; raise its error.

        PostgreSQL 18's ``WaitReadBuffers`` returns nothing; the model returns whether the
        backend had to block: an I/O still in flight (its clock moved), or a retry it performed
        itself. 19's ``needed_wait`` is :meth:`Backend19.wait_read_buffers
        <reference_impl.buffers.bufmgr19.Backend19.wait_read_buffers>`. Observers hear ``read_buffers_waiting`` and
        ``read_buffers_waited`` around it (:meth:`_observed_wait_read_buffers`).
        """
        if self._wait_observer is not None and not self._in_observed_wait:
            return self._observed_wait_read_buffers(op)
        pool = self.pool
        clock = self.clock
        st = self.stats
        needed_wait = False
        while True:
            ioh = op.ioh
            if ioh is not None:
                if not ioh.done:
                    t0 = clock.now
                    pool.wait_io(ioh)
                    if clock.now > t0:
                        needed_wait = True
                    st.waits += 1
                    st.wait_us += clock.now - t0
                if not ioh.synchronous:
                    self.cpu(self.costs.io_complete_us)
                op.ioh = None
                if ioh.error is not None:
                    raise ioh.error
                op.nblocks_done += ioh.outcome.ok_blocks  # type: ignore[union-attr]
            if op.nblocks_done >= op.nblocks:
                return needed_wait
            self.check_for_interrupts()
            if op.rel.persistence == "t":
                did_start, _ = self._async_read_local_buffers(op)
            else:
                did_start, _ = self._async_read_buffers(op)
            if did_start and op.ioh is not None and op.ioh.synchronous:
                needed_wait = True

    def _observed_wait_read_buffers(self, op: ReadBuffersOperation) -> bool:
        """:meth:`wait_read_buffers` between its two observer events."""
        obs = self._wait_observer
        assert obs is not None
        t0 = self.clock.now
        obs.read_buffers_waiting(self, op)
        needed = False
        error: PgError | None = None
        self._in_observed_wait = True
        try:
            needed = self.wait_read_buffers(op)
        except PgError as exc:
            error = exc
            raise
        finally:
            self._in_observed_wait = False
            obs.read_buffers_waited(self, op, t0, self.clock.now, needed, error)
        return needed

    def read_buffer(
        self,
        rel: Relation,
        block: int,
        fork: ForkNumber = ForkNumber.MAIN,
        strategy: BufferAccessStrategy | None = None,
        mode: str = RBM_NORMAL,
    ) -> int:
        """``ReadBufferExtended``: the unstreamed, one-block-at-a-time read (a pinned buffer)."""
        if mode not in _MODES:
            raise ModelUsageError(f"ReadBuffer mode {mode!r} is invalid: allowed {', '.join(_MODES)}")
        if block < 0 or block > 0xFFFFFFFE:
            raise ModelUsageError(f"block {block} is invalid: allowed 0..4294967294")
        ra = self.readahead
        if ra is not None:
            ra.on_read_buffer(self, rel, fork, block, strategy)
        op = ReadBuffersOperation(rel, fork, strategy)
        if mode == RBM_ZERO_AND_LOCK:
            relstats = op.relstats = self.stats.relation(rel.name)
            if rel.persistence == "t":
                self._check_temp_relation(rel)
                buf, found = self._local_buffer_alloc(rel, fork, block, relstats)
                if not found:
                    self.local.flags[local_id(buf)] |= BM_VALID | BM_ZEROED  # type: ignore[union-attr]
                return buf
            buf, found = self.pin_buffer_for_block(rel, fork, block, strategy, op.context, relstats)
            if not found:
                self.pool.flags[buf] |= BM_VALID | BM_ZEROED
            return buf
        flags = READ_BUFFERS_SYNCHRONOUSLY
        if mode == RBM_ZERO_ON_ERROR:
            flags |= READ_BUFFERS_ZERO_ON_ERROR
        slot = [INVALID_BUFFER]
        _, need_wait = self.start_read_buffers(op, slot, 0, block, 1, flags, allow_forwarding=False)
        if need_wait:
            # An error propagates with the buffer still pinned; the caller's transaction abort
            # (``abort``) releases it, as the resource owner does in PostgreSQL.
            self.wait_read_buffers(op)
        return slot[0]

    def extend_buffered_rel_to(
        self,
        rel: Relation,
        fork: ForkNumber,
        extend_to: int,
        strategy: BufferAccessStrategy | None = None,
    ) -> int:
        """``ExtendBufferedRelTo``: grow ``fork`` to ``extend_to`` blocks and pin the last one.

        The new pages are zero-filled by the extension itself, which ``pg_stat_io`` counts as
        ``extends`` in the strategy's context. Nothing is read, so neither ``pg_stat_io`` reads nor
        the relation's ``pg_statio`` blocks fetched/read count it (``ExtendBufferedRelCommon``
        never calls ``pgstat_count_buffer_read``): a first VACUUM that creates the visibility map
        reads exactly the table's and FSM's blocks. Only when the fork is already long enough
        (another backend extended it) is the page read, through ``ReadBuffer_common``.
        """
        if extend_to < 1:
            raise ModelUsageError(f"extend_to = {extend_to} is invalid: allowed 1..{0xFFFFFFFE}")
        if rel.persistence == "t":
            raise ModelUsageError(
                f"ExtendBufferedRelTo on temporary relation {rel.name!r}: ExtendBufferedRelLocal is not modelled"
            )
        have = rel.nblocks(fork) if rel.exists(fork) else 0
        if extend_to <= have:
            return self.read_buffer(rel, extend_to - 1, fork, strategy, RBM_ZERO_ON_ERROR)
        rel.set_nblocks(fork, extend_to)
        self.stats.io[io_context_for_strategy(strategy)].extends += extend_to - have
        # A throwaway counter: the pin of a page the extension created is no buffer fetch.
        buf, found = self.pin_buffer_for_block(
            rel, fork, extend_to - 1, strategy, io_context_for_strategy(strategy), RelationStats()
        )
        if not found:
            self.pool.flags[buf] |= BM_VALID | BM_ZEROED
        return buf

    def release_and_read_buffer(
        self,
        buf: int,
        rel: Relation,
        block: int,
        strategy: BufferAccessStrategy | None = None,
    ) -> int:
        """``ReleaseAndReadBuffer``: keep ``buf`` if it already holds the block."""
        if buf >= 0:
            if self.pool.tag[buf] == rel.tag(ForkNumber.MAIN, block):
                return buf
            self.release_buffer(buf)
        return self.read_buffer(rel, block, ForkNumber.MAIN, strategy)

    def prefetch_buffer(self, rel: Relation, fork: ForkNumber, block: int) -> bool:
        """``PrefetchBuffer``: advice for a block not in the pool (none with direct I/O); for a
        temporary relation, not in the local buffers (``PrefetchLocalBuffer``)."""
        if rel.persistence == "t":
            self._check_temp_relation(rel)
            if self.local_buffers().mapping.get(rel.tag(fork, block)) is not None:
                return False
        elif self.pool.mapping.get(rel.tag(fork, block)) is not None:
            return False
        if self.storage.direct_io:
            return False
        self.cpu(self.costs.fadvise_us)
        return self.storage.prefetch(rel, fork, block, 1, self.clock.now)

    # ------------------------------------------------------------------------------ transactions
    def abort(self) -> None:
        """Transaction abort: the resource owner drops every pin this backend holds.

        Streams are not ended (no drain). Reads already issued to an asynchronous method still
        complete (they hold their own pins); reads staged under ``io_method=sync`` never run and
        leave their buffers mapped but invalid (``read_stream.md`` §7.1).
        """
        pinned = self.refs.pinned()
        if self.local is not None:
            pinned.update(self.local.pinned())
        for buf, count in pinned.items():
            for _ in range(count):
                self.release_buffer(buf)

    def check_for_buffer_leaks(self) -> None:
        """``CheckForBufferLeaks`` and ``CheckForLocalBufferLeaks``: raise if any pin is still
        held (local buffers are numbered -2, -3, ...)."""
        pinned = self.refs.pinned()
        if self.local is not None:
            pinned.update(self.local.pinned())
        if pinned:
            raise PinLeakError(self.name, pinned)

    # ------------------------------------------------------------------------------ local buffers
    def local_buffers(self) -> LocalBuffers:
        """The local buffers of this backend, made on first use (``InitLocalBuffers``)."""
        local = self.local
        if local is None:
            local = self.local = LocalBuffers(self.settings.temp_buffers)
        return local

    def get_local_pin_limit(self) -> int:
        """``GetLocalPinLimit``: what a read stream on a temporary relation may pin at most."""
        return LocalBuffers.get_local_pin_limit(self.settings.temp_buffers)

    def get_additional_local_pin_limit(self) -> int:
        """``GetAdditionalLocalPinLimit``: the local pin limit minus the local pins held
        (``NLocalPinnedBuffers``, counted exactly, unlike the shared estimate)."""
        if self.local is None:
            return self.get_local_pin_limit()
        return self.local.get_additional_local_pin_limit(self.settings.temp_buffers)

    def limit_additional_local_pins(self, n: int) -> int:
        """``LimitAdditionalLocalPins``."""
        if self.local is None:
            return n if n <= 1 else min(n, self.settings.temp_buffers)
        return self.local.limit_additional_local_pins(n, self.settings.temp_buffers)

    def _check_temp_relation(self, rel: Relation) -> None:
        """``RELATION_IS_OTHER_TEMP``: another session's temporary relation cannot be read (its
        pages live in that session's local buffers)."""
        if rel.temp_owner != self.id:
            raise OtherSessionTempRelation(rel.name)

    def _track_local_hit(self, relstats: Any) -> None:
        """``TrackBufferHit`` for a temporary relation (``IOOBJECT_TEMP_RELATION``)."""
        st = self.stats
        st.local_blks_hit += 1
        st.io_temp.hits += 1
        if self.vacuum_cost_active:
            st.vacuum_cost_balance += self.settings.vacuum_cost_page_hit
        relstats.blks_hit += 1

    def _local_buffer_alloc(
        self, rel: Relation, fork: ForkNumber, block: int, relstats: Any
    ) -> tuple[int, bool]:
        """``PinBufferForBlock`` on a temporary relation → ``LocalBufferAlloc``: (buffer, found
        valid); a hit is tracked, and every block counts as fetched."""
        local = self.local_buffers()
        tag = rel.tag(fork, block)
        bufid = local.mapping.get(tag)
        if bufid is not None:
            found = local.pin(bufid, True)
        else:
            bufid = self._get_local_victim_buffer()
            local.mapping[tag] = bufid
            local.tag[bufid] = tag
            local.flags[bufid] = 0
            local.usage[bufid] = 1
            found = False
        if found:
            self._track_local_hit(relstats)
        relstats.blks_fetched += 1
        return local_buffer(bufid), found

    def _get_local_victim_buffer(self) -> int:
        """``GetLocalVictimBuffer``: the clock sweep's slot, written first if dirty
        (``FlushLocalBuffer``), then forgotten (``InvalidateLocalBuffer``, an eviction)."""
        local = self.local_buffers()
        bufid = local.get_victim()
        if local.is_dirty(bufid):
            tag = local.tag[bufid]
            rf = tag >> 32
            storage = self.storage
            done = storage.write(storage._by_id[rf >> 2], rf & 3, tag & 0xFFFFFFFF, self.clock.now)
            self.stats.io_temp.writes += 1
            self.stats.local_blks_written += 1
            local.flags[bufid] &= ~BM_DIRTY
            self.clock.wait_until(done)
        if local.tag[bufid] >= 0:
            local.invalidate(bufid)
            self.stats.io_temp.evictions += 1
        return bufid

    def _start_read_local_buffers(
        self,
        op: ReadBuffersOperation,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        allow_forwarding: bool,
    ) -> tuple[int, bool]:
        """``StartReadBuffersImpl`` on a temporary relation: the same steps as for shared
        buffers (pin each block in order, a hit on the first ends the call, a later hit splits
        the read, a miss on the first caps it at the segment boundary, then ``AsyncReadBuffers``
        or, under ``sync``, advice), over this backend's local buffers, in ``IOCONTEXT_NORMAL``
        whatever the strategy."""
        rel = op.rel
        self._check_temp_relation(rel)
        local = self.local_buffers()
        relstats = op.relstats
        actual = nblocks
        hits = misses = 0
        i = 0
        while i < actual:
            b = buffers[index + i]
            if allow_forwarding and b != INVALID_BUFFER:
                found = bool(local.flags[local_id(b)] & BM_VALID)
            else:
                b, found = self._local_buffer_alloc(rel, op.fork, blocknum + i, relstats)
                buffers[index + i] = b
                if found:
                    hits += 1
                else:
                    misses += 1
            if found:
                if i == 0:
                    charge = hits * self.costs.buffer_hit_us + misses * self.costs.buffer_alloc_us
                    return self._first_block_hit(op, buffers, index, blocknum, flags, charge)
                actual = i
                break
            if i == 0 and actual > 1:
                actual = min(actual, RELSEG_SIZE - blocknum % RELSEG_SIZE)  # smgrmaxcombine
            i += 1
        self.cpu(hits * self.costs.buffer_hit_us + misses * self.costs.buffer_alloc_us)
        op.buffers = buffers
        op.index = index
        op.blocknum = blocknum
        op.nblocks = actual
        op.nblocks_done = 0
        op.flags = flags
        op.ioh = None
        if not self._sync_method:
            did_start, progress = self._async_read_local_buffers(op)
            op.nblocks = progress
            return progress, did_start
        op.flags |= READ_BUFFERS_SYNCHRONOUSLY
        if flags & READ_BUFFERS_ISSUE_ADVICE:
            self.cpu(self.costs.fadvise_us)
            self.storage.prefetch(rel, op.fork, blocknum, actual, self.clock.now)
        return actual, True

    def _async_read_local_buffers(self, op: ReadBuffersOperation) -> tuple[bool, int]:
        """``AsyncReadBuffers`` on local buffers, PostgreSQL 18: ``StartLocalBufferIO(head,
        nowait=false)`` waits for an I/O in progress on the head (this backend's own, from an
        earlier operation), and a head valid by then is a hit."""
        pool = self.pool
        comps = pool._completions
        if comps and comps[0][0] <= self.clock.now:
            pool.poll()
        local = self.local_buffers()
        head = local_id(op.buffers[op.index + op.nblocks_done])
        ioh = local.buf_io[head]
        if ioh is not None:
            t0 = self.clock.now
            pool.wait_io(ioh)  # pgaio_wref_wait
            self.stats.waits += 1
            self.stats.wait_us += self.clock.now - t0
        if local.flags[head] & BM_VALID:
            op.nblocks_done += 1
            op.ioh = None
            self._track_local_hit(op.relstats)
            return False, 1
        return self._start_local_read_io(op, head)

    def _start_local_read_io(self, op: ReadBuffersOperation, head: int) -> tuple[bool, int]:
        """``AsyncReadBuffers`` on local buffers once I/O can start on the head: the candidates
        after it (``StartLocalBufferIO`` without waiting), the handle flagged
        ``PGAIO_HF_REFERENCES_LOCAL`` and its submission. ``io_method=worker`` cannot hand a
        read of local buffers to a worker (``pgaio_worker_needs_synchronous_execution``): the
        backend performs it at once; io_uring submits it as any other."""
        pool = self.pool
        clock = self.clock
        local = self.local_buffers()
        done = op.nblocks_done
        ids = [head]
        for i in range(done + 1, op.nblocks):
            bid = local_id(op.buffers[op.index + i])
            if not local.start_io_nowait(bid):
                break
            ids.append(bid)
        n = len(ids)
        flags = op.flags
        synchronous = (flags & READ_BUFFERS_SYNCHRONOUSLY) != 0 or self.io_method.name == "worker"
        ioh = InflightIO(
            self.id,
            op.rel,
            op.fork,
            op.blocknum + done,
            ids,
            "normal",
            synchronous,
            (flags & READ_BUFFERS_ZERO_ON_ERROR) != 0 or self._zero_damaged,
            (flags & READ_BUFFERS_IGNORE_CHECKSUM_FAILURES) != 0 or self._ignore_checksum,
        )
        ioh.backend = self
        ioh.local = local
        local.register_io(ioh)
        ioh.seq = next(pool._io_seq)
        st = self.stats
        st.io_temp.reads += 1
        st.io_temp.read_bytes += 8192 * n
        st.local_blks_read += n
        if self.vacuum_cost_active:
            st.vacuum_cost_balance += self.settings.vacuum_cost_page_miss * n
        executes_now = self.io_method.issue(clock.now, ioh, synchronous)
        if not executes_now:
            pool.schedule_completion(ioh)
            self.cpu(self.costs.io_submit_us)
        log = st.read_log
        if log is not None:
            rec = ReadRecord(
                op.rel.name,
                FORK_NAMES[op.fork],
                ioh.start,
                n,
                ioh.submit_us,
                ioh.complete_at,
                "normal",
                self.id,
                executes_now,
            )
            ioh.record = rec
            log.append(rec)
        op.ioh = ioh
        if self._io_observer is not None:
            self._io_observer.io_issued(self, ioh)
        if executes_now:
            clock.wait_until(ioh.complete_at)
            if not ioh.done:
                pool.complete_io(ioh)
        return True, n

    def local_resident_blocks(self, rel: Relation, fork: ForkNumber = ForkNumber.MAIN) -> set[int]:
        """Valid pages of a temporary relation's fork in this backend's local buffers."""
        self.pool.poll()
        return set() if self.local is None else self.local.resident_blocks(rel.tag_base(fork))

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, pins={self.refs.distinct()})"
