"""Known-bug variants of the reference ("mutants"): the bugs the conformance suite must catch.

A conformance suite is only as good as the bugs it catches. Each mutant below is the reference
model with **one** small, documented change that reproduces a bug PostgreSQL developers actually
wrote, reviewed or worried about: most come from the seed threads (the sample-scan thread's
``read_stream_set_strategy`` reviews and heap-rescan bug, the online-checksums thread's
``numblocks`` and ``end()`` discussion), the rest from invariants ``read_stream.c`` relies on
(reads never cross a segment or exceed ``io_combine_limit``, the one-block "unget", the per-buffer
data of a wrapped queue, the fast path, the backend's pin budget).

``MUTANTS`` maps a mutant's name to a zero-argument factory returning an implementation object
(a :class:`~pytest_readstream.implementations.ReferenceImplementation` whose streams, and whose
scans' streams, are the mutant's). ``pytest --readstream-impl=mutant:<name>`` runs the suite
against one; :func:`run_kill_matrix` runs it against all of them and records which tests kill
which mutant (``readstream mutants``). Each factory's docstring says what the bug is, where it
comes from and what it breaks.

Mutant streams run with the model's internal debug assertions **off**: a mutant must be caught by
the harness, from outside, as a bug in someone else's implementation would be.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import reference_impl
import reference_impl.buffers.bufmgr as _bufmgr
from reference_impl import STREAM_CLASSES, InvalidBlockNumber, ReadStreamBase, ReadStreamMaster
from reference_impl.buffers.pool import INVALID_BUFFER
from reference_impl.buffers.strategy import get_access_strategy_pin_limit

from . import _missed_mutants as _missed
from .protocol import ScanOutcome, ScanRequest
from .reference import ReferenceImplementation

__all__ = [
    "MODES",
    "MUTANTS",
    "SELF_CHECKS_OFF",
    "BLACK_BOX",
    "MutantImplementation",
    "mutant_doc",
    "reference_in_mode",
    "run_kill_matrix",
    "run_suite",
    "format_kill_matrix",
]

MODES: tuple[str, ...] = ("suite", "self-checks-off", "black-box")
"""How much of the model the suite may lean on (columns of the kill matrix): ``suite`` as
``--readstream-impl=mutant:<name>`` runs (the buffer manager's use-after-free check of freed rings
on), ``self-checks-off`` (no check of the model's own left), ``black-box`` (also no
``introspection``: the suite sees only the buffer manager)."""


# ------------------------------------------------------------------------------ the stream changes
if TYPE_CHECKING:
    # The mixins below are combined with each version's stream class at run time; for the type
    # checker they are ReadStreamMaster subclasses, so their attributes are known.
    _Base = ReadStreamMaster
else:
    _Base = object


class _PinLimitZeroAfterSetStrategy(_Base):
    def set_strategy(self, strategy: Any) -> None:
        super().set_strategy(strategy)
        limit = get_access_strategy_pin_limit(strategy, self.backend.settings.nbuffers)
        # v1 of the patch: Min(queue_size - 1, GetAccessStrategyPinLimit()), with no floor of 1.
        self.max_pinned_buffers = min(self.queue_size - 1, limit)
        self._clamp_distances()


class _StaleStrategyKept(_Base):
    def set_strategy(self, strategy: Any) -> None:
        old = self.strategy
        super().set_strategy(strategy)
        if old is None and strategy is not None:
            # The reused stream keeps reading as it was created: without a ring.
            for op in self.ios:
                op.set_strategy(None)


class _FreedStrategyStillUsed(_Base):
    def set_strategy(self, strategy: Any) -> None:
        old = self.strategy
        super().set_strategy(strategy)
        if old is not None and strategy is None:
            # The reused stream keeps the strategy it was created with, which the scan freed.
            for op in self.ios:
                op.set_strategy(old)


class _DistanceNotClamped(_Base):
    def _clamp_distances(self) -> None:
        distance = self.distance
        super()._clamp_distances()
        self.distance = distance


class _PausedDistanceNotClamped(_Base):
    def _clamp_distances(self) -> None:
        if not hasattr(self, "resume_readahead_distance"):
            super()._clamp_distances()  # PostgreSQL 18: nothing is saved by a pause
            return
        saved = (self.resume_readahead_distance, self.resume_combine_distance)
        super()._clamp_distances()
        self.resume_readahead_distance, self.resume_combine_distance = saved


class _CapacityUpdatedOnSetStrategy(_Base):
    def set_strategy(self, strategy: Any) -> None:
        super().set_strategy(strategy)
        self.stats.capacity = self.max_pinned_buffers
        io_stats = getattr(self, "io_stats", None)
        if io_stats is not None:
            io_stats.distance_capacity = self.max_pinned_buffers


class _EndLeaksQueuedPins(_Base):
    def end(self) -> None:
        if self.ended:
            return super().end()
        # read_stream_end frees the stream without the reset that releases its queue.
        self.ended = True
        return None


class _EndKeepsLookingAhead(_Base):
    _ending: tuple[tuple[str, int], ...] = ()

    def end(self) -> None:
        if not self.ended:
            # The distances as they are before read_stream_reset sets them to 0 ("Stop looking
            # ahead"): the first buffer drained puts them back.
            names = (
                ("readahead_distance", "combine_distance")
                if hasattr(self, "combine_distance")
                else ("distance",)
            )
            self._ending = tuple((name, getattr(self, name)) for name in names)
        super().end()

    def _next_buffer(self) -> int:
        if self._ending:
            # The distance is not zeroed, so the drain keeps asking the callback for blocks.
            for name, value in self._ending:
                setattr(self, name, value)
            self._ending = ()
        return super()._next_buffer()


class _ReadLongerThanIoCombineLimit(_Base):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One more block per combined read than io_combine_limit (an off-by-one in the cap).
        self.io_combine_limit += 1
        self.buffers.append(INVALID_BUFFER)


class _UngetBlockLost(_Base):
    def _unget_block(self, blocknum: int) -> None:
        # The block taken from the callback is dropped instead of being pushed back.
        return None


class _ResetKeepsPutBackBlock(_Base):
    def reset(self) -> None:
        kept = self.buffered_blocknum
        super().reset()
        # read_stream_reset without "Forget buffered block number": the block the look-ahead put
        # back is the first one after the reset. (The model's own record of what the callback
        # produced keeps it too, so that the suite, not a self-check, has to see it.)
        self.buffered_blocknum = kept
        if kept != InvalidBlockNumber and self.debug:
            self._produced.appendleft(kept)


class _ForwardedLeftOutOfBudget(_missed.PinLimitSeenOtherwise):
    def _pin_limit_seen(self, real: int) -> int:
        # read_stream_start_pending_read without "buffer_limit += stream->forwarded_buffers": the
        # buffers a split read forwarded, already pinned, are not added to the budget.
        return real - self.forwarded_buffers


class _UngetBlockDuplicated(_Base):
    _dup_pending = False

    def _unget_block(self, blocknum: int) -> None:
        super()._unget_block(blocknum)
        self._dup_pending = True

    def _get_block(self, slot: int) -> int:
        ungot = self.buffered_blocknum
        blocknum = super()._get_block(slot)
        if ungot != InvalidBlockNumber and self._dup_pending:
            # The pushed-back block is handed out, and stays pushed back once more.
            self.buffered_blocknum = ungot
            self._dup_pending = False
        return blocknum


class _PerBufferDataMisalignedAfterWrap(_Base):
    def _get_block(self, slot: int) -> int:
        pbd = self._pbd
        if pbd is not None and 0 <= slot < self.next_buffer_index:
            # The slot index was wrapped for the buffer but not for its data: the data lands past
            # the queue's end, where the consumer never looks.
            slot += self.queue_size
            if len(pbd) <= slot:
                pbd.extend([None] * (slot + 1 - len(pbd)))
        return super()._get_block(slot)


class _FastPathNotLeftAfterMiss(_Base):
    def _next_buffer(self) -> int:
        was_fast = self.fast_path
        buf = super()._next_buffer()
        if was_fast and self.ios_in_progress == 1 and self.distance != 0:
            # The miss found in the fast path is not recorded as an I/O to wait for, and the
            # stream stays in the fast path: the next call hands out the unread buffer.
            self.ios_in_progress = 0
            self.fast_path = True
        return buf


class _DowngradedReadNotFinished(_Base):
    """After waiting for a read whose page failed verification but was let through
    (``zero_damaged_pages`` zeroed it, ``ignore_checksum_failure`` accepted it), the stream does
    not count that read as finished: one I/O slot stays taken for the rest of the stream."""

    _checksum_faults_seen = 0

    def _after_wait(self, op: Any, needed_wait: bool) -> None:
        super()._after_wait(op, needed_wait)
        settings = self.backend.settings
        if not (settings.zero_damaged_pages or settings.ignore_checksum_failure):
            return
        ledger = self.backend.instance.storage.faults.ledger
        seen = sum(1 for e in ledger if e["fault"] == "checksum" and e["relation"] == self.rel.name)
        if seen > self._checksum_faults_seen:
            self._checksum_faults_seen = seen
            # The downgraded error is taken for a read still in progress.
            self.ios_in_progress += 1


class _EffectiveLimitIgnored(_Base):
    """``read_stream_begin_impl`` sized from ``io_combine_limit`` itself, not from the effective
    limit ``Min(io_combine_limit, io_max_combine_limit)``."""

    def __init__(self, backend: Any, *args: Any, **kwargs: Any) -> None:
        settings = backend.settings
        if settings.io_combine_limit > settings.io_max_combine_limit:
            # The queue, max_pinned_buffers and the largest read all follow the raw GUC.
            raw = dataclasses.replace(settings, io_max_combine_limit=settings.io_combine_limit)
            with _patched(backend, "settings", raw):
                super().__init__(backend, *args, **kwargs)
        else:
            super().__init__(backend, *args, **kwargs)


class _IgnoresAdditionalPinLimit(_Base):
    """The stream never consults ``GetAdditionalPinLimit()`` (it takes 32767 for the answer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._additional_pin_limit = lambda: 32767


@contextlib.contextmanager
def _segment_size(blocks: int) -> Iterator[None]:
    saved = _bufmgr.RELSEG_SIZE
    _bufmgr.RELSEG_SIZE = blocks
    try:
        yield
    finally:
        _bufmgr.RELSEG_SIZE = saved


class _ReadCrossesSegment(_Base):
    """``StartReadBuffers`` as this stream calls it misses the ``mdmaxcombine`` cut: its reads
    are combined across a 1 GiB segment boundary."""

    def _start_pending_read(self) -> bool:
        with _segment_size(1 << 40):
            return super()._start_pending_read()


def _block_range_to_current_size(
    rel: Any, fork: Any, callback: Callable[[Any, Any], Any], private: Any
) -> Callable[[Any, Any], Any]:
    """The block-range callback, made to stop at the relation's size *now*, not at ``last_exclusive``."""
    if not isinstance(private, reference_impl.BlockRangeReadStreamPrivate):
        return callback

    def to_current_size(stream: Any, p: Any) -> Any:
        size = rel.nblocks(fork)
        if p.last_exclusive < size:
            p.last_exclusive = size
        return callback(stream, p)

    return to_current_size


# ------------------------------------------------------------------------------ the scan changes
@contextlib.contextmanager
def _rescan_keeps_stream_strategy(direction: str) -> Iterator[None]:
    """``heap_rescan`` without the sample-scan thread's fix, for one direction of the swap."""
    from reference_impl.scans.heapscan import HeapScan

    original = HeapScan._propagate_strategy

    def unfixed(self: Any, old: Any) -> None:
        new = self.strategy
        if direction == "add" and old is None and new is not None:
            return  # the stream keeps reading without a strategy
        if direction == "remove" and old is not None and new is None:
            return  # the stream keeps the strategy initscan just freed
        original(self, old)

    with _patched(HeapScan, "_propagate_strategy", unfixed):
        yield


_SYSTEM_TIME_GRACE = 512


@contextlib.contextmanager
def _system_time_late_deadline() -> Iterator[None]:
    """``SYSTEM_TIME`` that goes on selecting blocks for a while after its deadline."""
    from reference_impl.sampling.stride import SystemTimeSampler

    original = SystemTimeSampler._expired

    def late(self: Any) -> bool:
        if not original(self):
            return False
        grace = getattr(self, "_mutant_grace", 0)
        if grace < _SYSTEM_TIME_GRACE:
            self._mutant_grace = grace + 1
            return False
        return True

    with _patched(SystemTimeSampler, "_expired", late):
        yield


@contextlib.contextmanager
def _system_hash_inputs_swapped() -> Iterator[None]:
    """``TABLESAMPLE SYSTEM`` hashing ``[seed, block]`` instead of ``[block, seed]``."""
    import numpy as np

    import reference_impl.scans.samplescan as samplescan
    from reference_impl.sampling import hash_bytes_uint32
    from reference_impl.sampling.tablesample import system_cutoff

    def swapped(nblocks: int, percent: float, seed: int, **_kw: Any) -> Iterator[Any]:
        cutoff = system_cutoff(percent)
        chosen = [b for b in range(nblocks) if hash_bytes_uint32([seed, b]) < cutoff]
        if chosen:
            yield np.array(chosen, dtype=np.uint32)

    with _patched(samplescan, "system_sample_block_chunks", swapped):
        yield


@contextlib.contextmanager
def _vacuum_skips_only_longer_runs() -> Iterator[None]:
    """VACUUM jumping only over runs of *more than* 32 skippable blocks (``>`` for ``>=``)."""
    import reference_impl.scans.vacuum as vacuum

    with _patched(vacuum, "SKIP_PAGES_THRESHOLD", vacuum.SKIP_PAGES_THRESHOLD + 1):
        yield


@contextlib.contextmanager
def _bulkread_ring_in_blocks_not_kb() -> Iterator[None]:
    """``GetAccessStrategy(BAS_BULKREAD)`` whose cap lost its ``× (BLCKSZ / 1024)``: the ring is
    capped at ``Max(256, GetPinLimit())`` kB instead of ``Max(256, GetPinLimit() × 8)`` kB."""
    import reference_impl.scans.heapscan as heapscan
    from reference_impl.buffers.strategy import BAS_BULKREAD, get_access_strategy_with_size

    original = heapscan.get_access_strategy

    def small_ring(btype: Any, settings: Any, **kwargs: Any) -> Any:
        if btype is not BAS_BULKREAD:
            return original(btype, settings, **kwargs)
        eic = settings.effective_io_concurrency
        ring_kb = min(256 + 8 * settings.effective_io_combine_limit * eic, max(256, settings.pin_limit))
        return get_access_strategy_with_size(btype, ring_kb, settings.nbuffers)

    with _patched(heapscan, "get_access_strategy", small_ring):
        yield


# ------------------------------------------------------------------------------ implementations
class MutantImplementation(ReferenceImplementation):
    """The reference (``read_stream.c`` as ``reference_impl.ReadStream``) with one bug: streams,
    and scans' streams, get the mutant's stream class.

    Its streams never run the model's internal invariant checks. ``mode`` says what else the
    suite may lean on (:data:`MODES`): ``suite`` leaves the buffer manager's own
    use-after-free check of freed rings on (how ``--readstream-impl=mutant:<name>`` runs);
    ``self-checks-off`` turns that off too, so that only the harness can see a bug;
    ``black-box`` also withdraws the ``introspection`` capability, so the suite sees nothing but
    the buffer manager. ``bug=None`` is the reference itself in that mode.
    """

    def __init__(
        self,
        name: str,
        doc: str,
        mixin: type | None = None,
        *,
        callback_hook: Callable[[Any, Any, Callable[..., Any], Any], Callable[..., Any]] | None = None,
        scan_patch: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
        mode: str = "suite",
        introspection_only: bool = False,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is invalid: allowed {', '.join(MODES)}")
        self.mode = mode
        self.name = f"mutant:{name}" if mode == "suite" else f"mutant:{name}[{mode}]"
        self.bug = name
        self.__doc__ = doc
        # The bug lives only in what the stream reports about itself (a statistic): the buffer
        # manager cannot see it, so black-box mode is blind to it by construction.
        self.introspection_only = introspection_only
        if mode == "black-box":
            self.capabilities = self.capabilities - {"introspection"}
        self._callback_hook = callback_hook
        self._scan_patch = scan_patch
        # Each model version's stream class: the reference's, or the mutant's subclasses.
        self._stream_classes: dict[str, type[ReadStreamBase]] = (
            dict(STREAM_CLASSES)
            if mixin is None
            else {version: _with_mixin(mixin, cls) for version, cls in STREAM_CLASSES.items()}
        )

    def begin_stream(
        self,
        backend: Any,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any = None,
        *,
        fork: Any = None,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> Any:
        """``read_stream_begin_relation`` of the mutant (also every stream its scans begin)."""
        fork = reference_impl.ForkNumber.MAIN if fork is None else fork
        if self.mode != "suite":
            # The buffer manager's own use-after-free check (a freed ring asked for a buffer)
            # is the last self-check of the model; an implementation under test has none.
            backend.instance.debug = False
        if self._callback_hook is not None:
            callback = self._callback_hook(rel, fork, callback, private)
        return reference_impl._begin_stream_of(
            self._stream_classes,
            backend,
            rel,
            callback,
            private,
            fork=fork,
            flags=flags,
            strategy=strategy,
            per_buffer_data=per_buffer_data,
            debug=False,
        )

    def capabilities_for(self, settings: Any) -> frozenset[str]:
        """The reference's capabilities under ``settings``, less ``introspection`` in black-box mode."""
        caps = super().capabilities_for(settings)
        return caps - {"introspection"} if self.mode == "black-box" else caps

    def run_scan(self, request: ScanRequest) -> ScanOutcome:
        """The reference's scan, with every stream it begins made by this mutant."""
        with contextlib.ExitStack() as stack:
            # The scans look begin_stream up when they begin a stream, so they get the mutant's.
            stack.enter_context(_patched(reference_impl, "begin_stream", self.begin_stream))
            if self._scan_patch is not None:
                stack.enter_context(self._scan_patch())
            return super().run_scan(request)

    def __repr__(self) -> str:
        return f"MutantImplementation({self.bug!r})"


@contextlib.contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    saved = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, saved)


_StreamT = TypeVar("_StreamT", bound=ReadStreamBase)


def _with_mixin(mixin: type, base: type[_StreamT]) -> type[_StreamT]:
    """``base`` with the mutant's ``mixin`` in front (``XReadStream``, ``XReadStream19``, ...)."""
    return type(f"{mixin.__name__.lstrip('_')}{base.__name__}", (mixin, base), {})


def _mutant(
    name: str, doc: str, mixin: type | None = None, **kwargs: Any
) -> Callable[..., MutantImplementation]:
    def factory(mode: str = "suite") -> MutantImplementation:
        return MutantImplementation(name, doc, mixin, mode=mode, **kwargs)

    factory.__name__ = name.replace("-", "_")
    factory.__doc__ = doc
    return factory


# ------------------------------------------------------------------------------ the table
MUTANTS: dict[str, Callable[..., MutantImplementation]] = {
    "set-strategy-pin-limit-zero": _mutant(
        "set-strategy-pin-limit-zero",
        """``read_stream_set_strategy`` sets ``max_pinned_buffers = Min(queue_size - 1,
        GetAccessStrategyPinLimit())`` with no floor of 1, as in v1 of the sample-scan patch
        (Nazir Yavuz's review: "might be 0 after this, it should be at least 1 to proceed").
        A strategy whose pin limit is 0 (a 1-buffer VACUUM ring) leaves a stream that can pin
        nothing: it reports the end of the stream at once.""",
        _PinLimitZeroAfterSetStrategy,
    ),
    "stale-strategy-after-rescan": _mutant(
        "stale-strategy-after-rescan",
        """A rescan that adds a strategy (the relation grew past ``NBuffers / 4``) reuses the
        stream, which keeps reading with the strategy it was created with: none. This is the
        ``heap_rescan`` bug of the sample-scan thread ("keep using no strategy after one is
        allocated"): reads of the second pass are counted in context ``normal`` and fill the
        pool instead of recycling a ring. Both the stream's ``set_strategy`` (a stream-level
        rescan) and the heap scan's rescan (``heap_rescan`` without the fix) have the bug.""",
        _StaleStrategyKept,
        scan_patch=lambda: _rescan_keeps_stream_strategy("add"),
    ),
    "freed-strategy-after-rescan": _mutant(
        "freed-strategy-after-rescan",
        """A rescan that removes a strategy (the relation shrank below ``NBuffers / 4``) frees
        it, and the reused stream keeps a pointer to it: the sample-scan thread's "retain a
        dangling pointer after one is freed". The next victim buffer is asked of a freed ring.
        Both the stream's ``set_strategy(None)`` and the heap scan's rescan (``heap_rescan``
        without the fix, which reuses the stream instead of recreating it) have the bug.""",
        _FreedStrategyStillUsed,
        scan_patch=lambda: _rescan_keeps_stream_strategy("remove"),
    ),
    "distance-not-clamped-on-set-strategy": _mutant(
        "distance-not-clamped-on-set-strategy",
        """``read_stream_set_strategy`` lowers ``max_pinned_buffers`` but leaves the current
        look-ahead distance above it (fixed in v3 of the sample-scan patch: "clamps the current
        look-ahead distances"). A ``READ_STREAM_FULL`` stream switched to a small ring then pins
        more buffers than the ring allows.""",
        _DistanceNotClamped,
    ),
    "paused-distance-not-clamped": _mutant(
        "paused-distance-not-clamped",
        """``read_stream_set_strategy`` clamps the current distances but not those saved by
        ``read_stream_pause`` (v3 of the sample-scan patch clamps "those saved for resuming a
        paused stream"). After ``resume`` the stream looks ahead further than its new pin cap
        (PostgreSQL master only: PostgreSQL 18 has no pause).""",
        _PausedDistanceNotClamped,
    ),
    "capacity-updated-on-set-strategy": _mutant(
        "capacity-updated-on-set-strategy",
        """``read_stream_set_strategy`` rewrites the capacity statistic
        (``distance_capacity``) in the middle of a scan, as v1 of the sample-scan patch did
        (review: "You change distance_capacity but we are still in the same scan ... no need to
        change it"). EXPLAIN would then report a capacity the scan did not have for most of its
        life. Only the stream's own statistics show it: black-box mode cannot.""",
        _CapacityUpdatedOnSetStrategy,
        introspection_only=True,
    ),
    "block-range-reads-current-size": _mutant(
        "block-range-reads-current-size",
        """``block_range_read_stream_cb`` stops at the relation's current size instead of the
        ``last_exclusive`` fixed when the scan started. The online-checksums thread requires
        that a stream never reads a block at or past the ``numblocks`` captured at its start,
        even while the relation grows.""",
        callback_hook=_block_range_to_current_size,
    ),
    "end-leaks-queued-pins": _mutant(
        "end-leaks-queued-pins",
        """``read_stream_end`` frees the stream without resetting it first, so buffers pinned by
        look-ahead and still queued keep their pins (``read_stream.md`` §9.9: after end the
        stream holds no pins); the resource owner would report a buffer leak.""",
        _EndLeaksQueuedPins,
    ),
    "end-keeps-looking-ahead": _mutant(
        "end-keeps-looking-ahead",
        """``read_stream_end``'s reset does not set the distance to 0, so while draining the
        queue the stream keeps calling the callback and starting reads. The online-checksums
        thread: ending a stream may still read what was already queued, never anything new.""",
        _EndKeepsLookingAhead,
    ),
    "read-crosses-segment": _mutant(
        "read-crosses-segment",
        """``StartReadBuffers`` without the ``smgrmaxcombine`` (``mdmaxcombine``) cut: a combined
        read runs across a 1 GiB segment boundary, which ``md.c`` cannot do in one
        ``preadv`` (``read_stream.md`` §9.5, confirmed on PostgreSQL 18.6: a read never crosses a
        segment).""",
        _ReadCrossesSegment,
    ),
    "read-exceeds-io-combine-limit": _mutant(
        "read-exceeds-io-combine-limit",
        """An off-by-one in the combine limit: the pending read grows to ``io_combine_limit + 1``
        blocks before it is started (``read_stream.md`` §9.5: every I/O covers at most
        ``io_combine_limit`` blocks).""",
        _ReadLongerThanIoCombineLimit,
    ),
    "unget-block-lost": _mutant(
        "unget-block-lost",
        """``read_stream_unget_block`` forgets the block: when the pending read cannot be started
        (``max_ios`` reached, or the pin budget is short) the block just taken from the callback
        is dropped, so the consumer never receives it (``read_stream.md`` §9.6).""",
        _UngetBlockLost,
    ),
    "unget-block-duplicated": _mutant(
        "unget-block-duplicated",
        """The pushed-back block is delivered twice: ``read_stream_get_block`` returns the
        buffered block without clearing it the first time (``read_stream.md`` §9.6: each
        produced block is returned once).""",
        _UngetBlockDuplicated,
    ),
    "reset-keeps-put-back-block": _mutant(
        "reset-keeps-put-back-block",
        """``read_stream_reset`` does not forget the block the look-ahead put back
        (``read_stream_unget_block`` at a full I/O slot or a short pin budget): after a rescan
        the stream returns that block, which the callback produced before the reset, in place of
        the callback's next one. The Python twin of the systematic C mutant
        ``read_stream_reset:1084:2:SDL`` of 18.6, which survived the suite before
        ``test_starts.py``.""",
        _ResetKeepsPutBackBlock,
    ),
    "forwarded-left-out-of-budget": _mutant(
        "forwarded-left-out-of-budget",
        """``read_stream_start_pending_read`` leaves the forwarded buffers out of the pin budget
        (``buffer_limit += stream->forwarded_buffers`` is lost): after a read split at a cached
        block, a binding ``GetAdditionalPinLimit()`` makes the stream wait for its pins to go
        before it starts the read of a buffer it already holds. The Python twin of the
        systematic C mutant ``read_stream_start_pending_read:319:2:SDL`` of 18.6, which survived
        the suite before ``test_starts.py``.""",
        _ForwardedLeftOutOfBudget,
    ),
    "per-buffer-data-misaligned-after-wrap": _mutant(
        "per-buffer-data-misaligned-after-wrap",
        """The per-buffer data slot of a block is computed without wrapping around the circular
        queue while its buffer slot is wrapped: after the queue has wrapped once, buffers come
        back with stale data of an earlier block (``read_stream.md`` §9.7).""",
        _PerBufferDataMisalignedAfterWrap,
    ),
    "fast-path-not-left-after-miss": _mutant(
        "fast-path-not-left-after-miss",
        """The all-cached fast path does not record a miss as an I/O to wait for and does not leave
        the fast path: the next call hands out a buffer whose read was never waited for
        (``read_stream.md`` §5).""",
        _FastPathNotLeftAfterMiss,
    ),
    "ignores-additional-pin-limit": _mutant(
        "ignores-additional-pin-limit",
        """``read_stream_start_pending_read`` never asks ``GetAdditionalPinLimit()``: the stream
        pins up to ``max_pinned_buffers`` whatever the backend already holds, beyond its fair
        share of the pool (``buffers_and_strategies.md`` §4.1; the budget binds at default
        settings, confirmed on PostgreSQL 18.6).""",
        _IgnoresAdditionalPinLimit,
    ),
    "downgraded-read-not-finished": _mutant(
        "downgraded-read-not-finished",
        """After waiting for a read whose page failed verification but was let through
        (``zero_damaged_pages`` zeroed it, ``ignore_checksum_failure`` accepted it as read), the
        stream does not count the read as finished: ``ios_in_progress`` keeps one slot taken for
        the rest of the stream. With ``effective_io_concurrency`` 1 the stream then starts no
        read and ends early; with more, it never again reaches ``max_ios`` reads in flight
        (issue 18: caught only by the model's own invariant checks before).""",
        _DowngradedReadNotFinished,
    ),
    "effective-combine-limit-ignored": _mutant(
        "effective-combine-limit-ignored",
        """``read_stream_begin_impl`` sizes the stream from ``io_combine_limit`` instead of the
        effective limit ``Min(io_combine_limit, io_max_combine_limit)``: PostgreSQL 18 lets a user
        set ``io_combine_limit`` above ``io_max_combine_limit``, and then the queue,
        ``max_pinned_buffers`` and the largest read the stream combines are too large
        (issue 17: this passed the whole suite).""",
        _EffectiveLimitIgnored,
    ),
    "system-sample-hash-order": _mutant(
        "system-sample-hash-order",
        """``TABLESAMPLE SYSTEM`` hashes its inputs in another order, ``[seed, block]`` instead of
        ``system_nextsampleblock``'s ``[block, seed]``: the sample still has the requested size on
        average and is still repeatable, but it is not PostgreSQL's block set for the
        ``REPEATABLE`` seed (issue 17: only the model's own fidelity tests noticed). Scan level.""",
        scan_patch=_system_hash_inputs_swapped,
    ),
    "vacuum-skip-threshold-exclusive": _mutant(
        "vacuum-skip-threshold-exclusive",
        """VACUUM skips a run of all-visible pages only when it is *more than*
        ``SKIP_PAGES_THRESHOLD`` (32) pages long, where ``heap_vac_scan_next_block`` skips runs of
        at least 32: a run of exactly 32 is read (issue 17: only the model's own fidelity tests
        noticed). Scan level.""",
        scan_patch=_vacuum_skips_only_longer_runs,
    ),
    "bulkread-ring-in-blocks-not-kb": _mutant(
        "bulkread-ring-in-blocks-not-kb",
        """``GetAccessStrategy(BAS_BULKREAD)`` caps the ring at ``Max(256, GetPinLimit())`` kB, the
        pin limit taken as kilobytes instead of blocks of 8 kB: with the default pool a sequential
        scan's ring is 32 buffers instead of 94 (issue 18: caught before only because pages
        escaped the smaller ring). Scan level.""",
        scan_patch=_bulkread_ring_in_blocks_not_kb,
    ),
    # Issue 26: one mutant per class of bugs the suite missed, each the twin of the C mutant of
    # the same name (postgres/builds/traced_copy.py) where the class can be written in the model.
    "io-combine-limit-read-live": _mutant(
        "io-combine-limit-read-live",
        """Class 1, settings changed while a stream is open: the look-ahead combines up to the
        ``io_combine_limit`` GUC as it is now (a ``SET`` between two ``FETCH``es of a cursor), not
        the limit the stream captured when it began ("Capture stable values for these two
        GUC-derived numbers for the lifetime of this stream", ``read_stream_begin_impl``).""",
        _missed.IoCombineLimitReadLive,
    ),
    "pin-limit-int16-truncated": _mutant(
        "pin-limit-int16-truncated",
        """Class 2, extreme limits: ``GetAdditionalPinLimit()`` is cast to ``int16`` instead of
        capped at ``PG_INT16_MAX`` (``read_stream_start_pending_read``): a backend allowed 65536 + 3
        more pins (a pool of tens of millions of buffers) reads 3 blocks at a time.""",
        _missed.PinLimitInt16Truncated,
    ),
    "forwarded-overflow-not-copied": _mutant(
        "forwarded-overflow-not-copied",
        """Class 3, constructed edge sequences: a read split at a cached block whose forwarded
        buffer lands in the overflow zone past the queue's end is copied to the front without that
        buffer (``overflow = buffer_index + nblocks - queue_size``, the forwarded buffers left
        out): the next start does not find it, pins the block again and the forwarded pin leaks
        (``read_stream_start_pending_read``'s comment on copying overflowing buffers).""",
        _missed.ForwardedOverflowNotCopied,
    ),
    "advice-never": _mutant(
        "advice-never",
        """Class 4, the flags of each start: under ``io_method=sync`` the stream never sets
        ``READ_BUFFERS_ISSUE_ADVICE`` (``advice_enabled`` stays false), so random reads are never
        prefetched with ``posix_fadvise``.""",
        _missed.AdviceNever,
    ),
    "hit-distance-not-decayed": _mutant(
        "hit-distance-not-decayed",
        """Class 5, how far ahead the callback is called: a start that needs no I/O does not decay
        the look-ahead (19+: read-ahead) distance (``read_stream_start_pending_read``: "Look-ahead
        distance decays, no I/O necessary"), so a ``READ_STREAM_FULL`` stream over cached blocks
        keeps taking ``io_combine_limit`` blocks ahead from the callback and never reaches the
        fast path.""",
        _missed.HitDistanceNotDecayed,
    ),
    "fast-path-never": _mutant(
        "fast-path-never",
        """Class 6, the fast path: an all-cached stream never enters the fast path (every buffer
        goes through the queue's regular path; correct, but the optimisation is gone).""",
        _missed.FastPathNever,
        introspection_only=True,
    ),
    "other-temp-accepted": _mutant(
        "other-temp-accepted",
        """Class 7, entry points: a stream on another session's temporary table is begun instead
        of raising "cannot access temporary tables of other sessions" (``RELATION_IS_OTHER_TEMP``
        in ``read_stream_begin_impl``): it would read pages whose current contents live in the
        other session's local buffers.""",
        _missed.OtherTempAccepted,
    ),
    "descending-merged": _mutant(
        "descending-merged",
        """Class 8, order assumptions: a block just below the pending read is merged into it
        without moving the read's start (a backwards-combining stream done wrong): a descending
        stream reads and returns the block after the read instead of the one before it.""",
        _missed.DescendingMerged,
    ),
    "system-time-ignores-deadline": _mutant(
        "system-time-ignores-deadline",
        f"""``TABLESAMPLE SYSTEM_TIME`` keeps selecting blocks for {_SYSTEM_TIME_GRACE} more requests
        after its time limit expired, so the pages processed after the deadline are no longer
        bounded by the blocks the stream had already queued (the sample-scan thread: "any blocks
        already queued when the limit expires are still processed", and nothing else). Scan-level
        only: the stream itself is the reference's.""",
        scan_patch=_system_time_late_deadline,
    ),
}


def reference_in_mode(mode: str) -> ReferenceImplementation:
    """The reference in one of :data:`MODES` (``suite``: the plain reference, self-checks on)."""
    if mode == "suite":
        return ReferenceImplementation()
    impl = MutantImplementation("reference", "The reference model itself.", mode=mode)
    impl.name = f"reference[{mode}]"
    return impl


class _ModeTable:
    """``SELF_CHECKS_OFF.<name>`` / ``BLACK_BOX.<name>``: factories of the reference or of a mutant
    in that mode, so that ``--readstream-impl=pytest_readstream.mutants:BLACK_BOX.reference`` (or
    ``...:SELF_CHECKS_OFF.unget-block-lost``) names one."""

    def __init__(self, mode: str) -> None:
        self._mode = mode

    def __getattr__(self, name: str) -> Callable[[], ReferenceImplementation]:
        mode = self._mode
        if name == "reference":
            return lambda: reference_in_mode(mode)
        if name in MUTANTS:
            factory = MUTANTS[name]
            return lambda: factory(mode)
        raise AttributeError(
            f"{name!r} is neither 'reference' nor a mutant: allowed {', '.join(sorted(MUTANTS))}"
        )

    def __repr__(self) -> str:
        return f"<implementations in mode {self._mode}>"


SELF_CHECKS_OFF = _ModeTable("self-checks-off")
BLACK_BOX = _ModeTable("black-box")


def impl_spec(name: str | None, mode: str) -> str:
    """The ``--readstream-impl`` value of the reference (``name`` None) or a mutant in ``mode``."""
    if mode == "suite":
        return "reference" if name is None else f"mutant:{name}"
    table = "SELF_CHECKS_OFF" if mode == "self-checks-off" else "BLACK_BOX"
    return f"pytest_readstream.mutants:{table}.{'reference' if name is None else name}"


def mutant_doc(name: str) -> str:
    """The one-paragraph description of a mutant (its factory's docstring, unwrapped)."""
    doc = MUTANTS[name].__doc__ or ""
    return " ".join(doc.split())


# ------------------------------------------------------------------------------ the kill matrix
def run_kill_matrix(
    mutants: list[str] | None = None,
    pytest_args: list[str] | None = None,
    json_path: str | os.PathLike[str] | None = None,
    *,
    include_reference: bool = True,
    modes: tuple[str, ...] = MODES,
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    """Run the conformance suite against each mutant (and the reference); who killed whom.

    Each implementation runs, once per mode of ``modes`` (:data:`MODES`), in its own ``python -m
    pytest --pyargs readstream_conformance`` subprocess with ``pytest_args`` appended (for instance
    ``["-n", "2", "-p", "hypothesis", "--hypothesis-profile=ci"]``); the failing test ids are
    collected by the recorder plugin ``readstream_conformance._killmatrix``. Returns (and writes to
    ``json_path`` when given)::

        {"schema": 2, "modes": [...],
         "reference": {"failed": [...], "exit_code": 0, "passed": n, ...},   # first mode
         "reference_modes": {mode: {...}},
         "mutants": {name: {"doc": ..., "killed": bool, "killing_tests": [...], "exit_code": ...,
                            "modes": {mode: {"killed": bool, "killing_tests": [...], ...}}}},
         "all_killed": bool, "reference_clean": bool}

    ``killed`` and ``killing_tests`` of a mutant are those of the first mode; ``all_killed``
    requires a kill in every mode, except black-box for a mutant whose bug only the stream's own
    statistics show (``introspection_only``; its black-box entry has ``"blind": true``), and
    ``reference_clean`` a clean reference in every mode. Outside
    the ``suite`` mode a test that failed only by one of the model's own checks (an
    ``InvariantViolation`` or ``ModelUsageError`` raised inside the model) is listed under
    ``self_check_failures`` and is no kill: the suite did not see the bug.
    """
    names = sorted(MUTANTS) if mutants is None else list(mutants)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise ValueError(f"unknown mutant(s) {', '.join(unknown)}: known {', '.join(sorted(MUTANTS))}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"mode(s) {', '.join(bad) or '(none)'} invalid: allowed {', '.join(MODES)}")
    args = list(pytest_args or [])
    out: dict[str, Any] = {"schema": 2, "pytest_args": args, "modes": list(modes), "mutants": {}}
    if include_reference:
        out["reference_modes"] = {m: run_suite(impl_spec(None, m), args, timeout_s, m) for m in modes}
        out["reference"] = out["reference_modes"][modes[0]]
    for name in names:
        per_mode: dict[str, Any] = {}
        for mode in modes:
            res = run_suite(impl_spec(name, mode), args, timeout_s, mode)
            baseline = out["reference_modes"][mode] if include_reference else None
            per_mode[mode] = {
                **judge(res, baseline),
                "self_check_failures": res["self_check_failures"],
                "exit_code": res["exit_code"],
                "passed": res["passed"],
                "skipped": res["skipped"],
            }
        first = per_mode[modes[0]]
        if "black-box" in per_mode:
            per_mode["black-box"]["blind"] = MUTANTS[name]().introspection_only
        out["mutants"][name] = {"doc": mutant_doc(name), **first, "modes": per_mode}
    # A mutant visible only through the stream's own statistics counts as expected in black-box.
    out["all_killed"] = all(
        all(r["killed"] or r.get("blind", False) for r in m["modes"].values())
        for m in out["mutants"].values()
    )
    out["reference_clean"] = (not include_reference) or all(
        not r["failed"] and not r.get("harness_errors") and r["exit_code"] == 0
        for r in out["reference_modes"].values()
    )
    if json_path is not None:
        path = Path(json_path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
    return out


def run_suite(impl: str, args: list[str], timeout_s: float, mode: str = "suite") -> dict[str, Any]:
    """One ``pytest --pyargs readstream_conformance --readstream-impl=impl ARGS`` run in a subprocess.

    Returns the failed test ids (from the kill-matrix recorder), counts and the exit code. In
    ``suite`` mode a failure raised by the model's own self-checks counts as a failure too; in the
    other modes it is reported apart (``self_check_failures``).
    """
    with tempfile.TemporaryDirectory(prefix="readstream-kill-") as tmp:
        record = Path(tmp) / "outcomes.json"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "readstream_conformance",
            f"--readstream-impl={impl}",
            "-p",
            "readstream_conformance._killmatrix",
            "-p",
            "no:cacheprovider",
            "-q",
            *args,
        ]
        # READSTREAM_NO_SHRINK: a kill needs a failure, not its minimal example.
        env = dict(os.environ, READSTREAM_KILLMATRIX_OUT=str(record), READSTREAM_NO_SHRINK="1")
        env.pop("READSTREAM_IMPL", None)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        outcomes: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
        side = record.with_name(record.name + ".harness.json")
        harness_lines: dict[str, str] = json.loads(side.read_text()) if side.exists() else {}
    failed = sorted(k for k, v in outcomes.items() if v == "failed")
    self_checks = sorted(k for k, v in outcomes.items() if v == "self-check")
    harness = sorted(k for k, v in outcomes.items() if v == "harness-error")
    if mode == "suite":
        # As the suite runs today: a failure is a failure, whoever raised it.
        failed = sorted(failed + self_checks)
    result = {
        "implementation": impl,
        "exit_code": proc.returncode,
        "failed": failed,
        "self_check_failures": self_checks,
        "passed": sum(1 for v in outcomes.values() if v == "passed"),
        "skipped": sum(1 for v in outcomes.values() if v == "skipped"),
        "passed_tests": sorted(k for k, v in outcomes.items() if v == "passed"),
        "harness_errors": harness,
        "harness_error_lines": [harness_lines[k] for k in harness if k in harness_lines],
    }
    if proc.returncode not in (0, 1) or not outcomes:
        # Usage errors, internal errors or nothing collected: keep the tail for the report.
        result["output_tail"] = (proc.stdout + proc.stderr)[-4000:]
    return result


def judge(res: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """A mutant's run judged against the unmutated run of the same matrix.

    A mutant is killed only by tests that *passed* on the unmutated implementation in the same
    run (``reference``): a test that failed there, or that the harness could not run (a harness
    error, :mod:`pytest_readstream.harness_errors`), shows nothing about the mutant. When the
    unmutated run failed or hit harness errors and no such test kills the mutant, it is ``not
    judged`` rather than SURVIVED. Without a reference run every failure counts (the old rule).
    """
    failed = list(res["failed"])
    if reference is None:
        killing, unjudged = failed, []
    else:
        passed = set(reference.get("passed_tests", ()))
        killing = [t for t in failed if t in passed]
        unjudged = [t for t in failed if t not in passed]
    ref_bad = reference is not None and (
        bool(reference["failed"]) or bool(reference.get("harness_errors")) or reference["passed"] == 0
    )
    return {
        "killed": bool(killing),
        "killing_tests": killing,
        "not_judged": not killing and (ref_bad or bool(res.get("harness_errors"))),
        "unjudged_failures": unjudged,
        "harness_errors": list(res.get("harness_errors", ())),
    }


def format_kill_matrix(result: dict[str, Any], *, examples: int = 3, reference: str = "reference") -> str:
    """The kill matrix of :func:`run_kill_matrix` as a text table (what ``readstream mutants`` prints).

    One line per mutant: killed or SURVIVED in each mode (how many tests failed), and the first
    ``examples`` killing tests of the first mode (test functions, parameters folded); then the
    reference's line. A result without modes (schema 1) is shown as one ``suite`` column; ``blind``
    marks a black-box cell of a mutant only introspection can see.
    """
    modes: list[str] = list(result.get("modes") or ["suite"])
    rows = []
    width = max([len(reference), 9, *(len(n) for n in result["mutants"])])
    cols = [max(len(m), 13) for m in modes]
    for name, m in sorted(result["mutants"].items()):
        per_mode = m.get("modes") or {modes[0]: m}
        cells = []
        for mode, w in zip(modes, cols, strict=True):
            r = per_mode.get(mode)
            if r is None:
                cell = "-"
            elif not r["killed"] and r.get("not_judged"):
                cell = "not judged"  # the unmutated run failed (or the harness did): no verdict
            elif not r["killed"] and r.get("blind"):
                cell = "blind"  # visible only through introspection: not a survival
            else:
                cell = f"{'killed' if r['killed'] else 'SURVIVED'} {len(r['killing_tests'])}"
            cells.append(f"{cell:<{w}}")
        funcs: dict[str, int] = {}
        for test in m["killing_tests"]:
            base = test.split("[", 1)[0]
            funcs[base] = funcs.get(base, 0) + 1
        shown = ", ".join(f"{f} ({n})" if n > 1 else f for f, n in list(funcs.items())[:examples])
        more = f", +{len(funcs) - examples} more" if len(funcs) > examples else ""
        rows.append(f"{name:<{width}}  {'  '.join(cells)}  {shown}{more}")
    heads = "  ".join(f"{mode:<{w}}" for mode, w in zip(modes, cols, strict=True))
    header = f"{'mutant':<{width}}  {heads}  killing tests in {modes[0]} (test function, parameter sets)"
    lines = [header, "-" * len(header), *rows]
    refs = result.get("reference_modes") or (
        {modes[0]: result["reference"]} if result.get("reference") is not None else {}
    )
    if refs:
        lines.append("-" * len(header))
        cells = []
        notes = []
        for mode, w in zip(modes, cols, strict=True):
            ref = refs.get(mode)
            if ref is None:
                cells.append(f"{'-':<{w}}")
                continue
            harness = ref.get("harness_errors") or []
            clean = not ref["failed"] and not harness and ref["exit_code"] == 0
            word = "clean" if clean else "FAILED"
            cells.append(f"{word + ' ' + str(len(ref['failed']) + len(harness)):<{w}}")
            if clean:
                notes.append(f"{mode}: passed {ref['passed']}, skipped {ref['skipped']}")
            else:
                shown = ", ".join([*ref["failed"], *harness][:examples])
                what = f" ({len(harness)} harness errors: no mutant is killed by them)" if harness else ""
                notes.append(f"{mode}: {shown}{what}")
        lines.append(f"{reference:<{width}}  {'  '.join(cells)}  {'; '.join(notes)}")
    for mode in modes:
        killed = sum(
            1
            for m in result["mutants"].values()
            if (m.get("modes") or {modes[0]: m}).get(mode, {}).get("killed")
        )
        blind = sum(
            1
            for m in result["mutants"].values()
            if (m.get("modes") or {}).get(mode, {}).get("blind") and not m["modes"][mode]["killed"]
        )
        unjudged = sum(
            1
            for m in result["mutants"].values()
            if (m.get("modes") or {modes[0]: m}).get(mode, {}).get("not_judged")
        )
        note = f" ({blind} visible only through introspection)" if blind else ""
        if unjudged:
            note += (
                f"; {unjudged} not judged: the unmutated run failed or the harness could not run "
                "its tests, so no failure of theirs counts as a kill"
            )
        lines.append(f"{mode}: {killed} of {len(result['mutants'])} mutants killed{note}")
    return "\n".join(lines)
