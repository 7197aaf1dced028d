"""``read_stream.c`` of PostgreSQL 18 (checked against 18.6), function by function.

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

The functions below are in the C file's order: ``read_stream_start_pending_read``,
``read_stream_look_ahead``, ``read_stream_begin_impl``, ``read_stream_next_buffer`` (with the
all-cached fast path), ``read_stream_clear_strategy``, ``read_stream_reset``. Those every
version shares unchanged (``block_range_read_stream_cb``, ``read_stream_get_block``,
``read_stream_unget_block``, ``read_stream_next_block``, ``read_stream_end``) are in
``_common.py``. Where the model does more than the C (its statistics, the CPU it charges per
buffer, debug checks of the C's assertions), the line says so.

Not modelled: ``pgaio_enter_batchmode`` /
``pgaio_exit_batchmode`` (``READ_STREAM_USE_BATCHING``), which change no read, pin or time of the
model.
"""

from __future__ import annotations

from ..buffers.bufmgr import READ_BUFFERS_ISSUE_ADVICE, READ_BUFFERS_SYNCHRONOUSLY, ReadBuffersOperation
from ..buffers.pool import INVALID_BUFFER
from ..buffers.strategy import get_access_strategy_pin_limit
from ..errors import InvariantViolation, ModelUsageError, OtherSessionTempRelation
from ..storage.relation import RELSEG_SIZE, InvalidBlockNumber
from ._common import (
    PG_INT16_MAX,
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_SEQUENTIAL,
    READ_STREAM_USE_BATCHING,
    ReadStreamBase,
)

__all__ = ["ReadStream"]


class ReadStream(ReadStreamBase):
    """PostgreSQL 18's ``ReadStream`` (``read_stream.c``) over one fork of one relation."""

    version = "18"

    # ------------------------------------------------------------------ read_stream_start_pending_read
    def _start_pending_read(self) -> bool:
        """``read_stream_start_pending_read``: start as much of the pending read as allowed.

        Returns False when no read could be started for lack of buffers (only while something
        is pinned: with nothing pinned a read of at least one block is always started).
        """
        pending_n = self.pending_read_nblocks
        if self.debug:
            # This should only be called with a pending read; we had better not exceed the
            # per-stream buffer limit with this read.
            if not 0 < pending_n <= self.io_combine_limit:
                raise InvariantViolation(f"pending read of {pending_n} blocks (icl {self.io_combine_limit})")
            if self.pinned_buffers + pending_n > self.max_pinned_buffers:
                raise InvariantViolation(
                    f"starting a read would pin {self.pinned_buffers + pending_n} buffers, "
                    f"above max_pinned_buffers {self.max_pinned_buffers}"
                )

        # Do we need to issue read-ahead advice?
        flags = self.read_buffers_flags
        if self.advice_enabled:
            if self.pending_read_blocknum == self.seq_blocknum:
                # Sequential: issue advice until the preadv() calls have caught up with the
                # first advice issued for this sequential region.
                if self.seq_until_processed != InvalidBlockNumber:
                    flags |= READ_BUFFERS_ISSUE_ADVICE
            else:
                # Random jump: note the starting location of a new potential sequential region
                # and start issuing advice, unless the preadv() follows immediately.
                self.seq_until_processed = self.pending_read_blocknum
                if self.pinned_buffers > 0:
                    flags |= READ_BUFFERS_ISSUE_ADVICE

        # How many more buffers is this backend allowed? Forwarded buffers are already pinned
        # and counted by the buffer manager, so they are added to the limit it grants.
        if self.temporary:
            buffer_limit = self.backend.get_additional_local_pin_limit()  # GetAdditionalLocalPinLimit()
        else:
            buffer_limit = self._additional_pin_limit()  # GetAdditionalPinLimit()
        # Min(..., PG_INT16_MAX)
        if buffer_limit > PG_INT16_MAX:
            buffer_limit = PG_INT16_MAX
        buffer_limit += self.forwarded_buffers
        if buffer_limit > PG_INT16_MAX:
            buffer_limit = PG_INT16_MAX
        if buffer_limit == 0 and self.pinned_buffers == 0:
            buffer_limit = 1  # guarantee progress

        # Does the per-backend limit affect this read?
        nblocks = pending_n
        if buffer_limit < nblocks:
            # Shrink distance: no more look-ahead until buffers are released.
            new_distance = self.pinned_buffers + buffer_limit
            if self.distance > new_distance:
                self.distance = new_distance
                self._note_distance()
            # Unless we have nothing to give the consumer, stop here.
            if self.pinned_buffers > 0:
                return False
            # A short read is required to make progress.
            nblocks = buffer_limit

        # We say how many blocks we want to read, but it may be smaller on return if the buffer
        # manager decides to shorten the read. (Every slot is INVALID_BUFFER or a forwarded
        # buffer already: the C's initialized_buffers loop has nothing to do here.)
        buffer_index = self.next_buffer_index
        io_index = self.next_io_index
        requested_nblocks = nblocks
        buffers = self.buffers
        nblocks, need_wait = self.backend.start_read_buffers(
            self.ios[io_index], buffers, buffer_index, self.pending_read_blocknum, nblocks, flags
        )
        self.pinned_buffers += nblocks
        if self.debug:
            self._check_started(self.pending_read_blocknum, nblocks)

        # Remember whether we need to wait before returning this buffer.
        st = self.stats
        if not need_wait:
            st.hits += 1  # model statistics
            # Look-ahead distance decays, no I/O necessary.
            if self.distance > 1:
                self.distance -= 1
                self._note_distance()
        else:
            st.ios_started += 1  # model statistics
            st.blocks_read += nblocks
            # Remember to call WaitReadBuffers() before returning head buffer. Look-ahead
            # distance will be adjusted after waiting.
            self.io_buffer_index[io_index] = buffer_index
            io_index += 1
            self.next_io_index = 0 if io_index == self.max_ios else io_index
            self.ios_in_progress += 1
            self.seq_blocknum = self.pending_read_blocknum + nblocks
            if self.debug:
                first = self.pending_read_blocknum
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

        # How many pins were acquired but forwarded to the next call? They stay where they are
        # in the queue; they are not counted in pinned_buffers, but we already hold them.
        forwarded = 0
        while (
            nblocks + forwarded < requested_nblocks
            and buffers[buffer_index + nblocks + forwarded] != INVALID_BUFFER
        ):
            forwarded += 1
        self.forwarded_buffers = forwarded

        # We gave a contiguous range of buffer space to StartReadBuffers(), but we want it to
        # wrap around at queue_size: copy overflowing buffers to the front of the array (the
        # copy in the overflow zone stays; both are cleared when handed to the consumer).
        queue_size = self.queue_size
        overflow = (buffer_index + nblocks + forwarded) - queue_size
        if overflow > 0:
            buffers[0:overflow] = buffers[queue_size : queue_size + overflow]

        # Compute location of start of next read, without using % operator.
        buffer_index += nblocks
        if buffer_index >= queue_size:
            buffer_index -= queue_size
        self.next_buffer_index = buffer_index

        # Adjust the pending read to cover the remaining portion, if any.
        self.pending_read_blocknum += nblocks
        self.pending_read_nblocks -= nblocks

        held = self.pinned_buffers + forwarded  # model statistics
        if held > st.max_pinned:
            st.max_pinned = held
        return True

    # ------------------------------------------------------------------ read_stream_look_ahead
    def _look_ahead(self) -> None:
        """``read_stream_look_ahead``: take blocks from the callback and start reads while the
        pins plus the pending read are below the distance and an I/O slot is free."""
        max_ios = self.max_ios
        io_combine_limit = self.io_combine_limit
        queue_size = self.queue_size
        while (
            self.ios_in_progress < max_ios and self.pinned_buffers + self.pending_read_nblocks < self.distance
        ):
            if self.pending_read_nblocks == io_combine_limit:
                self._start_pending_read()
                continue

            # See which block the callback wants next in the stream (into the queue slot of
            # the Nth block of the pending read, with wrap-around, for its per-buffer data).
            buffer_index = self.next_buffer_index + self.pending_read_nblocks
            if buffer_index >= queue_size:
                buffer_index -= queue_size
            blocknum = self._get_block(buffer_index)
            if blocknum == InvalidBlockNumber:
                # End of stream.
                self.distance = 0
                self._note_distance()
                break

            # Can we merge it with the pending read?
            if (
                self.pending_read_nblocks > 0
                and self.pending_read_blocknum + self.pending_read_nblocks == blocknum
            ):
                self.pending_read_nblocks += 1
                continue

            # We have to start the pending read before we can build another.
            while self.pending_read_nblocks > 0:
                if not self._start_pending_read() or self.ios_in_progress == max_ios:
                    # We've hit the buffer or I/O limit. Rewind and stop here.
                    self._unget_block(blocknum)
                    return

            # This is the start of a new pending read.
            self.pending_read_blocknum = blocknum
            self.pending_read_nblocks = 1

        # We don't start the pending read just because we've hit the distance limit, preferring
        # to give it another chance to grow to full io_combine_limit size once more buffers have
        # been consumed. However, if we've already reached io_combine_limit, or we've reached
        # the distance limit and there isn't anything pinned yet, or the callback has signaled
        # end-of-stream, we start the read immediately.
        pending_n = self.pending_read_nblocks
        if (
            pending_n > 0
            and (
                pending_n == io_combine_limit
                or (pending_n >= self.distance and self.pinned_buffers == 0)
                or self.distance == 0
            )
            and self.ios_in_progress < max_ios
        ):
            self._start_pending_read()

        # There should always be something pinned when we leave this function, unless we've hit
        # the end of the stream.
        if self.debug and not (self.pinned_buffers > 0 or self.distance == 0):
            raise InvariantViolation("look-ahead left nothing pinned before the end of the stream")

    # ------------------------------------------------------------------ read_stream_begin_impl
    def _begin_impl(self) -> None:
        """``read_stream_begin_impl``: size the queues and set the stream's starting state."""
        backend = self.backend
        settings = backend.settings
        rel = self.rel
        flags = self.flags

        # Reject attempts to read non-local temporary relations: we have no visibility into the
        # owning session's local buffers (RELATION_IS_OTHER_TEMP).
        if rel.persistence == "t" and rel.temp_owner != backend.id:
            raise OtherSessionTempRelation(rel.name)

        # Decide how many I/Os we will allow to run at the same time.
        if rel.is_catalog:
            # Avoid circularity while trying to look up tablespace settings.
            max_ios = settings.effective_io_concurrency
        elif flags & READ_STREAM_MAINTENANCE:
            # get_tablespace_maintenance_io_concurrency()
            max_ios = (
                rel.tablespace_mic if rel.tablespace_mic is not None else settings.maintenance_io_concurrency
            )
        else:
            # get_tablespace_io_concurrency()
            max_ios = (
                rel.tablespace_eic if rel.tablespace_eic is not None else settings.effective_io_concurrency
            )

        # Cap to INT16_MAX to avoid overflowing below.
        max_ios = min(max_ios, PG_INT16_MAX)

        # io_combine_limit is Min(io_combine_limit, io_max_combine_limit) in PostgreSQL 18 (the
        # GUCs' assign hooks); the extra space a multi-block I/O near the end of the queue needs.
        io_combine_limit = settings.effective_io_combine_limit
        queue_overflow = io_combine_limit - 1

        # The maximum number of buffers we're prepared to pin: one more I/O's worth than max_ios
        # (progress with max_ios 0; no wait for a finished I/O's buffers to be consumed), within
        # int16 and the spare entry and the overflow space.
        max_pinned_buffers = (max_ios + 1) * io_combine_limit
        max_pinned_buffers = min(max_pinned_buffers, PG_INT16_MAX - queue_overflow - 1)

        # Give the strategy a chance to limit the number of buffers we pin.
        strategy_pin_limit = get_access_strategy_pin_limit(self.strategy, settings.nbuffers)
        max_pinned_buffers = min(strategy_pin_limit, max_pinned_buffers)

        # Also limit our queue to the maximum number of pins we could ever be allowed to acquire
        # according to the buffer manager.
        if rel.persistence == "t":  # SmgrIsTemp(smgr)
            max_possible_buffer_limit = backend.get_local_pin_limit()
        else:
            max_possible_buffer_limit = backend.get_pin_limit()
        max_pinned_buffers = min(max_pinned_buffers, max_possible_buffer_limit)

        # The limit might be zero on a system configured with too few buffers for the number of
        # connections. We need at least one to make progress.
        max_pinned_buffers = max(1, max_pinned_buffers)

        # One extra entry for buffers and per-buffer data: the consumer may use the per-buffer
        # data until its next call.
        queue_size = max_pinned_buffers + 1

        # The buffers (queue_size, plus the overflow space so that one read never wraps), the
        # ios and the per-buffer data.
        self.buffers = [INVALID_BUFFER] * (queue_size + queue_overflow)
        if self.per_buffer_data:
            self._pbd = [None] * queue_size

        self.sync_mode = backend.io_method.name == "sync"
        self.batch_mode = bool(flags & READ_STREAM_USE_BATCHING)

        # Read-ahead advice simulating asynchronous I/O with synchronous calls: only if AIO is
        # not used, direct I/O isn't enabled, the caller hasn't promised sequential access, and
        # max_ios hasn't been set to zero (USE_PREFETCH).
        self.advice_enabled = (
            self.sync_mode
            and not backend.storage.direct_io
            and not flags & READ_STREAM_SEQUENTIAL
            and max_ios > 0
        )

        # Setting max_ios to zero disables AIO and advice-based pseudo AIO, but we still need
        # to allocate space to combine and run one I/O. Bump it up to one, and remember to ask
        # for synchronous I/O only.
        self.read_buffers_flags = 0
        if max_ios == 0:
            max_ios = 1
            self.read_buffers_flags = READ_BUFFERS_SYNCHRONOUSLY

        # Capture stable values for these two GUC-derived numbers for the stream's lifetime.
        self.max_ios = max_ios
        self.io_combine_limit = io_combine_limit

        self.max_pinned_buffers = max_pinned_buffers
        self.queue_size = queue_size
        self.buffered_blocknum = InvalidBlockNumber
        self.seq_blocknum = InvalidBlockNumber
        self.seq_until_processed = InvalidBlockNumber
        self.temporary = rel.persistence == "t"  # SmgrIsTemp(smgr)
        # (memset to 0 in the C)
        self.ios_in_progress = 0
        self.forwarded_buffers = 0
        self.pinned_buffers = 0
        self.pending_read_blocknum = InvalidBlockNumber
        self.pending_read_nblocks = 0
        self.oldest_io_index = 0
        self.next_io_index = 0
        self.fast_path = False
        self.oldest_buffer_index = 0
        self.next_buffer_index = 0

        # Skip the initial ramp-up phase if the caller says we're going to be reading the whole
        # relation.
        if flags & READ_STREAM_FULL:
            self.distance = min(max_pinned_buffers, io_combine_limit)
        else:
            self.distance = 1

        # Since we always access the same relation, the ReadBuffersOperation objects are set up
        # once (rel, fork, strategy).
        self.ios = [ReadBuffersOperation(rel, self.fork, self.strategy) for _ in range(max_ios)]
        self.io_buffer_index = [0] * max_ios

    # ------------------------------------------------------------------ read_stream_next_buffer
    def _next_buffer(self) -> int:
        """``read_stream_next_buffer``: the next pinned buffer, or ``INVALID_BUFFER`` at the end
        (:meth:`next_buffer` is this with the model's checks of its use)."""
        backend = self.backend
        buffers = self.buffers
        st = self.stats

        # A fast path for all-cached scans: the same algorithm, specialised for no I/O and no
        # per-buffer data, staying in the same buffer slot and using singular StartReadBuffer().
        if self.fast_path:
            backend._cpu_debt += self._buffer_us  # model: the stream's CPU per buffer
            # We're going to return the buffer we pinned last time.
            oldest_buffer_index = self.oldest_buffer_index
            buffer = buffers[oldest_buffer_index]
            st.buffers_returned += 1  # model statistics
            st.fast_path_returns += 1

            # Choose the next block to pin.
            next_blocknum = self._get_block(-1)

            if next_blocknum != InvalidBlockNumber:
                flags = self.read_buffers_flags
                if self.advice_enabled:
                    flags |= READ_BUFFERS_ISSUE_ADVICE

                # Pin a buffer for the next call. Same buffer entry, and arbitrary I/O entry
                # (they're all free). No pin limit check: one pin is always allowed.
                buffers[oldest_buffer_index], need_wait = backend.start_read_buffer(
                    self.ios[0], next_blocknum, flags
                )
                if self.debug:
                    self._check_started(next_blocknum, 1)
                if not need_wait:
                    st.hits += 1  # model statistics
                    # Fast return.
                    return buffer

                # Next call must wait for I/O for the newly pinned buffer.
                st.ios_started += 1  # model statistics
                st.blocks_read += 1
                self.oldest_io_index = 0
                self.next_io_index = 1 if self.max_ios > 1 else 0
                self.ios_in_progress = 1
                self.io_buffer_index[0] = oldest_buffer_index
                self.seq_blocknum = next_blocknum + 1
            else:
                # No more blocks, end of stream.
                self.distance = 0
                self._note_distance()
                self.oldest_buffer_index = self.next_buffer_index
                self.pinned_buffers = 0
                buffers[oldest_buffer_index] = INVALID_BUFFER

            self.fast_path = False
            return buffer

        if self.pinned_buffers == 0:
            # End of stream reached?
            if self.distance == 0:
                return INVALID_BUFFER

            # If we're just starting up we'll need to crank the handle to get started.
            self._look_ahead()

            # End of stream reached?
            if self.pinned_buffers == 0:
                return INVALID_BUFFER

        # Grab the oldest pinned buffer and associated per-buffer data.
        backend._cpu_debt += self._buffer_us  # model: the stream's CPU per buffer
        oldest_buffer_index = self.oldest_buffer_index
        buffer = buffers[oldest_buffer_index]
        if self._pbd is not None:
            self.last_data = self._pbd[oldest_buffer_index]
        if buffer == INVALID_BUFFER:  # Assert(BufferIsValid(buffer))
            raise InvariantViolation(
                f"queue slot {oldest_buffer_index} holds no buffer although {self.pinned_buffers} are pinned"
            )

        # Do we have to wait for an associated I/O first?
        if self.ios_in_progress > 0 and self.io_buffer_index[self.oldest_io_index] == oldest_buffer_index:
            io_index = self.oldest_io_index
            op = self.ios[io_index]
            t0 = backend.clock.now

            needed_wait = backend.wait_read_buffers(op)  # WaitReadBuffers() (void in 18)

            st.waits += 1  # model statistics
            st.wait_us += backend.clock.now - t0
            self.ios_in_progress -= 1
            io_index += 1
            self.oldest_io_index = 0 if io_index == self.max_ios else io_index

            # Look-ahead distance ramps up rapidly after we do I/O.
            self._after_wait(op, needed_wait)

            # If we've reached the first block of a sequential region we're issuing advice for,
            # cancel that until the next jump.
            if self.advice_enabled and op.blocknum == self.seq_until_processed:
                self.seq_until_processed = InvalidBlockNumber

        # We must zap this queue entry, or else it would appear as a forwarded buffer; and its
        # copy in the overflow zone, if it is potentially there.
        buffers[oldest_buffer_index] = INVALID_BUFFER
        if oldest_buffer_index < self.io_combine_limit - 1:
            buffers[self.queue_size + oldest_buffer_index] = INVALID_BUFFER

        # Pin transferred to caller.
        self.pinned_buffers -= 1
        st.buffers_returned += 1  # model statistics

        # Advance oldest buffer, with wrap-around.
        oldest_buffer_index += 1
        if oldest_buffer_index == self.queue_size:
            oldest_buffer_index = 0
        self.oldest_buffer_index = oldest_buffer_index

        # Prepare for the next call.
        self._look_ahead()

        # See if we can take the fast path for all-cached scans next time.
        if (
            self.ios_in_progress == 0
            and self.forwarded_buffers == 0
            and self.pinned_buffers == 1
            and self.distance == 1
            and self.pending_read_nblocks == 0
            and self._pbd is None
        ):
            # The fast path spins on one buffer entry; clear a copy of it in the overflow zone
            # now, as the regular path would.
            if self.oldest_buffer_index < self.io_combine_limit - 1:
                buffers[self.queue_size + self.oldest_buffer_index] = INVALID_BUFFER
            self.fast_path = True

        return buffer

    def _after_wait(self, op: ReadBuffersOperation, needed_wait: bool) -> None:
        """``read_stream_next_buffer`` after ``WaitReadBuffers``: "Look-ahead distance ramps up
        rapidly after we do I/O" (a method of its own so that known-bug variants can replace it;
        ``needed_wait`` is unused: 18's ``WaitReadBuffers`` returns nothing)."""
        distance = self.distance * 2  # wider temporary value, clamped below
        if distance > self.max_pinned_buffers:
            distance = self.max_pinned_buffers
        self.distance = distance
        self._note_distance()

    # ------------------------------------------------------------------ read_stream_clear_strategy
    def clear_strategy(self) -> None:
        """``read_stream_clear_strategy``: stop using a buffer access strategy for reads from
        this stream, for all of its ReadBuffersOperations including those with I/Os in progress
        (VACUUM's failsafe). The pin cap is unchanged; the caller frees the strategy."""
        self._check_not_ended("clear_strategy")
        for op in self.ios:
            op.set_strategy(None)
        self.strategy = None  # model: what set_strategy and next_block read

    # ------------------------------------------------------------------ read_stream_reset
    def reset(self) -> None:
        """``read_stream_reset``: release any queued up buffers; the stream can be used again.

        The drain calls ``read_stream_next_buffer`` with the distance at 0, so a pending read is
        still started and read (confirmed on an 18.6 server); the ungot block is dropped unread.
        """
        self._check_not_ended("reset")
        # Stop looking ahead.
        self.distance = 0
        self._note_distance()

        # Forget buffered block number and fast path state.
        self.buffered_blocknum = InvalidBlockNumber
        self.fast_path = False

        # Unpin anything that wasn't consumed.
        backend = self.backend
        while (buffer := self._next_buffer()) != INVALID_BUFFER:
            backend.release_buffer(buffer)

        # Unpin any unused forwarded buffers.
        self._release_forwarded_buffers()

        # Start off assuming data is cached.
        self.distance = 1
        self._note_distance()
        self.callback_ended = False  # model: the callback may be asked again
        self._produced.clear()  # model: what the callback produced and no read covered

    def pause(self) -> int:
        """``read_stream_pause`` is not in PostgreSQL 18 (it is from 19 on)."""
        raise ModelUsageError("read_stream_pause() is not in PostgreSQL 18: it exists from 19 on")

    def resume(self) -> None:
        """``read_stream_resume`` is not in PostgreSQL 18 (it is from 19 on)."""
        raise ModelUsageError("read_stream_resume() is not in PostgreSQL 18: it exists from 19 on")

    def _clamp_distances(self) -> None:
        """The proposed ``read_stream_set_strategy``'s clamp: the distance, to the new cap."""
        if self.distance > self.max_pinned_buffers:
            self.distance = self.max_pinned_buffers
            self._note_distance()
