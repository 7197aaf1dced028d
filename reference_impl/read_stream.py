"""ReadStream: PostgreSQL 18's look-ahead reader (``src/backend/storage/aio/read_stream.c``).

A stream turns the block numbers a *callback* produces into pinned buffers handed to a
*consumer*, in exactly the callback's order. Between the two it merges consecutive block numbers
into reads of up to ``io_combine_limit`` blocks, starts those reads ahead of the consumer, and
adapts how far ahead it runs:

* ``distance`` is the look-ahead budget in blocks. It starts at 1 (or, with
  ``READ_STREAM_FULL``, at one full combined read), doubles every time the consumer has to wait
  for an I/O, and shrinks by one every time a read turned out to need no I/O (a hit at its head).
  So a cached scan keeps one block of look-ahead and a cold one quickly runs far ahead.
* The stream never holds more than ``max_pinned_buffers`` pins, computed once at creation from
  ``(max_ios + 1) × io_combine_limit``, the strategy's pin cap and the backend's fair share of the
  pool; and before each read it asks the buffer manager how many more pins the backend may take
  (``GetAdditionalPinLimit``), cutting the read and the distance when the budget is short.
* Reads are formed lazily. A run of consecutive blocks (the *pending read*) is started only when
  it reaches ``io_combine_limit``, when a non-consecutive block arrives, when the callback ends,
  or when nothing is pinned and it has reached the distance; otherwise it waits for the consumer
  to free room so that it can grow into one larger read.

The queue is a circular array of ``max_pinned_buffers + 1`` buffer slots (one spare keeps the
per-buffer data of the buffer last returned intact), plus ``io_combine_limit - 1`` overflow slots
so that one read never wraps. In-progress reads sit in a second circular queue of ``max_ios``
entries; the consumer waits for a read only when it reaches that read's first buffer::

      buffers (callback order)          ios (started, not yet waited for)
      +----+                            +--------+
      | 10 | <- oldest (next returned)  | 42..44 | <- oldest io
      | 42 | <-+                        | 60..60 |
      | 43 |   |  one I/O               +--------+
      | 44 |   |
      | 60 | <-+ (another I/O)
      |    | <- next (where the next started read lands)

``ReadStream`` below is the PostgreSQL 18 algorithm, step for step, including the all-cached fast
path, forwarded buffers after a split read, the one-block "unget" when a read could not be
started, read-ahead advice under ``io_method=sync``, and PostgreSQL 18's ``reset``, which still
reads a pending read while draining. It adds the seed thread's ``set_strategy`` (reviewed v3
semantics). ``read_stream_master.py`` holds the v19 development variant.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .buffers.bufmgr import (
    READ_BUFFERS_ISSUE_ADVICE,
    READ_BUFFERS_SYNCHRONOUSLY,
    Backend,
    ReadBuffersOperation,
)
from .buffers.pool import INVALID_BUFFER
from .buffers.strategy import BufferAccessStrategy, get_access_strategy_pin_limit
from .errors import InvariantViolation, ModelUsageError
from .storage.relation import RELSEG_SIZE, ForkNumber, InvalidBlockNumber, Relation

__all__ = [
    "ReadStream",
    "ReadStreamStats",
    "READ_STREAM_DEFAULT",
    "READ_STREAM_MAINTENANCE",
    "READ_STREAM_SEQUENTIAL",
    "READ_STREAM_FULL",
    "READ_STREAM_USE_BATCHING",
    "BlockRangeReadStreamPrivate",
    "block_range_read_stream_cb",
    "Callback",
]

READ_STREAM_DEFAULT = 0x00
READ_STREAM_MAINTENANCE = 0x01
READ_STREAM_SEQUENTIAL = 0x02
READ_STREAM_FULL = 0x04
READ_STREAM_USE_BATCHING = 0x08
_ALL_FLAGS = 0x0F
_INT16_MAX = 32767

Callback = Callable[[Any, Any], Any]
"""``callback(stream, private)`` → a block number or ``InvalidBlockNumber``; when the stream has
per-buffer data, a tuple ``(block, data)`` or ``InvalidBlockNumber``."""


class BlockRangeReadStreamPrivate:
    """``BlockRangeReadStreamPrivate``: blocks ``current_blocknum .. last_exclusive - 1``.

    A stream that reads the range with ``block_range_read_stream_cb`` may take a run of simple
    steps without moving ``current_blocknum`` at each one (``ReadStream._open_window``); it is then
    this object's *stepper*, and reading or setting either field first brings the range up to
    date (and a change ends the run, so the stream's next step sees the new value, as the
    callback in C reads both fields at every call).
    """

    __slots__ = ("_current", "_last", "_stepper")

    def __init__(self, current_blocknum: int, last_exclusive: int) -> None:
        self._current = current_blocknum
        self._last = last_exclusive
        self._stepper: ReadStream | None = None

    @property
    def current_blocknum(self) -> int:
        if self._stepper is not None:
            self._stepper._settle_steps()
        return self._current

    @current_blocknum.setter
    def current_blocknum(self, value: int) -> None:
        if self._stepper is not None:
            self._stepper._drop_steps()
        self._current = value

    @property
    def last_exclusive(self) -> int:
        if self._stepper is not None:
            self._stepper._settle_steps()
        return self._last

    @last_exclusive.setter
    def last_exclusive(self, value: int) -> None:
        if self._stepper is not None:
            self._stepper._drop_steps()
        self._last = value

    def __repr__(self) -> str:
        return f"BlockRange({self.current_blocknum}..{self.last_exclusive})"


def block_range_read_stream_cb(stream: Any, private: BlockRangeReadStreamPrivate) -> int:
    """``block_range_read_stream_cb``: the range, then ``InvalidBlockNumber`` for ever.

    The end is the ``last_exclusive`` fixed when the private state was made (a relation that
    grows meanwhile is not read further).
    """
    if private.__class__ is BlockRangeReadStreamPrivate and private._stepper is None:
        b = private._current  # the fields themselves: no stream holds steps over them
        if b < private._last:
            private._current = b + 1
            return b
        return InvalidBlockNumber
    b = private.current_blocknum
    if b < private.last_exclusive:
        private.current_blocknum = b + 1
        return b
    return InvalidBlockNumber


@dataclass
class ReadStreamStats:
    """Per-stream statistics (reads it started, hits, waits, distance, pins)."""

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


class ReadStream:
    """PostgreSQL 18's ``ReadStream`` (``read_stream.c``) over one fork of one relation.

    ``backend`` is the harness's buffer manager (a :class:`~reference_impl.buffers.bufmgr.Backend`).
    ``callback(stream, private)`` produces block numbers (see :data:`Callback`).
    """

    version = "18"

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
        if rel.persistence == "t":
            raise ModelUsageError(f"relation {rel.name!r} is temporary: local buffers are not modelled")
        if strategy is not None and strategy.freed:
            raise ModelUsageError(f"cannot begin a stream with freed strategy {strategy!r}")
        settings = backend.settings
        self.backend = backend
        self.rel = rel
        self.fork = fork
        self.callback = callback
        self.private = private
        self.flags = flags
        self.strategy = strategy
        self.per_buffer_data = per_buffer_data
        self.debug = backend.instance.debug if debug is None else debug

        # --- read_stream_begin_impl -------------------------------------------------------
        if rel.is_catalog:
            max_ios = settings.effective_io_concurrency
        elif flags & READ_STREAM_MAINTENANCE:
            max_ios = (
                rel.tablespace_mic if rel.tablespace_mic is not None else settings.maintenance_io_concurrency
            )
        else:
            max_ios = (
                rel.tablespace_eic if rel.tablespace_eic is not None else settings.effective_io_concurrency
            )
        max_ios = min(max_ios, _INT16_MAX)
        icl = settings.effective_io_combine_limit
        queue_overflow = icl - 1
        max_pinned = (max_ios + 1) * icl
        max_pinned = min(max_pinned, _INT16_MAX - queue_overflow - 1)
        max_pinned = min(get_access_strategy_pin_limit(strategy, settings.nbuffers), max_pinned)
        max_pinned = min(max_pinned, backend.get_pin_limit())
        max_pinned = max(1, max_pinned)
        self.queue_size = max_pinned + 1
        self.max_pinned_buffers = max_pinned
        self.io_combine_limit = icl
        self.sync_mode = backend.io_method.name == "sync"
        self.batch_mode = bool(flags & READ_STREAM_USE_BATCHING)
        self.advice_enabled = (
            self.sync_mode
            and not backend.storage.direct_io
            and not flags & READ_STREAM_SEQUENTIAL
            and max_ios > 0
        )
        self.read_buffers_flags = 0
        if max_ios == 0:
            max_ios = 1
            self.read_buffers_flags = READ_BUFFERS_SYNCHRONOUSLY
        self.max_ios = max_ios
        self.buffers: list[int] = [INVALID_BUFFER] * (self.queue_size + queue_overflow)
        self._pbd: list[Any] | None = [None] * self.queue_size if per_buffer_data else None
        self.ios: list[ReadBuffersOperation] = [
            ReadBuffersOperation(rel, fork, strategy) for _ in range(max_ios)
        ]
        self.io_buffer_index: list[int] = [0] * max_ios
        self.oldest_io_index = 0
        self.next_io_index = 0
        self.ios_in_progress = 0
        self.pinned_buffers = 0
        self.forwarded_buffers = 0
        self.buffered_blocknum = InvalidBlockNumber
        self.seq_blocknum = InvalidBlockNumber
        self.seq_until_processed = InvalidBlockNumber
        self.pending_read_blocknum = InvalidBlockNumber
        self.pending_read_nblocks = 0
        self.oldest_buffer_index = 0
        self.next_buffer_index = 0
        self.fast_path = False
        self.distance = min(max_pinned, icl) if flags & READ_STREAM_FULL else 1
        # PostgreSQL 18 has one distance; master adds a combine distance. Keeping the attribute
        # at 1 here lets both versions share the fast-path test.
        self.combine_distance = 1
        self._fast_path_flags = 0
        self._buffer_us = backend.costs.stream_buffer_us
        # GetAdditionalPinLimit(), asked before each read the stream starts (a known-bug variant
        # of the harness puts another function here).
        self._additional_pin_limit: Callable[[], int] = backend.get_additional_pin_limit
        self.ended = False
        self.callback_ended = False
        self.last_data: Any = None
        # Debug mode: blocks the callback produced that no started read has covered yet.
        self._produced: deque[int] = deque()
        record = backend.stats.read_log is not None
        self._stats = ReadStreamStats(capacity=max_pinned, distance_history=[] if record else None)
        self._note_distance()
        # Whether the callback's result is the block number itself (no per-buffer data, no debug
        # bookkeeping): then _look_ahead calls the callback directly when no block is ungot. If
        # the look-ahead loop and read_stream_get_block are also this class's own (PostgreSQL
        # 18's, not master's or a variant's), _next_buffer takes the loop's usual single step
        # itself (see there).
        self._plain_blocks = not per_buffer_data and not self.debug
        cls = type(self)
        self._inline_step = (
            self._plain_blocks
            and cls._look_ahead is ReadStream._look_ahead
            and cls._get_block is ReadStream._get_block
        )
        # block_range_read_stream_cb over its own private state: the look-ahead step advances
        # the range itself (the callback's body, without a call per block).
        self._range: BlockRangeReadStreamPrivate | None = (
            private
            if callback is block_range_read_stream_cb and type(private) is BlockRangeReadStreamPrivate
            else None
        )
        # The simple steps ahead (see _open_window): over the inlined block range, the buffers
        # they hand out, last first (a copy of their queue slots, which nothing else changes
        # during the run: a step pops one); over any other callback, a count of its own. And the
        # queue's overflow slots, which mirror its first io_combine_limit - 1 slots.
        self._run_buffers: list[int] = []
        self._callback_steps = 0
        # Over the inlined block range: the next step fills the pending read and starts it (see
        # _fill_step; never while a run is counted).
        self._fill_next = False
        # The next step's look-ahead is only the loop's final test, which starts the full
        # pending read (see _start_step; after a fill step whose start was refused).
        self._start_next = False
        # Where the counted run ends in the queue (0: no run). Over the inlined block range
        # (_range), a run's fields advance only when it is settled.
        self._steps_end = 0
        self._overflow_slots = icl - 1
        if not self.debug:
            # Without debug checks, next_buffer is _next_buffer itself (one call less per buffer;
            # end() puts the checking method back).
            self.next_buffer = self._next_buffer  # type: ignore[method-assign]

    # ------------------------------------------------------------------------------ helpers
    def _note_distance(self) -> None:
        st = self._stats
        d = self.distance
        if d > st.distance_max:
            st.distance_max = d
        hist = st.distance_history
        if hist is not None and (not hist or hist[-1][1] != d):
            hist.append((self.backend.clock.now, d))

    def _get_block(self, slot: int) -> int:
        """``read_stream_get_block``: the buffered (ungot) block first, else the callback."""
        blocknum = self.buffered_blocknum
        if blocknum != InvalidBlockNumber:
            self.buffered_blocknum = InvalidBlockNumber
            return blocknum
        if self.callback_ended and self.debug:
            raise InvariantViolation("the callback was called again after it returned InvalidBlockNumber")
        result = self.callback(self, self.private)
        if self._pbd is not None:
            if result == InvalidBlockNumber:
                blocknum = InvalidBlockNumber
            else:
                blocknum, data = result
                if slot >= 0:
                    self._pbd[slot] = data
        else:
            blocknum = result
        if blocknum == InvalidBlockNumber:
            self.callback_ended = True
        elif not isinstance(blocknum, int) or blocknum < 0 or blocknum > 0xFFFFFFFE:
            self._callback_returned_no_block(blocknum)
        elif self.debug:
            self._produced.append(blocknum)
        return blocknum

    def _callback_returned_no_block(self, blocknum: object) -> None:
        """The callback returned no block number: ``InvalidBlockNumber`` ends it, anything else
        (a negative or too large number, not an int) is the caller's mistake."""
        if blocknum != InvalidBlockNumber:
            raise ModelUsageError(
                f"stream callback returned {blocknum!r}: allowed a block number or InvalidBlockNumber"
            )
        self.callback_ended = True

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

    def _unget_block(self, blocknum: int) -> None:
        """``read_stream_unget_block``."""
        if self.buffered_blocknum != InvalidBlockNumber:
            raise InvariantViolation("ungot a second block")
        self.buffered_blocknum = blocknum

    # ------------------------------------------------------------------------------ start a read
    def _start_pending_read(self) -> bool:
        """``read_stream_start_pending_read``: start as much of the pending read as allowed."""
        pending_n = self.pending_read_nblocks
        if self.debug:
            if not 0 < pending_n <= self.io_combine_limit:
                raise InvariantViolation(f"pending read of {pending_n} blocks (icl {self.io_combine_limit})")
            if self.pinned_buffers + pending_n > self.max_pinned_buffers:
                raise InvariantViolation(
                    f"starting a read would pin {self.pinned_buffers + pending_n} buffers, "
                    f"above max_pinned_buffers {self.max_pinned_buffers}"
                )
        flags = self.read_buffers_flags
        if self.advice_enabled:
            if self.pending_read_blocknum == self.seq_blocknum:
                if self.seq_until_processed != InvalidBlockNumber:
                    flags |= READ_BUFFERS_ISSUE_ADVICE
            else:
                self.seq_until_processed = self.pending_read_blocknum
                if self.pinned_buffers > 0:
                    flags |= READ_BUFFERS_ISSUE_ADVICE

        # Min(GetAdditionalPinLimit(), PG_INT16_MAX), plus the forwarded buffers, capped again.
        buffer_limit = self._additional_pin_limit()
        if buffer_limit > _INT16_MAX:
            buffer_limit = _INT16_MAX
        buffer_limit += self.forwarded_buffers
        if buffer_limit > _INT16_MAX:
            buffer_limit = _INT16_MAX
        if buffer_limit == 0 and self.pinned_buffers == 0:
            buffer_limit = 1
        nblocks = pending_n
        if buffer_limit < nblocks:
            new_distance = self.pinned_buffers + buffer_limit
            if self.distance > new_distance:
                self.distance = new_distance
                self._note_distance()
            if self.pinned_buffers > 0:
                return False
            nblocks = buffer_limit

        buffer_index = self.next_buffer_index
        io_index = self.next_io_index
        first = self.pending_read_blocknum
        requested = nblocks
        buffers = self.buffers
        nblocks, need_wait = self.backend.start_read_buffers(
            self.ios[io_index], buffers, buffer_index, first, nblocks, flags
        )
        pinned = self.pinned_buffers + nblocks
        self.pinned_buffers = pinned
        debug = self.debug
        if debug:
            self._check_started(first, nblocks)
        st = self._stats
        if not need_wait:
            st.hits += 1
            self._decay_after_hit()
        else:
            st.ios_started += 1
            st.blocks_read += nblocks
            self.io_buffer_index[io_index] = buffer_index
            io_index += 1
            self.next_io_index = 0 if io_index == self.max_ios else io_index
            self.ios_in_progress += 1
            self.seq_blocknum = first + nblocks
            if debug:
                if self.ios_in_progress > self.max_ios:
                    raise InvariantViolation(
                        f"{self.ios_in_progress} I/Os in progress, above max_ios {self.max_ios}"
                    )
                if (
                    nblocks > self.io_combine_limit
                    or first // RELSEG_SIZE != (first + nblocks - 1) // RELSEG_SIZE
                ):
                    raise InvariantViolation(
                        f"read [{first}..{first + nblocks - 1}] exceeds io_combine_limit or a segment"
                    )

        # Buffers pinned past the accepted blocks (a split read) are forwarded to the next read.
        forwarded = 0
        end = buffer_index + nblocks
        if nblocks < requested:
            while nblocks + forwarded < requested and buffers[end + forwarded] != INVALID_BUFFER:
                forwarded += 1
        self.forwarded_buffers = forwarded

        qs = self.queue_size
        overflow = end + forwarded - qs
        if overflow > 0:
            buffers[0:overflow] = buffers[qs : qs + overflow]

        self.next_buffer_index = end - qs if end >= qs else end
        self.pending_read_blocknum = first + nblocks
        self.pending_read_nblocks = pending_n - nblocks
        held = pinned + forwarded
        if held > st.max_pinned:
            st.max_pinned = held
        return True

    def _decay_after_hit(self) -> None:
        """A started read needed no I/O: PostgreSQL 18 shrinks the distance by one."""
        if self.distance > 1:
            self.distance -= 1
            self._note_distance()

    def _after_wait(self, op: ReadBuffersOperation, needed_wait: bool) -> None:
        """The consumer waited for an I/O: PostgreSQL 18 doubles the distance."""
        d = self.distance * 2
        if d > self.max_pinned_buffers:
            d = self.max_pinned_buffers
        self.distance = d
        self._note_distance()

    def _set_end_of_stream(self) -> None:
        self.distance = 0
        self._note_distance()

    # ------------------------------------------------------------------------------ look ahead
    def _look_ahead(self) -> None:
        """``read_stream_look_ahead``."""
        icl = self.io_combine_limit
        max_ios = self.max_ios
        plain = self._plain_blocks
        while self.ios_in_progress < max_ios:
            pending_n = self.pending_read_nblocks
            room = self.distance - self.pinned_buffers - pending_n
            if room <= 0:
                break
            if pending_n == icl:
                self._start_pending_read()
                continue
            if plain and self.buffered_blocknum == InvalidBlockNumber:
                # read_stream_get_block without an ungot block or per-buffer data: the callback.
                rng = self._range
                if rng is not None and rng._stepper is None:  # block_range_read_stream_cb, inlined
                    if self._take_range_blocks(rng, pending_n, room):
                        continue
                    blocknum = rng._current
                    if blocknum < rng._last:
                        rng._current = blocknum + 1
                    else:
                        blocknum = InvalidBlockNumber
                else:
                    blocknum = self.callback(self, self.private)
                if blocknum.__class__ is not int or not 0 <= blocknum < InvalidBlockNumber:
                    self._callback_returned_no_block(blocknum)
            else:
                buffer_index = self.next_buffer_index + pending_n
                if buffer_index >= self.queue_size:
                    buffer_index -= self.queue_size
                blocknum = self._get_block(buffer_index)
            if blocknum == InvalidBlockNumber:
                self._set_end_of_stream()
                break
            pending_n = self.pending_read_nblocks
            if pending_n > 0 and self.pending_read_blocknum + pending_n == blocknum:
                self.pending_read_nblocks = pending_n + 1
                continue
            while self.pending_read_nblocks > 0:
                if not self._start_pending_read() or self.ios_in_progress == max_ios:
                    self._unget_block(blocknum)
                    return
            self.pending_read_blocknum = blocknum
            self.pending_read_nblocks = 1

        # The loop's final test: start the pending read now if it is full, if nothing else is
        # pinned and it has reached the distance, or at the end of the stream.
        pending_n = self.pending_read_nblocks
        if (
            pending_n > 0
            and (
                pending_n == icl
                or (pending_n >= self.distance and self.pinned_buffers == 0)
                or self.distance == 0
            )
            and self.ios_in_progress < max_ios
        ):
            self._start_pending_read()

        if self.debug and not (self.pinned_buffers > 0 or self.distance == 0):
            raise InvariantViolation("look-ahead left nothing pinned before the end of the stream")

    def _take_range_blocks(self, rng: BlockRangeReadStreamPrivate, pending_n: int, room: int) -> bool:
        """Over the inlined ``block_range_read_stream_cb``: take at once the blocks that the
        look-ahead loop's next iterations would take one by one, each extending the pending read
        (or the first beginning it), until the pins plus the pending read reach the distance
        (``room`` blocks) or the pending read is full. The caller found an I/O slot free, no
        ungot block, room, and the pending read not full; taking a block from the range changes
        none of that and calls nothing, so only the count differs. Takes nothing and returns
        False unless all those blocks are valid and in the range (near the range's end, or for a
        range that does not extend the pending read, the loop takes its usual single step)."""
        first = rng._current
        n = self.io_combine_limit - pending_n
        if room < n:
            n = room
        if first.__class__ is not int:
            return False
        stop = first + n
        if stop > rng._last or stop > InvalidBlockNumber:
            return False
        if pending_n:
            if self.pending_read_blocknum + pending_n != first:
                return False
        elif first < 0:
            return False
        else:
            self.pending_read_blocknum = first  # a new pending read begins
        rng._current = stop
        self.pending_read_nblocks = pending_n + n
        return True

    # ------------------------------------------------------------------------------ consumer API
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

    def _next_buffer(self) -> int:
        run = self._run_buffers
        if run:
            # A simple step over the inlined block range (see _open_window): hand out the next
            # buffer of the counted run; the look-ahead step that follows only extends the
            # pending read by one block. The queue position, the statistics, the range and the
            # pending read advance together when the run is settled (_settle_steps).
            self.backend._cpu_debt += self._buffer_us
            self.pinned_buffers -= 1
            return run.pop()
        if self._steps_end:
            k = self._callback_steps
            if k:
                # A simple step over any other callback, which is called at each step and may
                # read the stream: everything changes at once, in the general path's order.
                self._callback_steps = k - 1
                self.backend._cpu_debt += self._buffer_us
                self.pinned_buffers -= 1
                oldest = self._steps_end - k
                buffers = self.buffers
                buf = buffers[oldest]
                buffers[oldest] = INVALID_BUFFER
                if oldest < self._overflow_slots:
                    buffers[self.queue_size + oldest] = INVALID_BUFFER
                self.oldest_buffer_index = oldest + 1
                self._stats.buffers_returned += 1
                blocknum = self.callback(self, self.private)
                pending_n = self.pending_read_nblocks
                if (
                    blocknum.__class__ is int
                    and 0 <= blocknum < InvalidBlockNumber
                    and (pending_n == 0 or self.pending_read_blocknum + pending_n == blocknum)
                ):
                    if pending_n == 0:
                        self.pending_read_blocknum = blocknum  # a new pending read begins
                    self.pending_read_nblocks = pending_n + 1
                    return buf
                self._leave_run(blocknum, oldest + 1)
                return buf
            self._settle_steps()
        if self._fill_next:
            return self._fill_step()
        if self._start_next:
            return self._start_step()
        backend = self.backend
        buffers = self.buffers
        if self.fast_path:
            # The stream's own bookkeeping CPU per buffer returned; accumulated, spent at the
            # backend's next cpu() call.
            backend._cpu_debt += self._buffer_us
            oldest = self.oldest_buffer_index
            buf = buffers[oldest]
            next_blocknum = self._get_block(-1)
            if next_blocknum != InvalidBlockNumber:
                flags = self.read_buffers_flags | self._fast_path_flags
                if self.advice_enabled:
                    flags |= READ_BUFFERS_ISSUE_ADVICE
                op = self.ios[0]
                slot = [INVALID_BUFFER]
                _, need_wait = backend.start_read_buffers(
                    op, slot, 0, next_blocknum, 1, flags, allow_forwarding=False
                )
                buffers[oldest] = slot[0]
                if self.debug:
                    self._check_started(next_blocknum, 1)
                self._stats.buffers_returned += 1
                self._stats.fast_path_returns += 1
                if not need_wait:
                    self._stats.hits += 1
                    return buf
                # The next call must wait for this one-block read.
                self._stats.ios_started += 1
                self._stats.blocks_read += 1
                self.oldest_io_index = 0
                self.next_io_index = 1 if self.max_ios > 1 else 0
                self.ios_in_progress = 1
                self.io_buffer_index[0] = oldest
                self.seq_blocknum = next_blocknum + 1
            else:
                self._set_end_of_stream()
                self.oldest_buffer_index = self.next_buffer_index
                self.pinned_buffers = 0
                buffers[oldest] = INVALID_BUFFER
                self._stats.buffers_returned += 1
                self._stats.fast_path_returns += 1
            self.fast_path = False
            return buf

        if self.pinned_buffers == 0:
            if self.distance == 0:  # end reached (master: the read-ahead distance)
                return INVALID_BUFFER
            self._look_ahead()
            if self.pinned_buffers == 0:
                return INVALID_BUFFER

        backend._cpu_debt += self._buffer_us
        oldest = self.oldest_buffer_index
        buf = buffers[oldest]
        if self._pbd is not None:
            self.last_data = self._pbd[oldest]
        if buf == INVALID_BUFFER:
            raise InvariantViolation(
                f"queue slot {oldest} holds no buffer although {self.pinned_buffers} are pinned"
            )

        if self.ios_in_progress > 0 and self.io_buffer_index[self.oldest_io_index] == oldest:
            io_index = self.oldest_io_index
            st = self._stats
            t0 = backend.clock.now
            op = self.ios[io_index]
            needed_wait = backend.wait_read_buffers(op)
            st.waits += 1
            st.wait_us += backend.clock.now - t0
            self.ios_in_progress -= 1
            self.oldest_io_index = io_index + 1
            if self.oldest_io_index == self.max_ios:
                self.oldest_io_index = 0
            self._after_wait(op, needed_wait)
            if self.advice_enabled and self.ios[io_index].blocknum == self.seq_until_processed:
                self.seq_until_processed = InvalidBlockNumber

        icl = self.io_combine_limit
        buffers[oldest] = INVALID_BUFFER
        if oldest < icl - 1:
            buffers[self.queue_size + oldest] = INVALID_BUFFER
        self.pinned_buffers -= 1
        oldest += 1
        if oldest == self.queue_size:
            oldest = 0
        self.oldest_buffer_index = oldest
        self._stats.buffers_returned += 1

        # read_stream_look_ahead. Once a buffer is consumed, its usual work is short: either the
        # loop ends at once (the pins plus the pending read are at the distance) and only its
        # final test remains, or it takes the next blocks, each extending the pending read (or
        # the first beginning it), until they are back at the distance. With PostgreSQL 18's
        # loop and plain block numbers, these cases are written out here, reading and writing
        # the same fields in the same order as _look_ahead: over the inlined block range the
        # blocks are taken at once (_take_range_blocks), from any other callback one block, which
        # when it does not extend the pending read is handed to _look_ahead in the ungot-block
        # field (not through _unget_block: nothing was ungot), the place its next iteration
        # takes a block from before it would call the callback. Anything else is left to
        # _look_ahead, and so is the loop when it goes on.
        pending_n = self.pending_read_nblocks
        max_ios = self.max_ios
        if not (
            self._inline_step
            and self.ios_in_progress < max_ios
            and self.buffered_blocknum == InvalidBlockNumber
        ):
            self._look_ahead()
        elif self.pinned_buffers + pending_n >= self.distance:
            # The loop ends at once: its final test (an I/O slot is free).
            if pending_n > 0 and (
                pending_n == icl
                or (pending_n >= self.distance and self.pinned_buffers == 0)
                or self.distance == 0
            ):
                self._start_pending_read()
        elif pending_n == icl:
            self._look_ahead()  # the loop starts the full pending read and goes on
        else:
            rng = self._range
            if rng is not None and rng._stepper is None:  # block_range_read_stream_cb, inlined
                distance = self.distance
                if not self._take_range_blocks(rng, pending_n, distance - self.pinned_buffers - pending_n):
                    self._look_ahead()  # the range's end, or a range that moved: one by one
                else:
                    pending_n = self.pending_read_nblocks
                    if self.pinned_buffers + pending_n < distance:
                        self._look_ahead()  # the pending read is full: the loop goes on
                    elif pending_n == icl or (pending_n >= distance and self.pinned_buffers == 0):
                        self._start_pending_read()  # the final test (distance > 0, an I/O slot free)
                    elif (
                        pending_n == self._overflow_slots
                        and (
                            self.ios_in_progress == 0 or self.io_buffer_index[self.oldest_io_index] != oldest
                        )
                        and rng._current < rng._last
                        and rng._current < InvalidBlockNumber
                    ):
                        # The pending read is one block short of full, and the next step fills
                        # it (see _fill_step). _after_step would do nothing here: entering the
                        # all-cached fast path needs an empty pending read, and a run of simple
                        # steps room for two more blocks in it.
                        self._fill_next = True
                        rng._stepper = self
                        return buf
            else:
                blocknum = self.callback(self, self.private)
                if blocknum.__class__ is not int or not 0 <= blocknum < InvalidBlockNumber:
                    self._callback_returned_no_block(blocknum)
                    self._set_end_of_stream()
                    self._look_ahead()  # the loop ends at once (distance 0): only the final test
                else:
                    pending_n = self.pending_read_nblocks
                    if pending_n == 0 or self.pending_read_blocknum + pending_n == blocknum:
                        if pending_n == 0:
                            self.pending_read_blocknum = blocknum  # a new pending read begins
                        pending_n += 1
                        self.pending_read_nblocks = pending_n
                        if self.ios_in_progress < max_ios and self.pinned_buffers + pending_n < self.distance:
                            self._look_ahead()  # room for more: the loop goes on
                        elif (
                            pending_n == icl
                            or (pending_n >= self.distance and self.pinned_buffers == 0)
                            or self.distance == 0
                        ) and self.ios_in_progress < max_ios:
                            self._start_pending_read()  # the final test, as in _look_ahead
                    else:
                        self.buffered_blocknum = blocknum
                        self._look_ahead()
        self._after_step(oldest)
        return buf

    def _leave_run(self, blocknum: Any, oldest: int) -> None:
        """The callback ended, or its block does not extend the pending read: the step was not
        simple after all, and goes on as in the general path."""
        self._callback_steps = 0
        self._steps_end = 0
        if blocknum.__class__ is not int or not 0 <= blocknum < InvalidBlockNumber:
            self._callback_returned_no_block(blocknum)
            self._set_end_of_stream()
        else:
            self.buffered_blocknum = blocknum
        self._look_ahead()
        self._after_step(oldest)

    def _settle_steps(self) -> None:
        """Bring the fields a run of simple steps advances up to date (queue position, freed
        queue slots, buffers returned, the block range and the pending read): what handing out
        those buffers one by one would have left. Called before anything else reads them."""
        end = self._steps_end
        left = len(self._run_buffers)
        self._steps_end = 0
        rng = self._range
        if rng is None:
            self._callback_steps = 0
            return
        start = self.oldest_buffer_index
        taken = end - left - start
        if taken <= 0:
            if left:
                # Nothing handed out yet: the run goes on as counted.
                self._steps_end = end
            elif not self._fill_next:
                rng._stepper = None
            return
        buffers = self.buffers
        stop = start + taken
        buffers[start:stop] = [INVALID_BUFFER] * taken
        overflow = self._overflow_slots
        if start < overflow:  # the overflow slots mirror the queue's first ones
            if stop < overflow:
                overflow = stop
            qs = self.queue_size
            buffers[qs + start : qs + overflow] = [INVALID_BUFFER] * (overflow - start)
        self.oldest_buffer_index = stop
        self._stats.buffers_returned += taken
        first = rng._current
        rng._current = first + taken
        if self.pending_read_nblocks == 0:
            self.pending_read_blocknum = first  # a new pending read began with the first step
        self.pending_read_nblocks += taken
        if left:
            # The rest of the run goes on from here (an early settle: the range or the
            # statistics were read).
            self._steps_end = end
        else:
            rng._stepper = None

    def _drop_steps(self) -> None:
        """Settle the run and end it: the block range was changed, or the stream is reset, so
        the steps counted no longer hold."""
        self._fill_next = False
        self._start_next = False
        self._settle_steps()
        self._steps_end = 0
        if self._run_buffers:
            self._run_buffers = []
        self._callback_steps = 0
        if self._range is not None:
            self._range._stepper = None

    @property
    def stats(self) -> ReadStreamStats:
        """The stream's statistics (``ReadStreamStats``), up to date."""
        if self._steps_end and self._range is not None:
            self._settle_steps()
        return self._stats

    def _after_step(self, oldest: int) -> None:
        """After a buffer was handed out and the look-ahead ran: enter the all-cached fast path
        if the stream is in its one-block state, else count the simple steps ahead."""
        if (
            self.ios_in_progress == 0
            and self.forwarded_buffers == 0
            and self.pinned_buffers == 1
            and self.distance == 1
            and self.combine_distance == 1
            and self.pending_read_nblocks == 0
            and self._pbd is None
        ):
            if oldest < self._overflow_slots:
                self.buffers[self.queue_size + oldest] = INVALID_BUFFER
            self.fast_path = True
        elif (
            self._inline_step
            and self.pending_read_nblocks < self._overflow_slots
            and self.pinned_buffers + self.pending_read_nblocks == self.distance
        ):
            self._open_window(oldest)

    def _open_window(self, oldest: int) -> None:
        """Count how many of the next buffers handed out are *simple steps* (the caller found
        the pins plus the pending read equal to the distance, and room in the pending read).

        A step is simple when handing out the oldest buffer needs no wait (it is not the first
        buffer of the oldest I/O in progress) and the look-ahead step that follows only extends
        the pending read by the callback's next block: the loop's conditions hold before the
        block is taken (an I/O slot is free, no ungot block, the pending read is below
        ``io_combine_limit`` and the pins plus the pending read are below the distance) and, after
        it, the loop ends (the pins plus the pending read are back at the distance) and its final
        test starts nothing (the pending read is not full, and pins remain). In the usual state
        of a stream, pins plus the pending read equal the distance; a simple step takes one pin
        and adds one pending block, so it leaves every one of these conditions as it found them
        except three counters, which bound the run of steps: the buffers before the oldest I/O's
        first buffer, the blocks the pending read can still take before it is full, and the pins
        that keep one back. The queue's end bounds it too, so a step never wraps. Over
        ``block_range_read_stream_cb`` the range's next blocks are known, so they bound the run
        as well (and a change to the range ends it); any other callback's block is tested at
        each step, which leaves the run when it does not extend the pending read.
        """
        pinned = self.pinned_buffers
        pending_n = self.pending_read_nblocks
        if (
            self.distance < 2
            or self.ios_in_progress >= self.max_ios
            or self.buffered_blocknum != InvalidBlockNumber
        ):
            return
        k = self.io_combine_limit - 1 - pending_n
        if pinned - 1 < k:
            k = pinned - 1
        to_end = self.queue_size - 1 - oldest
        if to_end < k:
            k = to_end
        if self.ios_in_progress:
            to_io = self.io_buffer_index[self.oldest_io_index] - oldest
            if to_io < 0:
                to_io += self.queue_size
            if to_io < k:
                k = to_io
        rng = self._range
        if rng is not None:
            # The block range's next blocks must extend the pending read, and be there (and no
            # other stream holds steps over the same range).
            if rng._stepper is not None:
                return
            first = rng._current
            if pending_n and self.pending_read_blocknum + pending_n != first:
                return
            left = rng._last - first
            if left < k:
                k = left
        if k > 0:
            self._steps_end = oldest + k
            if rng is not None:
                run = self.buffers[oldest : oldest + k]
                run.reverse()
                self._run_buffers = run
                rng._stepper = self
            else:
                self._callback_steps = k

    def _hand_out_oldest(self) -> tuple[int, int]:
        """The general path's hand-out of the oldest buffer when it heads no I/O (an armed
        step's first half): its CPU, the queue slot (and its overflow mirror) cleared, one pin
        fewer, the queue's next position; returns (buffer, that position)."""
        self.backend._cpu_debt += self._buffer_us
        oldest = self.oldest_buffer_index
        buffers = self.buffers
        buf = buffers[oldest]
        buffers[oldest] = INVALID_BUFFER
        if oldest < self._overflow_slots:
            buffers[self.queue_size + oldest] = INVALID_BUFFER
        self.pinned_buffers -= 1
        oldest += 1
        if oldest == self.queue_size:
            oldest = 0
        self.oldest_buffer_index = oldest
        self._stats.buffers_returned += 1
        return buf, oldest

    def _fill_step(self) -> int:
        """A step that fills the pending read, armed by the general step before it over the
        inlined block range (see _next_buffer), which left the pins plus the pending read at the
        distance and the pending read one block short of ``io_combine_limit``, and found that the
        oldest buffer heads no I/O in progress and that the range has its next block. Only the
        consumer runs in between, and a change to the range disarms it (the range's stepper is
        this stream meanwhile). As in the general path: hand out the oldest buffer; the look-ahead
        loop (an I/O slot is free, no ungot block) takes the range's next block, which extends
        the pending read and fills it, and ends, the pins plus the pending read being back at the
        distance; its final test starts the full read; then _after_step."""
        self._fill_next = False
        rng = self._range
        assert rng is not None
        rng._stepper = None
        buf, oldest = self._hand_out_oldest()
        rng._current += 1
        self.pending_read_nblocks += 1
        if not self._start_pending_read() and (
            self.ios_in_progress == 0 or self.io_buffer_index[self.oldest_io_index] != oldest
        ):
            # The start was refused (the pin budget is short; pins remain): the pins less one
            # plus the full pending read are at least the distance, which the refusal cut to at
            # most the pins plus io_combine_limit - 1. So the next step's look-ahead, if handing
            # out its buffer needs no wait, is only the loop's final test (see _start_step).
            # _after_step would do nothing here: the pending read is full.
            self._start_next = True
            return buf
        self._after_step(oldest)
        return buf

    def _start_step(self) -> int:
        """A step after a refused start (armed by _fill_step, which found that handing out the
        oldest buffer needs no wait): hand out the oldest buffer; the look-ahead loop ends at
        once (an I/O slot is free; the pins plus the full pending read are at least the
        distance), and its final test starts the full pending read; then _after_step. Nothing
        the consumer does in between changes this, other than a reset or next_block (which
        disarm it); the budget of pins is asked again by the start."""
        self._start_next = False
        buf, oldest = self._hand_out_oldest()
        self._start_pending_read()
        self._after_step(oldest)
        return buf

    def next_block(self) -> tuple[int, BufferAccessStrategy | None]:
        """``read_stream_next_block``: take the next block number without reading it."""
        self._drop_steps()  # the callback moves on: the counted steps no longer hold
        return self._get_block(-1), self.ios[0].strategy

    def reset(self) -> None:
        """``read_stream_reset``: release everything not consumed; the stream can be reused.

        PostgreSQL 18 drains by calling ``next_buffer`` with distance 0, which still *starts and
        reads* a pending read (confirmed on an 18.6 server); the ungot block is dropped unread.
        """
        if self.ended:
            raise ModelUsageError("reset() on a stream that was ended")
        self._drop_steps()  # the drain hands out buffers with the distance at 0
        self._begin_reset()
        self._drain()
        self._finish_reset()
        # What the callback produced and no read covered is dropped: only the ungot block.
        self._produced.clear()
        if self.pinned_buffers or self.forwarded_buffers:
            raise InvariantViolation(f"reset() left {self.pinned_buffers + self.forwarded_buffers} pins held")

    def _begin_reset(self) -> None:
        """Stop looking ahead; PostgreSQL 18 keeps the pending read (the drain reads it)."""
        self.distance = 0
        self._note_distance()
        self.buffered_blocknum = InvalidBlockNumber
        self.fast_path = False

    def _finish_reset(self) -> None:
        self.distance = 1
        self.callback_ended = False
        self._note_distance()

    def _drain(self) -> None:
        """Release every buffer not consumed, waiting for their I/Os; release forwarded ones."""
        backend = self.backend
        while True:
            buf = self._next_buffer()
            if buf == INVALID_BUFFER:
                break
            backend.release_buffer(buf)
        index = self.next_buffer_index
        buffers = self.buffers
        while self.forwarded_buffers > 0 and buffers[index] != INVALID_BUFFER:
            self.forwarded_buffers -= 1
            backend.release_buffer(buffers[index])
            buffers[index] = INVALID_BUFFER
            if index < self.io_combine_limit - 1:
                buffers[self.queue_size + index] = INVALID_BUFFER
            index += 1
            if index == self.queue_size:
                index = 0
        if self.forwarded_buffers or self.pinned_buffers or self.ios_in_progress:
            raise InvariantViolation(
                f"reset left forwarded={self.forwarded_buffers} pinned={self.pinned_buffers} "
                f"ios={self.ios_in_progress}"
            )

    def end(self) -> None:
        """``read_stream_end``: reset, then the stream is gone."""
        if self.ended:
            raise ModelUsageError("end() called twice on a stream")
        self.reset()
        self.ended = True
        self.__dict__.pop("next_buffer", None)

    def set_strategy(self, strategy: BufferAccessStrategy | None) -> None:
        """``read_stream_set_strategy`` (seed thread, reviewed v3 semantics).

        Only between scans (nothing pinned, no I/O, no pending read). The pin cap follows the new
        strategy within the queue's capacity and is never below 1; the current distance is
        clamped to it; the capacity statistic is left unchanged.
        """
        if self.ended:
            raise ModelUsageError("set_strategy() on a stream that was ended")
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

    def _clamp_distances(self) -> None:
        if self.distance > self.max_pinned_buffers:
            self.distance = self.max_pinned_buffers
            self._note_distance()

    # ------------------------------------------------------------------------------ debug checks
    def _check_invariants(self) -> None:
        mp = self.max_pinned_buffers
        if mp < 1:
            raise InvariantViolation(f"max_pinned_buffers is {mp} (must be >= 1)")
        if not 0 <= self.distance <= mp:
            raise InvariantViolation(f"distance {self.distance} outside 0..{mp}")
        if self.pinned_buffers > mp:
            raise InvariantViolation(f"{self.pinned_buffers} buffers pinned, above max_pinned_buffers {mp}")
        if self.ios_in_progress > self.max_ios:
            raise InvariantViolation(f"{self.ios_in_progress} I/Os in progress, above max_ios {self.max_ios}")

    def __repr__(self) -> str:
        return (
            f"ReadStream({self.rel.name}, v{self.version}, distance={self.distance}, pinned={self.pinned_buffers}, "
            f"max_pinned={self.max_pinned_buffers}, ios={self.ios_in_progress}/{self.max_ios})"
        )
