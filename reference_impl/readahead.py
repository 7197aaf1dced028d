"""Heuristic read-ahead for unstreamed reads: guess the next blocks from the ones already read.

A ``ReadStream`` knows its future because its callback says which blocks come next. Code that
still calls ``ReadBuffer`` one block at a time (sample scans before the seed patch, hash index
VACUUM, pgstattuple on an index, index fetches of the heap, extensions) gives the buffer manager
no such hint. With buffered I/O the kernel noticed sequential reads and read ahead on its own;
with direct I/O nothing does. The sample-scan thread proposes to put that mechanism into
PostgreSQL itself: watch the block numbers each relation is read at, detect sequential or
strided locality, and start reads of the predicted blocks through the same asynchronous I/O
method the streams use. The reviewer's worry is the other side: a wrong guess wastes I/O and CPU
and pushes useful pages out of the buffer pool. This module models the idea so that both sides
can be measured.

How it works
------------
``Backend.read_buffer`` calls :meth:`HeuristicReadahead.on_read_buffer` before every unstreamed
read (hit or miss). The *detector* of the relation fork compares the block with the previous
one: the difference is the stride, and once the same non-zero stride has been seen ``confirm``
times in a row the pattern is trusted. Strides are compared modulo the fork's size, so a stride
order that wraps around the end (SYSTEM_ROWS, SYSTEM_TIME, a synchronized scan) is one pattern;
predictions wrap around the end only once the pattern has been seen to. Then the blocks
``block + stride``, ``block + 2·stride`` ... up to the current *window* are read ahead, skipping
blocks already in the pool and those requested before (the detector counts how far ahead it
has asked), so that no block is requested twice::

      accesses:  40  41  42  43                (stride 1 confirmed at 42)
      window:            [43 .. 46]            4 blocks ahead, one combined read
      at 43 (a prefetched block is used):  window doubles -> [47 .. 50]
      a different stride resets the run and the window

As in Linux's on-demand read-ahead the window starts small and doubles every time a prefetched
block is actually used, up to ``max_window`` (by default what a stream of this backend could
pin: ``io_combine_limit × effective_io_concurrency``, capped by the strategy's pin limit and the
backend's fair share of the pool). At most ``max_ios`` speculative reads are in flight
(``effective_io_concurrency`` by default; 0 turns the mechanism off).

The detector table lives on the *instance*, not on a scan, so a pattern survives from one
statement to the next (a cursor fetching the next pages, a batch job reading a table in
slices). It is keyed per backend by default (``scope="backend"``, like a backend's private
memory); ``scope="shared"`` keys it by relation fork alone, like a shared-memory table that one
backend's accesses can train for another.

How reads are started
---------------------
* With an asynchronous ``io_method`` (worker, io_uring) the predicted blocks are read into
  shared buffers with ``StartReadBuffers`` on a private ``ReadBuffersOperation`` (consecutive
  blocks combined up to ``io_combine_limit``, never across a segment) under the caller's
  strategy, so a ring-bound scan prefetches into its own ring. The pins ``StartReadBuffers``
  takes are released at once: the I/O keeps its own pin until it completes
  (``BufferPool.register_io``), and nobody ever waits for it unless the scan asks for the block,
  in which case ``ReadBuffer`` waits for the I/O in progress and counts a hit.
* With ``io_method=sync`` and buffered I/O the backend can only give advice
  (``PrefetchBuffer`` → ``posix_fadvise``) so that the kernel's page cache reads ahead.
* With ``io_method=sync`` and direct I/O there is no way to read asynchronously; the detector
  still runs but nothing is started (``stats.unavailable`` counts the lost opportunities).

What it counts (:class:`ReadaheadStats`)
----------------------------------------
speculative reads and blocks, prefetched blocks later *used* by a read (and how many of those
still had to be waited for), *wasted* blocks (evicted before anybody asked for them), blocks
still resident and unused when :meth:`HeuristicReadahead.finish` is called, buffers whose valid
page was *evicted* (or ring-reused) to make room for speculative reads, the net *reads saved*
(used blocks minus the speculative I/Os spent on them) and an estimate of the *time saved* (for
each used block, an uncontended one-block read of the device minus the wait that remained). The
benchmarks measure the real time saved by running each workload with and without read-ahead.
Streamed reads never reach the hook: a stream's own look-ahead is left alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .buffers.bufmgr import ReadBuffersOperation
from .buffers.pool import INVALID_BUFFER, InflightIO
from .buffers.strategy import BufferAccessStrategy, get_access_strategy_pin_limit
from .errors import ModelUsageError, SettingError
from .storage.relation import RELSEG_SIZE, ForkNumber, Relation

if TYPE_CHECKING:
    from .buffers.bufmgr import Backend, BufferManagerHost

__all__ = ["HeuristicReadahead", "ReadaheadStats", "SCOPES", "readahead_detectors"]

SCOPES = ("backend", "shared")


@dataclass
class ReadaheadStats:
    """What one :class:`HeuristicReadahead` did (all its backends together)."""

    accesses: int = 0
    triggers: int = 0
    mispredictions: int = 0
    speculative_ios: int = 0
    speculative_blocks: int = 0
    skipped_resident: int = 0
    used_blocks: int = 0
    used_after_wait: int = 0
    wasted_blocks: int = 0
    unused_resident_blocks: int = 0
    evicted_by_readahead: int = 0
    ring_reuses_by_readahead: int = 0
    advice_calls: int = 0
    advised_used: int = 0
    advised_unused: int = 0
    unavailable: int = 0
    time_saved_us: float = 0.0

    @property
    def reads_saved(self) -> int:
        """Demand reads avoided minus the speculative I/Os issued (negative when guessing wrong).

        Advice saves no read (the backend still reads the page, from the kernel's cache).
        """
        return self.used_blocks - self.speculative_ios

    @property
    def wasted_fraction(self) -> float:
        """Share of speculatively read blocks that were evicted before use."""
        return self.wasted_blocks / self.speculative_blocks if self.speculative_blocks else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reads_saved"] = self.reads_saved
        d["wasted_fraction"] = round(self.wasted_fraction, 4)
        d["time_saved_us"] = round(self.time_saved_us)
        return d


class _Detector:
    """Locality state of one relation fork (one backend's, or everybody's).

    ``ahead`` counts the predicted accesses after ``last`` already requested (read ahead or
    found resident); ``wrapped`` says the pattern was seen to wrap around the end of the fork.
    """

    __slots__ = ("last", "stride", "run", "window", "ahead", "wrapped")

    def __init__(self, window: int) -> None:
        self.last = -1
        self.stride = 0
        self.run = 0
        self.window = window
        self.ahead = 0
        self.wrapped = False


def readahead_detectors(instance: BufferManagerHost) -> dict[tuple[int, ...], _Detector]:
    """The instance's detector table (created on first use; survives statements)."""
    table = getattr(instance, "_readahead_detectors", None)
    if table is None:
        table = {}
        instance._readahead_detectors = table  # type: ignore[attr-defined]
    return table


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SettingError(f"read-ahead {name} = {value!r} is out of range: allowed {lo}..{hi}")
    return value


class HeuristicReadahead:
    """Heuristic read-ahead in ``ReadBuffer`` for unstreamed paths (the sample-scan thread's idea).

    Models a proposed ``bufmgr.c`` extension, not PostgreSQL 18 code: install it with
    ``backend.readahead = HeuristicReadahead()`` (or :meth:`install`); it is off unless installed.

    ``confirm``: equal strides in a row before prefetching (1..16); ``initial_window``: predicted
    blocks read ahead at first (1..1024); ``max_window``: the most it grows to (default: see the
    module docstring); ``max_ios``: speculative reads in flight (default
    ``effective_io_concurrency``); ``scope``: ``"backend"`` or ``"shared"`` detector table.
    """

    def __init__(
        self,
        *,
        confirm: int = 2,
        initial_window: int = 4,
        max_window: int | None = None,
        max_ios: int | None = None,
        scope: str = "backend",
    ) -> None:
        self.confirm = _check_int("confirm", confirm, 1, 16)
        self.initial_window = _check_int("initial_window", initial_window, 1, 1024)
        self.max_window = None if max_window is None else _check_int("max_window", max_window, 1, 65536)
        if self.max_window is not None and self.max_window < self.initial_window:
            raise SettingError(
                f"read-ahead max_window = {max_window} is below initial_window = {initial_window}: "
                "allowed max_window >= initial_window"
            )
        self.max_ios = None if max_ios is None else _check_int("max_ios", max_ios, 0, 1000)
        if scope not in SCOPES:
            raise SettingError(f"read-ahead scope = {scope!r} is invalid: allowed {', '.join(SCOPES)}")
        self.scope = scope
        self.stats = ReadaheadStats()
        # tag -> (buffer, completion time, first block of its read?) of speculatively read
        # blocks nobody has asked for yet.
        self._pending: dict[int, tuple[int, int, bool]] = {}
        self._advised: set[int] = set()
        self._inflight: list[InflightIO] = []
        self._instance: BufferManagerHost | None = None

    # ------------------------------------------------------------------------------ set-up
    def install(self, backend: Backend) -> HeuristicReadahead:
        """Install on ``backend`` (several backends may share one object and its counters)."""
        self._bind(backend.instance)
        backend.readahead = self
        return self

    def _bind(self, instance: BufferManagerHost) -> None:
        if self._instance is None:
            self._instance = instance
        elif self._instance is not instance:
            raise ModelUsageError(
                "a HeuristicReadahead serves the backends of one instance: make one per instance"
            )

    def _limits(self, backend: Backend, strategy: BufferAccessStrategy | None) -> tuple[int, int]:
        settings = backend.settings
        eic = settings.effective_io_concurrency
        max_ios = eic if self.max_ios is None else self.max_ios
        if self.max_window is not None:
            return self.max_window, max_ios
        icl = settings.effective_io_combine_limit
        window = icl * max(1, eic)
        # Speculative buffers are not pinned once their read completes, so a ring recycles them
        # as soon as it wraps: stay one combined read short of the ring.
        window = min(window, get_access_strategy_pin_limit(strategy, settings.nbuffers) - icl)
        window = min(window, backend.get_pin_limit())
        return max(window, self.initial_window, 1), max_ios

    # ------------------------------------------------------------------------------ the hook
    def on_read_buffer(
        self,
        backend: Backend,
        rel: Relation,
        fork: ForkNumber,
        block: int,
        strategy: BufferAccessStrategy | None,
    ) -> None:
        """Called by ``Backend.read_buffer`` before it reads ``block`` (see the module docstring)."""
        st = self.stats
        st.accesses += 1
        instance = backend.instance
        if instance is not self._instance:
            self._bind(instance)
        tag = rel.tag(fork, block)
        used_prefetch = self._note_use(backend, tag)
        table = readahead_detectors(instance)
        key = (rel.relid, int(fork)) if self.scope == "shared" else (backend.id, rel.relid, int(fork))
        det = table.get(key)
        if det is None:
            det = table[key] = _Detector(self.initial_window)
        last = det.last
        det.last = block
        if last < 0:
            return
        delta = block - last
        if delta == 0:
            return  # the same page again tells nothing about the next one
        nblocks = rel.nblocks(fork)
        if det.run and nblocks and (delta - det.stride) % nblocks == 0:
            # The same step, possibly around the end of the fork (a stride order taken modulo
            # the relation size, as SYSTEM_ROWS and a synchronized scan walk it).
            det.run += 1
            if delta != det.stride:
                det.wrapped = True
            if det.ahead:
                det.ahead -= 1
        else:
            if det.run >= self.confirm:
                st.mispredictions += 1
            det.stride = delta
            det.run = 1
            det.window = self.initial_window
            det.ahead = 0
            det.wrapped = False
            return
        if det.run < self.confirm:
            return
        max_window, max_ios = self._limits(backend, strategy)
        if used_prefetch and det.window < max_window:
            det.window = min(det.window * 2, max_window)
        elif det.window > max_window:
            det.window = max_window
        if max_ios == 0:
            return
        if det.run == self.confirm:
            st.triggers += 1
        self._prefetch(backend, rel, fork, block, nblocks, det, strategy, max_ios)

    def _note_use(self, backend: Backend, tag: int) -> bool:
        """Account for a read of a block that was read ahead; True if the guess paid off."""
        st = self.stats
        if tag in self._advised:
            self._advised.discard(tag)
            st.advised_used += 1
            return True
        ent = self._pending.pop(tag, None)
        if ent is None:
            return False
        buf, complete_at, head = ent
        pool = backend.pool
        if pool.mapping.get(tag) != buf:
            st.wasted_blocks += 1
            return False
        st.used_blocks += 1
        now = backend.clock.now
        wait = complete_at - now if complete_at > now else 0
        if wait:
            st.used_after_wait += 1
        prof = backend.instance.device.profile
        saved = prof.read_latency_us + prof.transfer_us(1) - wait
        if saved > 0:
            st.time_saved_us += saved
        # The window grows when the reader reaches the start of a read issued ahead of it, as
        # Linux grows its window at the read-ahead marker page.
        return head

    # ------------------------------------------------------------------------------ prefetching
    def _predicted(self, block: int, nblocks: int, det: _Detector, budget: int) -> list[int]:
        """The next predicted blocks not yet requested, at most ``budget`` of them.

        Predictions stop at the end (or start) of the fork unless the pattern has wrapped around
        it before, and never come back to ``block``.
        """
        stride = det.stride
        first = det.ahead + 1
        last_k = min(det.window, det.ahead + budget)
        out: list[int] = []
        k = first
        while k <= last_k:
            b = block + k * stride
            if not 0 <= b < nblocks:
                if not det.wrapped:
                    break
                b %= nblocks
            if b == block:
                break
            out.append(b)
            k += 1
        det.ahead = k - 1 if out or k > first else det.ahead
        return out

    def _prefetch(
        self,
        backend: Backend,
        rel: Relation,
        fork: ForkNumber,
        block: int,
        nblocks: int,
        det: _Detector,
        strategy: BufferAccessStrategy | None,
        max_ios: int,
    ) -> None:
        st = self.stats
        sync = backend.io_method.name == "sync"
        if sync and backend.storage.direct_io:
            st.unavailable += 1
            return
        limit = backend.settings.effective_io_combine_limit
        sequential = det.stride in (1, -1)
        if sync:
            budget = det.window
        else:
            self._inflight = [ioh for ioh in self._inflight if not ioh.done]
            free = max_ios - len(self._inflight)
            if free <= 0:
                return
            budget = free * limit if sequential else free
        if sequential:
            # Wait until a combined read's worth is due, so that reads are not one block each;
            # near the end of the fork take what is left.
            due = det.window - det.ahead
            end_near = not det.wrapped and not 0 <= block + det.stride * (det.ahead + due) < nblocks
            if due < min(limit, max(1, det.window // 2)) and not end_near:
                return
        blocks = self._predicted(block, nblocks, det, budget)
        if not blocks:
            return
        mapping = backend.pool.mapping
        base = rel.tag_base(fork)
        todo = []
        for b in blocks:
            if base + b in mapping:
                st.skipped_resident += 1
            else:
                todo.append(b)
        if not todo:
            return
        todo.sort()
        runs: list[tuple[int, int]] = []
        i = 0
        while i < len(todo):
            start = todo[i]
            n = 1
            while (
                i + n < len(todo)
                and todo[i + n] == start + n
                and n < limit
                and (start + n) % RELSEG_SIZE != 0
            ):
                n += 1
            runs.append((start, n))
            i += n
        if sync:
            # Advice, one posix_fadvise per run (as a stream advises a combined read).
            costs = backend.costs
            for start, n in runs:
                backend.cpu(costs.fadvise_us)
                if backend.storage.prefetch(rel, fork, start, n, backend.clock.now):
                    st.advice_calls += 1
                    self._advised.update(range(base + start, base + start + n))
            if len(self._advised) > 4 * backend.pool.nbuffers:
                # Advice nobody followed up on: forget it rather than grow without bound.
                st.advised_unused += len(self._advised)
                self._advised.clear()
            return
        if det.stride < 0:
            runs.reverse()  # nearest first when reading backwards
        for start, n in runs:
            self._start(backend, rel, fork, start, n, strategy)

    def _start(
        self,
        backend: Backend,
        rel: Relation,
        fork: ForkNumber,
        start: int,
        n: int,
        strategy: BufferAccessStrategy | None,
    ) -> None:
        """Start reads of ``start .. start+n-1`` and drop the pins at once."""
        st = self.stats
        io_stats = backend.stats.io.values()
        ev0 = sum(c.evictions for c in io_stats)
        ru0 = sum(c.reuses for c in io_stats)
        base = rel.tag_base(fork)
        while n > 0:
            op = ReadBuffersOperation(rel, fork, strategy)
            bufs = [INVALID_BUFFER] * n
            accepted, started = backend.start_read_buffers(op, bufs, 0, start, n, 0)
            ioh = op.ioh
            if started and ioh is not None and not op.foreign_io:
                st.speculative_ios += 1
                st.speculative_blocks += ioh.nblocks
                self._inflight.append(ioh)
                pending = self._pending
                for k in range(accepted):
                    tag = base + start + k
                    if tag in pending:
                        # Read ahead before, evicted unused, predicted again: the first was wasted.
                        st.wasted_blocks += 1
                    pending[tag] = (bufs[k], ioh.complete_at, k == 0)
            for b in bufs:
                if b != INVALID_BUFFER:
                    backend.release_buffer(b)
            start += accepted
            n -= accepted
        st.evicted_by_readahead += sum(c.evictions for c in io_stats) - ev0
        st.ring_reuses_by_readahead += sum(c.reuses for c in io_stats) - ru0
        if len(self._pending) > 2 * backend.pool.nbuffers:
            self._sweep(backend.pool.mapping)

    def _sweep(self, mapping: dict[int, int]) -> None:
        """Count speculative blocks that left the pool unused and forget them."""
        gone = [tag for tag, ent in self._pending.items() if mapping.get(tag) != ent[0]]
        for tag in gone:
            del self._pending[tag]
        self.stats.wasted_blocks += len(gone)

    # ------------------------------------------------------------------------------ reporting
    def finish(self) -> ReadaheadStats:
        """Settle the counters: evicted unused blocks are wasted; resident unused ones counted."""
        inst = self._instance
        if inst is not None:
            inst.pool.poll()
            self._sweep(inst.pool.mapping)
        self.stats.unused_resident_blocks = len(self._pending)
        self.stats.advised_unused += len(self._advised)
        self._advised.clear()
        return self.stats

    def __repr__(self) -> str:
        return (
            f"HeuristicReadahead(confirm={self.confirm}, window={self.initial_window}.."
            f"{self.max_window or 'auto'}, scope={self.scope!r})"
        )
