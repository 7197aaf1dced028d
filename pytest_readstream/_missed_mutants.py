"""The stream changes of the mutants written for the classes of bugs the suite once missed (issue 26).

Each mixin is combined with a version's stream class (``reference_impl.STREAM_CLASSES``) by
:mod:`pytest_readstream.mutants`, whose table documents the bug; each is the Python twin of a C
mutant of ``read_stream.c`` (``postgres/builds/traced_copy.py``, same name) where the class of bug
can be written in the model. They change one thing and keep the rest of the version's code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reference_impl import InvalidBlockNumber

if TYPE_CHECKING:
    from reference_impl import ReadStreamMaster as _Base
else:
    _Base = object

__all__ = [
    "AdviceNever",
    "DescendingMerged",
    "FastPathNever",
    "ForwardedOverflowNotCopied",
    "IoCombineLimitReadLive",
    "OtherTempAccepted",
    "HitDistanceNotDecayed",
    "PinLimitInt16Truncated",
    "PinLimitSeenOtherwise",
]

_INT16 = 1 << 16


class IoCombineLimitReadLive(_Base):
    """Class 1: the look-ahead (and, 19+, the combine distance's growth) uses the
    ``io_combine_limit`` GUC as it is now instead of the stream's own, captured at the begin."""

    _live_depth = 0

    def _with_live_limit(self, fn: Any) -> Any:
        saved = self.io_combine_limit
        self._live_depth += 1
        if self._live_depth == 1:
            self.io_combine_limit = self.backend.settings.effective_io_combine_limit
        try:
            return fn()
        finally:
            self._live_depth -= 1
            if self._live_depth == 0:
                self.io_combine_limit = saved

    def _look_ahead(self) -> None:
        self._with_live_limit(super()._look_ahead)

    def _after_wait(self, op: Any, needed_wait: bool) -> None:
        self._with_live_limit(lambda: super(IoCombineLimitReadLive, self)._after_wait(op, needed_wait))


class PinLimitSeenOtherwise(_Base):
    """A base of the mutants whose ``read_stream_start_pending_read`` sees another
    ``GetAdditionalPinLimit()`` than the buffer manager's (or the test's forced) answer:
    :meth:`_pin_limit_seen` turns the real answer into the one it uses, for that call only."""

    def _pin_limit_seen(self, real: int) -> int:
        raise NotImplementedError

    def _start_pending_read(self) -> bool:
        real = self._additional_pin_limit
        self._additional_pin_limit = lambda: self._pin_limit_seen(real())
        try:
            return super()._start_pending_read()
        finally:
            self._additional_pin_limit = real


class PinLimitInt16Truncated(PinLimitSeenOtherwise):
    """Class 2: ``GetAdditionalPinLimit()`` is cast to int16 instead of capped at
    ``PG_INT16_MAX``: a budget of 65536 + n pins allows n."""

    def _pin_limit_seen(self, real: int) -> int:
        v = real % _INT16
        return v - _INT16 if v >= _INT16 // 2 else v


class ForwardedOverflowNotCopied(_Base):
    """Class 3: a split read whose forwarded buffer lands in the overflow zone (past the queue's
    end) is copied to the front of the queue without that buffer: the copy counts the blocks
    read, not the buffers forwarded, so the next start does not find it, pins its block again
    and the forwarded pin leaks."""

    def _start_pending_read(self) -> bool:
        index = self.next_buffer_index
        pinned = self.pinned_buffers
        front = list(self.buffers[: self.io_combine_limit])
        started = super()._start_pending_read()
        if started:
            nblocks = self.pinned_buffers - pinned
            with_forwarded = index + nblocks + self.forwarded_buffers - self.queue_size
            without = index + nblocks - self.queue_size
            for j in range(max(0, without), max(0, with_forwarded)):
                self.buffers[j] = front[j]
        return started


class AdviceNever(_Base):
    """Class 4: the stream never issues read-ahead advice (``READ_BUFFERS_ISSUE_ADVICE``)."""

    def _begin_impl(self) -> None:
        super()._begin_impl()
        self.advice_enabled = False


class HitDistanceNotDecayed(_Base):
    """Class 5: a start that needs no I/O does not decay the (read-ahead) distance, so a stream
    that ramped up keeps asking the callback that far ahead over cached blocks."""

    def _start_pending_read(self) -> bool:
        name = "distance" if self.version == "18" else "readahead_distance"
        before = getattr(self, name)
        hits = self.stats.hits
        started = super()._start_pending_read()
        if self.stats.hits > hits and getattr(self, name) == before - 1:
            setattr(self, name, before)
        return started


class FastPathNever(_Base):
    """Class 6: an all-cached stream never enters the fast path."""

    def _next_buffer(self) -> int:
        buf = super()._next_buffer()
        self.fast_path = False
        return buf


class OtherTempAccepted(_Base):
    """Class 7: a stream on another session's temporary table is begun instead of refused
    (``RELATION_IS_OTHER_TEMP`` not checked)."""

    def _begin_impl(self) -> None:
        rel = self.rel
        owner = getattr(rel, "temp_owner", None)
        if rel.persistence == "t" and owner != self.backend.id:
            rel.temp_owner = self.backend.id
            try:
                super()._begin_impl()
            finally:
                rel.temp_owner = owner
            return
        super()._begin_impl()


class DescendingMerged(_Base):
    """Class 8: a block just below the pending read is merged into it without moving the read's
    start, so the read covers the block after it instead (a descending stream)."""

    def _get_block(self, slot: int) -> int:
        blocknum = super()._get_block(slot)
        n = self.pending_read_nblocks
        if n > 0 and blocknum != InvalidBlockNumber and blocknum + 1 == self.pending_read_blocknum:
            # The merge test of the look-ahead now passes: the read grows at its end.
            return self.pending_read_blocknum + n
        return blocknum
