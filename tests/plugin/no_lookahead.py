"""A deliberately simple read stream with no look-ahead: how to plug in your own implementation.

Run the conformance suite against it with::

    pytest --pyargs readstream_conformance --readstream-impl=no_lookahead:NoLookaheadImplementation

(with this file importable, e.g. ``pythonpath = .`` in the ini file). It is correct — every block
the callback names comes back pinned, in order, and nothing stays pinned — so the stream-API
tests pass; but it asks the callback for the next block only when the consumer wants it and reads
that one block synchronously, so it never combines reads and never overlaps I/O with work, and the
performance-property tests fail. It works only through the harness's buffer manager
(``StartReadBuffer`` / ``WaitReadBuffers``), as ``read_stream.c`` works through ``bufmgr.c``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference_impl import INVALID_BUFFER, ForkNumber, InvalidBlockNumber, ReadBuffersOperation

__all__ = ["NoLookaheadImplementation", "NoLookaheadStream"]


class NoLookaheadStream:
    """One block, one read, when the consumer asks (``ReadBuffer`` in a loop, as before PG 17)."""

    def __init__(
        self,
        backend: Any,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any,
        *,
        fork: ForkNumber,
        strategy: Any,
        per_buffer_data: bool,
    ) -> None:
        self.backend = backend
        self.rel = rel
        self.fork = fork
        self.callback = callback
        self.private = private
        self.per_buffer_data = per_buffer_data
        self.op = ReadBuffersOperation(rel, fork, strategy)
        self.finished = False
        self.ended = False
        self.last_data: Any = None

    def next_buffer(self) -> int:
        if self.finished:
            return INVALID_BUFFER
        produced = self.callback(self, self.private)
        if self.per_buffer_data and produced != InvalidBlockNumber:
            block, self.last_data = produced
        else:
            block, self.last_data = produced, None
        if block == InvalidBlockNumber:
            self.finished = True
            return INVALID_BUFFER
        buffer, need_wait = self.backend.start_read_buffer(self.op, block, 0)
        if need_wait:
            self.backend.wait_read_buffers(self.op)
        return buffer

    def next_buffer_with_data(self) -> tuple[int, Any]:
        buffer = self.next_buffer()
        return buffer, self.last_data

    def reset(self) -> None:
        # Nothing is ever pinned ahead of the consumer, so there is nothing to release.
        self.finished = False

    def end(self) -> None:
        self.reset()
        self.ended = True

    def set_strategy(self, strategy: Any) -> None:
        self.op = ReadBuffersOperation(self.rel, self.fork, strategy)


class NoLookaheadImplementation:
    """The stream API with no look-ahead (a demonstration of the implementation protocol)."""

    name = "no-lookahead"
    # Streams run on the harness's buffer manager, hence on its virtual clock.
    capabilities = frozenset({"stream-api", "per-buffer-data", "set-strategy", "virtual-time"})

    def begin_stream(
        self,
        backend: Any,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any = None,
        *,
        fork: Any = ForkNumber.MAIN,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> NoLookaheadStream:
        return NoLookaheadStream(
            backend,
            rel,
            callback,
            private,
            fork=fork,
            strategy=strategy,
            per_buffer_data=per_buffer_data,
        )
