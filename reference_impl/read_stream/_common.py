"""What every version's ``read_stream.c`` shares, unchanged: flags, the block-range callback,
``read_stream_get_block``, ``read_stream_unget_block``, ``read_stream_next_block``,
``read_stream_end``; and what the model adds around the C: argument checks, the stream's own
statistics, debug checks of the C's assertions, and the seed thread's proposed
``read_stream_set_strategy``.

A version's model (``pg18.py``, ``pg19.py``, ``pg20devel.py``) subclasses :class:`ReadStreamBase`
and writes out the functions its ``read_stream.c`` has in its own form:
``read_stream_begin_impl`` (``_begin_impl``), ``read_stream_start_pending_read``,
``read_stream_look_ahead``, ``read_stream_next_buffer`` (``_next_buffer``) and
``read_stream_reset``, plus what only that version has.

Names follow the C: a field ``stream->x`` is ``self.x``; ``stream->ios[i].op`` is
``self.ios[i]`` (a :class:`~reference_impl.buffers.bufmgr.ReadBuffersOperation`) and
``stream->ios[i].buffer_index`` is ``self.io_buffer_index[i]``; ``stream->per_buffer_data`` is
``self._pbd`` (a list, one entry per queue slot); ``stream->stats`` (19+) is ``self.io_stats``,
because ``self.stats`` holds the model's own statistics (:class:`ReadStreamStats`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..buffers.pool import INVALID_BUFFER
from ..buffers.strategy import BufferAccessStrategy, get_access_strategy_pin_limit
from ..errors import InvariantViolation, ModelUsageError
from ..storage.relation import ForkNumber, InvalidBlockNumber, Relation

if TYPE_CHECKING:
    from ..buffers.bufmgr import Backend, ReadBuffersOperation

__all__ = [
    "READ_STREAM_DEFAULT",
    "READ_STREAM_MAINTENANCE",
    "READ_STREAM_SEQUENTIAL",
    "READ_STREAM_FULL",
    "READ_STREAM_USE_BATCHING",
    "PG_INT16_MAX",
    "Callback",
    "BlockRangeReadStreamPrivate",
    "block_range_read_stream_cb",
    "ReadStreamStats",
    "ReadStreamBase",
]

# read_stream.h
READ_STREAM_DEFAULT = 0x00
READ_STREAM_MAINTENANCE = 0x01
READ_STREAM_SEQUENTIAL = 0x02
READ_STREAM_FULL = 0x04
READ_STREAM_USE_BATCHING = 0x08
_ALL_FLAGS = 0x0F

#: The C's int16 fields (distances, pins, queue indexes) are clamped to this, as the C does.
PG_INT16_MAX = 32767

Callback = Callable[[Any, Any], Any]
"""``callback(stream, private)`` → a block number or ``InvalidBlockNumber``; when the stream has
per-buffer data, a tuple ``(block, data)`` or ``InvalidBlockNumber``."""


class BlockRangeReadStreamPrivate:
    """``BlockRangeReadStreamPrivate``: blocks ``current_blocknum .. last_exclusive - 1``."""

    __slots__ = ("current_blocknum", "last_exclusive")

    def __init__(self, current_blocknum: int, last_exclusive: int) -> None:
        self.current_blocknum = current_blocknum
        self.last_exclusive = last_exclusive

    def __repr__(self) -> str:
        return f"BlockRange({self.current_blocknum}..{self.last_exclusive})"


def block_range_read_stream_cb(stream: Any, private: BlockRangeReadStreamPrivate) -> int:
    """``block_range_read_stream_cb``: loops over the blocks ``[current_blocknum, last_exclusive)``.

    The end is the ``last_exclusive`` fixed when the private state was made (a relation that
    grows meanwhile is not read further).
    """
    b = private.current_blocknum
    if b < private.last_exclusive:
        private.current_blocknum = b + 1
        return b
    return InvalidBlockNumber


@dataclass
class ReadStreamStats:
    """The model's own per-stream statistics (not PostgreSQL's ``IOStats``, see ``pg19.py``):
    reads it started, hits, waits, distance, pins."""

    ios_started: int = 0
    blocks_read: int = 0
    hits: int = 0
    waits: int = 0
    wait_us: int = 0
    buffers_returned: int = 0
    max_pinned: int = 0
    distance_max: int = 0
    capacity: int = 0
    fast_path_returns: int = 0
    distance_history: list[tuple[int, int]] | None = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "distance_history"}
        d["distance_changes"] = None if self.distance_history is None else len(self.distance_history)
        return d


class ReadStreamBase(ABC):
    """What every version's ``ReadStream`` shares; a version's class writes out the rest.

    ``backend`` is the harness's buffer manager (a :class:`~reference_impl.buffers.bufmgr.Backend`).
    ``callback(stream, private)`` produces block numbers (see :data:`Callback`). Construction is
    ``read_stream_begin_relation``: the model's checks of its arguments, then the version's
    ``read_stream_begin_impl`` (``_begin_impl``).
    """

    version = ""

    # Fields every version's read_stream_begin_impl sets (for the type checker).
    max_ios: int
    io_combine_limit: int
    ios_in_progress: int
    queue_size: int
    max_pinned_buffers: int
    forwarded_buffers: int
    pinned_buffers: int
    read_buffers_flags: int
    sync_mode: bool
    batch_mode: bool
    advice_enabled: bool
    temporary: bool
    buffered_blocknum: int
    seq_blocknum: int
    seq_until_processed: int
    pending_read_blocknum: int
    pending_read_nblocks: int
    ios: list[ReadBuffersOperation]
    io_buffer_index: list[int]
    oldest_io_index: int
    next_io_index: int
    fast_path: bool
    oldest_buffer_index: int
    next_buffer_index: int
    buffers: list[int]
    distance: int

    def __init__(
        self,
        backend: Backend,
        rel: Relation,
        callback: Callback,
        private: Any = None,
        *,
        fork: ForkNumber = ForkNumber.MAIN,
        flags: int = READ_STREAM_DEFAULT,
        strategy: BufferAccessStrategy | None = None,
        per_buffer_data: bool = False,
        debug: bool | None = None,
    ) -> None:
        if not isinstance(flags, int) or flags & ~_ALL_FLAGS:
            raise ModelUsageError(f"read stream flags {flags!r} are invalid: allowed a combination of 0x0f")
        if strategy is not None and strategy.freed:
            raise ModelUsageError(f"cannot begin a stream with freed strategy {strategy!r}")
        self.backend = backend
        self.rel = rel
        self.fork = fork
        self.callback = callback
        self.private = private  # callback_private_data
        self.flags = flags
        self.strategy = strategy
        self.per_buffer_data = per_buffer_data
        self.debug = backend.instance.debug if debug is None else debug
        # The model's own state: ended (a use after read_stream_end is the caller's mistake), the
        # callback's end and a pause (for the debug check that the callback is not called again
        # after its end), the per-buffer data last handed out, the stream's bookkeeping CPU per
        # buffer returned (accumulated, spent at the backend's next cpu() call).
        self.ended = False
        self.callback_ended = False
        self._paused = False
        self.last_data: Any = None
        self._buffer_us = backend.costs.stream_buffer_us
        # GetAdditionalPinLimit(), asked before each read the stream starts (a known-bug variant
        # of the harness puts another function here).
        self._additional_pin_limit: Callable[[], int] = backend.get_additional_pin_limit
        # Debug mode: blocks the callback produced that no started read has covered yet.
        self._produced: deque[int] = deque()
        self._pbd: list[Any] | None = None

        self._begin_impl()

        record = backend.stats.read_log is not None
        self.stats = ReadStreamStats(
            capacity=self.max_pinned_buffers, distance_history=[] if record else None
        )
        self._note_distance()
        if not self.debug:
            # Without debug checks, next_buffer is _next_buffer itself (one call less per buffer;
            # end() puts the checking method back).
            self.next_buffer = self._next_buffer  # type: ignore[method-assign]

    # ------------------------------------------------------------------ the version's functions
    @abstractmethod
    def _begin_impl(self) -> None:  # every version has its own
        """``read_stream_begin_impl``."""

    @abstractmethod
    def _start_pending_read(self) -> bool:  # every version has its own
        """``read_stream_start_pending_read``."""

    @abstractmethod
    def _next_buffer(self) -> int:  # every version has its own
        """``read_stream_next_buffer``."""

    @abstractmethod
    def reset(self) -> None:  # every version has its own
        """``read_stream_reset``."""

    @abstractmethod
    def _clamp_distances(self) -> None:  # every version has its own
        """The proposed ``read_stream_set_strategy``'s clamp of the version's distances."""

    # ------------------------------------------------------------------ helpers of the model
    def _note_distance(self) -> None:
        """Record the (read-ahead) distance in the model's statistics when it changed."""
        st = self.stats
        d = self.distance
        if d > st.distance_max:
            st.distance_max = d
        hist = st.distance_history
        if hist is not None and (not hist or hist[-1][1] != d):
            hist.append((self.backend.clock.now, d))

    def _check_started(self, first: int, n: int) -> None:
        """Debug: a started read covers exactly the next blocks the callback produced, in order."""
        produced = self._produced
        for b in range(first, first + n):
            if not produced or produced[0] != b:
                expected = produced[0] if produced else "nothing"
                raise InvariantViolation(
                    f"read of block {b} started, but the next block the callback produced is {expected}"
                )
            produced.popleft()

    def _check_invariants(self) -> None:
        """Debug: the C's assertions on the stream's counters after each ``next_buffer``."""
        mp = self.max_pinned_buffers
        if mp < 1:
            raise InvariantViolation(f"max_pinned_buffers is {mp} (must be >= 1)")
        if not 0 <= self.distance <= mp:
            raise InvariantViolation(f"distance {self.distance} outside 0..{mp}")
        if self.pinned_buffers > mp:
            raise InvariantViolation(f"{self.pinned_buffers} buffers pinned, above max_pinned_buffers {mp}")
        if self.ios_in_progress > self.max_ios:
            raise InvariantViolation(f"{self.ios_in_progress} I/Os in progress, above max_ios {self.max_ios}")

    def _release_forwarded_buffers(self) -> None:
        """``read_stream_reset``'s "Unpin any unused forwarded buffers", the same in every
        version. Every queue slot is initialised (``INVALID_BUFFER``) when the stream is made,
        so the C's test ``index < initialized_buffers`` holds of every slot holding a buffer."""
        backend = self.backend
        buffers = self.buffers
        index = self.next_buffer_index
        while (buffer := buffers[index]) != INVALID_BUFFER:
            if self.forwarded_buffers <= 0:  # Assert(stream->forwarded_buffers > 0)
                raise InvariantViolation(f"queue slot {index} holds buffer {buffer}, but none is forwarded")
            self.forwarded_buffers -= 1
            backend.release_buffer(buffer)
            buffers[index] = INVALID_BUFFER
            if index < self.io_combine_limit - 1:
                buffers[self.queue_size + index] = INVALID_BUFFER
            index += 1
            if index == self.queue_size:
                index = 0
        # Assert(forwarded_buffers == 0), Assert(pinned_buffers == 0), Assert(ios_in_progress == 0)
        if self.forwarded_buffers or self.pinned_buffers or self.ios_in_progress:
            raise InvariantViolation(
                f"reset left forwarded={self.forwarded_buffers} pinned={self.pinned_buffers} "
                f"ios={self.ios_in_progress}"
            )

    # ------------------------------------------------------------------ shared C functions
    def _get_block(self, slot: int) -> int:
        """``read_stream_get_block``: the buffered ("ungot") block first, else the callback's
        next block. ``slot`` is the queue slot whose per-buffer data the callback fills (-1:
        none, as the C passes ``NULL``)."""
        blocknum = self.buffered_blocknum
        if blocknum != InvalidBlockNumber:
            self.buffered_blocknum = InvalidBlockNumber
            return blocknum
        if self.callback_ended and self.debug:
            raise InvariantViolation("the callback was called again after it returned InvalidBlockNumber")
        result = self.callback(self, self.private)
        if self._pbd is not None and result != InvalidBlockNumber:
            blocknum, data = result
            if slot >= 0:
                self._pbd[slot] = data
        else:
            blocknum = result
        if blocknum.__class__ is not int or not 0 <= blocknum < InvalidBlockNumber:
            if blocknum != InvalidBlockNumber:
                raise ModelUsageError(
                    f"stream callback returned {blocknum!r}: allowed a block number or InvalidBlockNumber"
                )
            if not self._paused:  # a pause (read_stream_pause, 19+) is not the callback's end
                self.callback_ended = True
        elif self.debug:
            self._produced.append(blocknum)
        return blocknum

    def _unget_block(self, blocknum: int) -> None:
        """``read_stream_unget_block``: defer a block already taken from the callback."""
        # We shouldn't ever unget more than one block.
        if self.buffered_blocknum != InvalidBlockNumber:
            raise InvariantViolation("ungot a second block")
        self.buffered_blocknum = blocknum

    def next_block(self) -> tuple[int, BufferAccessStrategy | None]:
        """``read_stream_next_block``: take the next block number without reading it; also the
        strategy that would be used to read it."""
        return self._get_block(-1), self.ios[0].strategy

    def end(self) -> None:
        """``read_stream_end``: ``read_stream_reset``, then the stream is gone."""
        if self.ended:
            raise ModelUsageError("end() called twice on a stream")
        self.reset()
        self.ended = True
        self.__dict__.pop("next_buffer", None)

    # ------------------------------------------------------------------ consumer API
    def next_buffer(self) -> int:
        """``read_stream_next_buffer``: the next pinned buffer, or ``INVALID_BUFFER`` at the end.

        The caller owns the returned pin and must release it (``backend.release_buffer``).
        With per-buffer data, the data of this buffer is in :attr:`last_data`.
        """
        if self.ended:
            raise ModelUsageError("next_buffer() on a stream that was ended")
        buf = self._next_buffer()
        if self.debug:
            self._check_invariants()
        return buf

    def next_buffer_with_data(self) -> tuple[int, Any]:
        """``read_stream_next_buffer`` with ``per_buffer_data``: (buffer, data)."""
        buf = self.next_buffer()
        return buf, self.last_data

    def __iter__(self):  # type: ignore[no-untyped-def]
        while True:
            buf = self.next_buffer()
            if buf == INVALID_BUFFER:
                return
            yield buf

    def _check_not_ended(self, what: str) -> None:
        if self.ended:
            raise ModelUsageError(f"{what}() on a stream that was ended")

    # ------------------------------------------------------------------ proposals (seed threads)
    def set_strategy(self, strategy: BufferAccessStrategy | None) -> None:
        """``read_stream_set_strategy``: the sample-scan seed thread's proposal (reviewed v3
        semantics), in no released version; offered on every version (the ``set-strategy``
        capability).

        Only between scans (nothing pinned, no I/O, no pending read). The pin cap follows the new
        strategy within the queue's capacity and is never below 1; the current distances (and,
        19+, those saved for resuming a pause) are clamped to it; the capacity statistic is left
        unchanged.
        """
        self._check_not_ended("set_strategy")
        if self.pinned_buffers or self.ios_in_progress or self.pending_read_nblocks:
            raise ModelUsageError(
                "set_strategy() needs an idle stream (reset it first): "
                f"pinned={self.pinned_buffers} ios={self.ios_in_progress} pending={self.pending_read_nblocks}"
            )
        if strategy is not None and strategy.freed:
            raise ModelUsageError(f"set_strategy() with freed strategy {strategy!r}")
        limit = get_access_strategy_pin_limit(strategy, self.backend.settings.nbuffers)
        self.max_pinned_buffers = max(1, min(self.queue_size - 1, limit))
        self._clamp_distances()
        self.strategy = strategy
        for op in self.ios:
            op.set_strategy(strategy)

    def __repr__(self) -> str:
        return (
            f"ReadStream({self.rel.name}, v{self.version}, distance={self.distance}, pinned={self.pinned_buffers}, "
            f"max_pinned={self.max_pinned_buffers}, ios={self.ios_in_progress}/{self.max_ios})"
        )
