"""ReadStream as on PostgreSQL's development branch (v19 ``master``), as a variant of PG 18's.

Master splits PostgreSQL 18's single look-ahead distance in two:

* the **read-ahead distance** (how many blocks may be pinned or pending ahead of the consumer)
  doubles only when a wait for an I/O really blocked (or the I/O was performed synchronously),
  because if the data was already there the current distance was evidently enough;
* the **combine distance** (how large a pending read should grow before it is started) doubles,
  up to ``io_combine_limit``, after every I/O, whether or not it blocked.

Both decay by one per read that needed no I/O, but only while no I/O is in flight and only
after a *hold-off* of ``max_pinned_buffers`` such events since the last I/O, so that a mostly
cached scan with occasional misses keeps its look-ahead. Because combining may exceed the
read-ahead distance while nothing is pinned, reads still ramp to full size even when the device
keeps up. On the virtual clock "did the wait block" is deterministic: it blocked if the read's
completion time was still ahead of the consumer.

Other differences: a miss found in the all-cached fast path is read synchronously; ``reset``
forgets the pending read instead of reading it while draining; and there are
``pause``/``resume`` (a callback with temporarily no more blocks), ``clear_strategy`` and
per-stream I/O statistics (``read_stream_enable_stats``). ``set_strategy`` follows the reviewed
v3 patch: it also clamps the combine distance and the distances saved for ``resume``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .buffers.bufmgr import READ_BUFFERS_SYNCHRONOUSLY, ReadBuffersOperation
from .errors import ModelUsageError
from .read_stream import READ_STREAM_FULL, ReadStream
from .storage.relation import InvalidBlockNumber

__all__ = ["ReadStreamMaster", "StreamIOStats"]


@dataclass
class StreamIOStats:
    """``IOStats`` filled by ``read_stream_enable_stats`` (master's ``instrument_node.h``)."""

    prefetch_count: int = 0
    distance_sum: int = 0
    distance_max: int = 0
    distance_capacity: int = 0
    io_count: int = 0
    io_nblocks: int = 0
    io_in_progress: int = 0
    wait_count: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ReadStreamMaster(ReadStream):
    """``read_stream.c`` of the v19 development branch (separate read-ahead/combine distances)."""

    version = "master"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        full = bool(self.flags & READ_STREAM_FULL)
        start = min(self.max_pinned_buffers, self.io_combine_limit) if full else 1
        # ``distance`` is the read-ahead distance; the base class reads it under that name.
        self.distance = start
        self.combine_distance = start
        self.resume_readahead_distance = start
        self.resume_combine_distance = start
        self.distance_decay_holdoff = 0
        self._fast_path_flags = READ_BUFFERS_SYNCHRONOUSLY
        self.io_stats: StreamIOStats | None = None
        self._last_blocks_read = 0
        self._draining = False
        self._paused = False
        self._note_distance()

    @property
    def readahead_distance(self) -> int:
        return self.distance

    # ------------------------------------------------------------------------------ statistics
    def enable_stats(self, stats: StreamIOStats | None = None) -> StreamIOStats:
        """``read_stream_enable_stats``: count into ``stats`` (a new object if none given)."""
        self.io_stats = stats if stats is not None else StreamIOStats()
        self.io_stats.distance_capacity = self.max_pinned_buffers
        # From now on every buffer returned is counted (the reset drain excepted).
        self._next_buffer = self._next_buffer_counting  # type: ignore[method-assign]
        if "next_buffer" in self.__dict__:
            self.next_buffer = self._next_buffer_counting  # type: ignore[method-assign]
        return self.io_stats

    # ------------------------------------------------------------------------------ distances
    def _decay_after_hit(self) -> None:
        if self.ios_in_progress == 0:
            if self.distance_decay_holdoff > 0:
                self.distance_decay_holdoff -= 1
            else:
                if self.distance > 1:
                    self.distance -= 1
                    self._note_distance()
                if self.combine_distance > 1:
                    self.combine_distance -= 1

    def _after_wait(self, op: ReadBuffersOperation, needed_wait: bool) -> None:
        if op.flags & READ_BUFFERS_SYNCHRONOUSLY:
            needed_wait = True
        stats = self.io_stats
        if needed_wait and stats is not None:
            stats.wait_count += 1
        if self.distance > 0 and needed_wait:
            self.distance = min(self.distance * 2, self.max_pinned_buffers)
            self._note_distance()
        self.distance_decay_holdoff = self.max_pinned_buffers
        if 0 < self.combine_distance < self.io_combine_limit:
            self.combine_distance = min(
                self.combine_distance * 2, self.io_combine_limit, self.max_pinned_buffers
            )

    def _set_end_of_stream(self) -> None:
        self.distance = 0
        self.combine_distance = 0
        self._note_distance()

    def _clamp_distances(self) -> None:
        mp = self.max_pinned_buffers
        if self.distance > mp:
            self.distance = mp
            self._note_distance()
        self.combine_distance = min(self.combine_distance, mp)
        self.resume_readahead_distance = min(self.resume_readahead_distance, mp)
        self.resume_combine_distance = min(self.resume_combine_distance, mp)

    # ------------------------------------------------------------------------------ look ahead
    def _should_look_ahead(self) -> bool:
        """``read_stream_should_look_ahead``."""
        if self.distance == 0:
            return False
        if self.ios_in_progress >= self.max_ios:
            return False
        pending = self.pending_read_nblocks
        if pending > 0 and self.pinned_buffers == 0 and pending < self.combine_distance:
            return True
        return self.pinned_buffers + pending < self.distance

    def _should_issue_now(self) -> bool:
        """``read_stream_should_issue_now``."""
        pending = self.pending_read_nblocks
        if pending == 0:
            return False
        if self.ios_in_progress >= self.max_ios:
            return False
        if self.distance == 0:
            return True
        if pending >= self.combine_distance:
            return True
        return self.pinned_buffers == 0 and not self._should_look_ahead()

    def _look_ahead(self) -> None:
        """``read_stream_look_ahead`` (master).

        The loop is ``while should_look_ahead(): if should_issue_now(): start; ...``; both
        predicates are written out inline here (they run for every block), with the methods
        above as their reference.
        """
        callback = self.callback
        private = self.private
        fast_get = self._pbd is None and not self.debug
        while True:
            # read_stream_should_look_ahead
            distance = self.distance
            if distance == 0 or self.ios_in_progress >= self.max_ios:
                break
            pending = self.pending_read_nblocks
            pinned = self.pinned_buffers
            if (
                not (pending > 0 and pinned == 0 and pending < self.combine_distance)
                and pinned + pending >= distance
            ):
                break
            # read_stream_should_issue_now (look-ahead is known to continue here)
            if pending > 0 and pending >= self.combine_distance:
                self._start_pending_read()
                continue
            if fast_get and self.buffered_blocknum == InvalidBlockNumber:
                blocknum = callback(self, private)
                if blocknum == InvalidBlockNumber:
                    # A pause (read_stream_pause from the callback) is not the callback's end.
                    self.callback_ended = not self._paused
                elif blocknum.__class__ is not int or not 0 <= blocknum <= 0xFFFFFFFE:
                    raise ModelUsageError(
                        f"stream callback returned {blocknum!r}: allowed a block number or InvalidBlockNumber"
                    )
            else:
                buffer_index = self.next_buffer_index + pending
                if buffer_index >= self.queue_size:
                    buffer_index -= self.queue_size
                blocknum = self._get_block(buffer_index)
            if blocknum == InvalidBlockNumber:
                self._set_end_of_stream()
                break
            if pending > 0 and self.pending_read_blocknum + pending == blocknum:
                self.pending_read_nblocks = pending + 1
                continue
            while self.pending_read_nblocks > 0:
                if not self._start_pending_read() or self.ios_in_progress == self.max_ios:
                    self._unget_block(blocknum)
                    return
            self.pending_read_blocknum = blocknum
            self.pending_read_nblocks = 1
        if self._should_issue_now():
            self._start_pending_read()

    def _start_pending_read(self) -> bool:
        before = self.ios_in_progress
        started = super()._start_pending_read()
        stats = self.io_stats
        if stats is not None and self.ios_in_progress > before:
            stats.io_count += 1
            stats.io_nblocks += self.stats.blocks_read - self._last_blocks_read
            stats.io_in_progress += self.ios_in_progress
        self._last_blocks_read = self.stats.blocks_read
        return started

    def _next_buffer_counting(self) -> int:
        """``read_stream_next_buffer`` with ``read_stream_count_prefetch`` (stats enabled)."""
        buf = ReadStream._next_buffer(self)
        stats = self.io_stats
        if stats is not None and buf >= 0 and not self._draining:
            stats.prefetch_count += 1
            stats.distance_sum += self.pinned_buffers
            if self.pinned_buffers > stats.distance_max:
                stats.distance_max = self.pinned_buffers
        return buf

    # ------------------------------------------------------------------------------ reset, pause
    def _begin_reset(self) -> None:
        """Master stops looking ahead and *forgets* the pending read before draining."""
        self.distance = 0
        self.combine_distance = 0
        self._note_distance()
        self.pending_read_nblocks = 0
        self.buffered_blocknum = InvalidBlockNumber
        self.fast_path = False

    def _drain(self) -> None:
        self._draining = True
        try:
            super()._drain()
        finally:
            self._draining = False

    def _finish_reset(self) -> None:
        self.distance = 1
        self.combine_distance = 1
        self.resume_readahead_distance = 1
        self.resume_combine_distance = 1
        self.distance_decay_holdoff = 0
        self.callback_ended = False
        self._paused = False
        self._note_distance()

    def pause(self) -> int:
        """``read_stream_pause``: stop asking the callback; returns ``InvalidBlockNumber``.

        Meant to be called from inside the callback, which then returns the value.
        """
        if self.ended:
            raise ModelUsageError("pause() on a stream that was ended")
        self.resume_readahead_distance = self.distance
        self.resume_combine_distance = self.combine_distance
        self.distance = 0
        self.combine_distance = 0
        self._note_distance()
        self._paused = True
        return InvalidBlockNumber

    def resume(self) -> None:
        """``read_stream_resume``: look ahead again with the distances saved by ``pause``."""
        if self.ended:
            raise ModelUsageError("resume() on a stream that was ended")
        self.distance = self.resume_readahead_distance
        self.combine_distance = self.resume_combine_distance
        self.callback_ended = False
        self._paused = False
        self._note_distance()

    def _get_block(self, slot: int) -> int:
        blocknum = super()._get_block(slot)
        if blocknum == InvalidBlockNumber and self._paused:
            # A pause is not the end of the callback's blocks.
            self.callback_ended = False
        return blocknum

    def clear_strategy(self) -> None:
        """``read_stream_clear_strategy``: later reads use no ring; the pin cap is unchanged."""
        for op in self.ios:
            op.set_strategy(None)
        self.strategy = None
