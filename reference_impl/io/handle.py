"""One I/O in flight: the model's ``PgAioHandle`` with the buffers it reads into (``aio.c``).

A handle is made by the buffer manager (``AsyncReadBuffers``) or by the harness for another
backend's read, filled in by the I/O method (``issue``: submission and completion times, the
storage's outcome) and completed by the buffer pool (``complete_io``). It knows the backend that
issued it only as an :class:`IoIssuer`, whose observers hear of the completion, so this module
depends on neither the buffer manager nor the I/O methods: both depend on it.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import PgError
from ..storage.relation import FORK_NAMES, ForkNumber, Relation
from ..storage.smgr import ReadOutcome

__all__ = ["InflightIO", "IoIssuer", "finish_io"]


class IoIssuer(Protocol):
    """The backend that issued an I/O, as the I/O's completion sees it (``bufmgr.Backend``):
    whatever listens to its I/O events (None when nothing does)."""

    @property
    def _io_observer(self) -> Any: ...


class InflightIO:
    """One physical read in flight (a ``PgAioHandle`` with its buffers)."""

    __slots__ = (
        "owner",
        "rel",
        "fork",
        "start",
        "nblocks",
        "bufs",
        "context",
        "submit_us",
        "complete_at",
        "outcome",
        "done",
        "error",
        "synchronous",
        "zero_on_error",
        "ignore_checksum",
        "seq",
        "record",
        "backend",
        "consecutive",
        "local",
    )

    def __init__(
        self,
        owner: int,
        rel: Relation,
        fork: ForkNumber,
        start: int,
        bufs: list[int],
        context: str,
        synchronous: bool,
        zero_on_error: bool,
        ignore_checksum: bool,
    ) -> None:
        self.owner = owner
        self.rel = rel
        self.fork = fork
        self.start = start
        self.nblocks = len(bufs)
        self.bufs = bufs
        self.context = context
        self.submit_us = 0
        self.complete_at = 0
        self.outcome: ReadOutcome | None = None
        self.done = False
        self.error: PgError | None = None
        self.synchronous = synchronous
        self.zero_on_error = zero_on_error
        self.ignore_checksum = ignore_checksum
        self.seq = 0
        self.record: Any = None
        # The issuing backend (None for another backend's I/O the harness staged), whose
        # observers hear of the completion.
        self.backend: IoIssuer | None = None
        # Set by BufferPool.register_io (or before it by a caller that checked): the buffers are
        # the consecutive slots bufs[0] .. bufs[0] + nblocks - 1, so their per-buffer state is
        # updated as slices.
        self.consecutive = False
        # The backend's local buffers (buffers.localbuf.LocalBuffers) for a read of a temporary
        # relation, whose ``bufs`` are then local buffer ids; None for shared buffers.
        self.local: Any = None

    @property
    def ok_blocks(self) -> int:
        out = self.outcome
        return 0 if out is None else out.ok_blocks

    def __repr__(self) -> str:
        return (
            f"InflightIO({self.rel.name} {FORK_NAMES[self.fork]} [{self.start}..{self.start + self.nblocks - 1}]"
            f" complete_at={self.complete_at} done={self.done})"
        )


def finish_io(ioh: InflightIO, ok: int, error: PgError | None) -> None:
    """Mark ``ioh`` done with its error, note the outcome in its trace record if any, and tell
    the issuing backend's observers (``io_completed``)."""
    ioh.error = error
    ioh.done = True
    rec = ioh.record
    if rec is not None:
        rec.ok_blocks = ok
        if error is not None:
            rec.error = type(error).__name__
    be = ioh.backend
    if be is not None and be._io_observer is not None:
        be._io_observer.io_completed(be, ioh)
