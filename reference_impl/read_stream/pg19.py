"""``read_stream.c`` of PostgreSQL 19 (checked against 19beta1, the branch point), function by
function.

19 splits PostgreSQL 18's single look-ahead distance in two:

* the **read-ahead distance** (``readahead_distance``: how many blocks may be pinned or pending
  ahead of the consumer) doubles only when ``WaitReadBuffers`` reports that it needed to wait
  (or the I/O was performed synchronously), because if the data was already there the current
  distance was evidently enough;
* the **combine distance** (``combine_distance``: how large a pending read should grow before it
  is started) doubles, up to ``io_combine_limit``, after every I/O, whether or not it waited.

Both decay by one per read that needed no I/O, but only while no I/O is in flight and only after
a *hold-off* of ``max_pinned_buffers`` such reads since the last I/O. Two predicates,
``read_stream_should_look_ahead`` and ``read_stream_should_issue_now``, replace 18's loop
conditions. A miss found in the all-cached fast path is read with ``READ_BUFFERS_SYNCHRONOUSLY``.
New: ``read_stream_pause`` / ``read_stream_resume`` and per-stream I/O statistics
(``read_stream_enable_stats`` into an ``IOStats`` of ``executor/instrument_node.h``, shown by
``EXPLAIN (IO)``). 19beta1 has no ``read_stream_clear_strategy`` (18.6 and 20devel have it).

The functions below are in the C file's order: ``read_stream_count_prefetch``,
``read_stream_count_io``, ``read_stream_count_wait``, ``read_stream_enable_stats``,
``read_stream_start_pending_read``, ``read_stream_should_look_ahead``,
``read_stream_should_issue_now``, ``read_stream_look_ahead``, ``read_stream_begin_impl``,
``read_stream_next_buffer`` (with the fast path), ``read_stream_pause``, ``read_stream_resume``,
``read_stream_reset``. What every version shares unchanged is in ``_common.py``; where the
model does more than the C (its statistics, the CPU it charges per buffer, debug checks of the
C's assertions), the line says so. ``self.distance`` is ``readahead_distance`` under the name the
harness's introspection (and 18) uses.

Not modelled, as in 18: ``pgaio_enter_batchmode`` /
``pgaio_exit_batchmode``, which change no read, pin or time of the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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

__all__ = ["IOStats", "ReadStream19"]


@dataclass
class IOStats:
    """``IOStats`` (``executor/instrument_node.h``, 19+): what ``read_stream_enable_stats``
    counts into, and ``EXPLAIN (IO)`` prints."""

    prefetch_count: int = 0  # number of buffers returned to consumer (for averaging distance)
    distance_sum: int = 0  # sum of pinned_buffers sampled at each buffer return
    distance_max: int = 0  # maximum actual pinned_buffers observed during the scan
    distance_capacity: int = 0  # maximum possible look-ahead distance (max_pinned_buffers)
    io_count: int = 0  # number of I/Os
    io_nblocks: int = 0  # sum of blocks for all I/Os
    io_in_progress: int = 0  # sum of in-progress I/Os
    wait_count: int = 0  # number of waits for a read (for the I/O)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ReadStream19(ReadStreamBase):
    """PostgreSQL 19's ``ReadStream`` (``read_stream.c``) over one fork of one relation."""

    version = "19"

    readahead_distance: int
    combine_distance: int
    distance_decay_holdoff: int
    resume_readahead_distance: int
    resume_combine_distance: int
    io_stats: IOStats | None

    @property  # type: ignore[override]
    def distance(self) -> int:
        """``readahead_distance``, under 18's name (the harness's introspection reads it)."""
        return self.readahead_distance

    @distance.setter
    def distance(self, value: int) -> None:
        self.readahead_distance = value

    # ------------------------------------------------------------------ statistics
    def _count_prefetch(self) -> None:
        """``read_stream_count_prefetch``: called once per buffer returned to the consumer in
        ``read_stream_next_buffer``; records the number of pinned buffers at that moment."""
        stats = self.io_stats
        if stats is None:
            return
        stats.prefetch_count += 1
        stats.distance_sum += self.pinned_buffers
        if self.pinned_buffers > stats.distance_max:
            stats.distance_max = self.pinned_buffers

    def _count_io(self, nblocks: int, in_progress: int) -> None:
        """``read_stream_count_io``: the number of I/O requests, their size in blocks and the
        number of in-progress I/Os."""
        stats = self.io_stats
        if stats is None:
            return
        stats.io_count += 1
        stats.io_nblocks += nblocks
        stats.io_in_progress += in_progress

    def _count_wait(self) -> None:
        """``read_stream_count_wait``: the number of I/O waits while pulling buffers out."""
        stats = self.io_stats
        if stats is None:
            return
        stats.wait_count += 1

    def enable_stats(self, stats: IOStats | None = None) -> IOStats:
        """``read_stream_enable_stats``: collect stats into ``stats`` (the model makes a new
        :class:`IOStats` when none is given) and return it."""
        self._check_not_ended("enable_stats")
        self.io_stats = stats if stats is not None else IOStats()
        self.io_stats.distance_capacity = self.max_pinned_buffers
        return self.io_stats

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
            if self.readahead_distance > new_distance:
                self.readahead_distance = new_distance
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
            # If there currently is no IO in progress, and we have not needed to issue IO
            # recently, decay the look-ahead distance (the decay holdoff is set to the max
            # look-ahead distance whenever we need to do IO).
            if self.ios_in_progress == 0:
                if self.distance_decay_holdoff > 0:
                    self.distance_decay_holdoff -= 1
                else:
                    if self.readahead_distance > 1:
                        self.readahead_distance -= 1
                        self._note_distance()
                    # The IO combine distance is reduced after sufficiently many buffer hits
                    # too: entering the fast path requires combine_distance == 1.
                    if self.combine_distance > 1:
                        self.combine_distance -= 1
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

            # update I/O stats
            self._count_io(nblocks, self.ios_in_progress)

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

    # ------------------------------------------------------------------ look-ahead decisions
    def _should_look_ahead(self) -> bool:
        """``read_stream_should_look_ahead``: should we continue to perform look ahead (to make
        the pending IO larger via IO combining, or to issue more read-ahead)?"""
        # If the callback has signaled end-of-stream, we're done.
        if self.readahead_distance == 0:
            return False

        # Never start more IOs than our cap.
        if self.ios_in_progress >= self.max_ios:
            return False

        # Allow looking further ahead if we are in the process of building a larger IO, the IO
        # is not yet big enough, and we don't yet have IO in flight (this may exceed the
        # read-ahead limit, never the pin limit: combine_distance is capped by
        # max_pinned_buffers).
        if (
            self.pending_read_nblocks > 0
            and self.pinned_buffers == 0
            and self.pending_read_nblocks < self.combine_distance
        ):
            return True

        # Don't start more read-ahead if that'd put us over the distance limit for doing
        # read-ahead.
        if self.pinned_buffers + self.pending_read_nblocks >= self.readahead_distance:
            return False

        return True

    def _should_issue_now(self) -> bool:
        """``read_stream_should_issue_now``: start the pending read now, or give it another
        chance to grow to the full size?"""
        pending_read_nblocks = self.pending_read_nblocks

        # There is no pending IO that could be issued.
        if pending_read_nblocks == 0:
            return False

        # Never start more IOs than our cap.
        if self.ios_in_progress >= self.max_ios:
            return False

        # If the callback has signaled end-of-stream, start the pending read immediately.
        # There is no further potential for IO combining.
        if self.readahead_distance == 0:
            return True

        # If we've already reached combine_distance, there's no chance of growing the read
        # further.
        if pending_read_nblocks >= self.combine_distance:
            return True

        # If we currently have no reads in flight or prepared, issue the IO once we are not
        # looking ahead further. This ensures there's always at least one IO prepared.
        if self.pinned_buffers == 0 and not self._should_look_ahead():
            return True

        return False

    # ------------------------------------------------------------------ read_stream_look_ahead
    def _look_ahead(self) -> None:
        """``read_stream_look_ahead``: take blocks from the callback and start reads while
        ``read_stream_should_look_ahead`` says so."""
        queue_size = self.queue_size
        while self._should_look_ahead():
            if self._should_issue_now():
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
                self.readahead_distance = 0
                self.combine_distance = 0
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
                if not self._start_pending_read() or self.ios_in_progress == self.max_ios:
                    # We've hit the buffer or I/O limit. Rewind and stop here.
                    self._unget_block(blocknum)
                    return

            # This is the start of a new pending read.
            self.pending_read_blocknum = blocknum
            self.pending_read_nblocks = 1

        # Check if the pending read should be issued now, or if we should give it another chance
        # to grow to the full size. (The pending read can exceed the distance goal, if the
        # latter was reduced after hitting the per-backend buffer limit.)
        if self._should_issue_now():
            self._start_pending_read()

        # There should always be something pinned when we leave this function, unless we've hit
        # the end of the stream.
        if self.debug and not (self.pinned_buffers > 0 or self.readahead_distance == 0):
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

        # io_combine_limit is Min(io_combine_limit, io_max_combine_limit) (the GUCs' assign
        # hooks); the extra space a multi-block I/O near the end of the queue needs.
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
        self.distance_decay_holdoff = 0
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
        self.io_stats = None

        # Skip the initial ramp-up phase if the caller says we're going to be reading the whole
        # relation.
        if flags & READ_STREAM_FULL:
            self.readahead_distance = min(max_pinned_buffers, io_combine_limit)
            self.combine_distance = min(max_pinned_buffers, io_combine_limit)
        else:
            self.readahead_distance = 1
            self.combine_distance = 1
        self.resume_readahead_distance = self.readahead_distance
        self.resume_combine_distance = self.combine_distance

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

                # While in fast-path, execute any IO that we might encounter synchronously: we
                # are only looking one block ahead, so there is no realistic chance of the IO
                # completing before we need it. We switch to non-synchronous IO after this.
                flags |= READ_BUFFERS_SYNCHRONOUSLY

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
                    self._count_prefetch()
                    return buffer

                # Next call must wait for I/O for the newly pinned buffer.
                st.ios_started += 1  # model statistics
                st.blocks_read += 1
                self.oldest_io_index = 0
                self.next_io_index = 1 if self.max_ios > 1 else 0
                self.ios_in_progress = 1
                self.io_buffer_index[0] = oldest_buffer_index
                self.seq_blocknum = next_blocknum + 1

                # update I/O stats
                self._count_io(1, self.ios_in_progress)

                # update prefetch distance
                self._count_prefetch()
            else:
                # No more blocks, end of stream (the C counts no prefetch for this buffer).
                self.readahead_distance = 0
                self.combine_distance = 0
                self._note_distance()
                self.oldest_buffer_index = self.next_buffer_index
                self.pinned_buffers = 0
                buffers[oldest_buffer_index] = INVALID_BUFFER

            self.fast_path = False
            return buffer

        if self.pinned_buffers == 0:
            # End of stream reached?
            if self.readahead_distance == 0:
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

            needed_wait = backend.wait_read_buffers(op)

            st.waits += 1  # model statistics
            st.wait_us += backend.clock.now - t0
            self.ios_in_progress -= 1
            io_index += 1
            self.oldest_io_index = 0 if io_index == self.max_ios else io_index

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

        self._count_prefetch()

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
            and self.readahead_distance == 1
            and self.combine_distance == 1
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
        """``read_stream_next_buffer`` after ``WaitReadBuffers``: the distance updates (a method
        of its own so that known-bug variants can replace it)."""
        # If the IO was executed synchronously, we will never see WaitReadBuffers() block. Treat
        # it as if it did block (crucial with effective_io_concurrency=0: all IO is synchronous).
        if op.flags & READ_BUFFERS_SYNCHRONOUSLY:
            needed_wait = True

        # Count it as a wait if we need to wait for IO.
        if needed_wait:
            self._count_wait()

        # Have the read-ahead distance ramp up rapidly after we needed to wait for IO (if we
        # did not need to wait, the current distance was evidently sufficient). Must not
        # increase the distance if we already reached the end of the stream (0 marks it).
        if self.readahead_distance > 0 and needed_wait:
            readahead_distance = self.readahead_distance * 2  # wider temporary value (int32)
            if readahead_distance > self.max_pinned_buffers:
                readahead_distance = self.max_pinned_buffers
            self.readahead_distance = readahead_distance
            self._note_distance()

        # As we needed IO, prevent distances from being reduced within our maximum look-ahead
        # window.
        self.distance_decay_holdoff = self.max_pinned_buffers

        # Whether we needed to wait or not, allow for more IO combining if we needed to do IO.
        if 0 < self.combine_distance < self.io_combine_limit:
            combine_distance = self.combine_distance * 2  # wider temporary value (int32)
            if combine_distance > self.io_combine_limit:
                combine_distance = self.io_combine_limit
            if combine_distance > self.max_pinned_buffers:
                combine_distance = self.max_pinned_buffers
            self.combine_distance = combine_distance

    # ------------------------------------------------------------------ read_stream_pause / resume
    def pause(self) -> int:
        """``read_stream_pause``: temporarily stop consuming block numbers from the callback;
        returns ``InvalidBlockNumber``, which a callback that calls it should return."""
        self._check_not_ended("pause")
        self.resume_readahead_distance = self.readahead_distance
        self.resume_combine_distance = self.combine_distance
        self.readahead_distance = 0
        self.combine_distance = 0
        self._note_distance()
        self._paused = True  # model: the callback's InvalidBlockNumber is no end (debug check)
        return InvalidBlockNumber

    def resume(self) -> None:
        """``read_stream_resume``: look ahead again, with the distances saved by the pause."""
        self._check_not_ended("resume")
        self.readahead_distance = self.resume_readahead_distance
        self.combine_distance = self.resume_combine_distance
        self._note_distance()
        self._paused = False  # model: the callback may be asked again
        self.callback_ended = False

    def clear_strategy(self) -> None:
        """``read_stream_clear_strategy`` is not in PostgreSQL 19 (19beta1 has no such function;
        18.6 and 20devel have it)."""
        raise ModelUsageError(
            "read_stream_clear_strategy() is not in PostgreSQL 19 (19beta1): it exists in 18.6 and 20devel"
        )

    # ------------------------------------------------------------------ read_stream_reset
    def reset(self) -> None:
        """``read_stream_reset``: release any queued up buffers; the stream can be used again.

        As in 18, the drain calls ``read_stream_next_buffer`` with the read-ahead distance at 0:
        ``read_stream_should_issue_now`` is then true of a pending read, which is started and
        read; the ungot block is dropped unread. The buffers drained are counted by
        ``read_stream_count_prefetch`` like any other.
        """
        self._check_not_ended("reset")
        # Stop looking ahead.
        self.readahead_distance = 0
        self.combine_distance = 0
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
        self.readahead_distance = 1
        self.combine_distance = 1
        self.resume_readahead_distance = self.readahead_distance
        self.resume_combine_distance = self.combine_distance
        self.distance_decay_holdoff = 0
        self._note_distance()
        self.callback_ended = False  # model: the callback may be asked again
        self._paused = False
        self._produced.clear()  # model: what the callback produced and no read covered

    def _clamp_distances(self) -> None:
        """The proposed ``read_stream_set_strategy``'s clamp (v3): both distances and those
        saved for resuming a pause, to the new cap."""
        mp = self.max_pinned_buffers
        if self.readahead_distance > mp:
            self.readahead_distance = mp
            self._note_distance()
        self.combine_distance = min(self.combine_distance, mp)
        self.resume_readahead_distance = min(self.resume_readahead_distance, mp)
        self.resume_combine_distance = min(self.resume_combine_distance, mp)
