"""Errors raised by the reference model.

Two families live here. ``SettingError`` and ``ModelUsageError`` mean the model was driven
wrongly (a bad GUC value, a call out of protocol); they are programming errors of the caller.
``PgError`` and its subclasses are the model's rendering of an ``ERROR`` that PostgreSQL itself
would raise (an I/O failure, a checksum failure, a read past the end of a fork, a cancelled
query); scans and streams let them propagate exactly where PostgreSQL would, so tests can check
*when* an error surfaces, not only that it does.
"""

from __future__ import annotations

__all__ = [
    "ReadStreamModelError",
    "SettingError",
    "ModelUsageError",
    "InvariantViolation",
    "PgError",
    "ReadIOError",
    "ChecksumFailure",
    "ReadBeyondEOF",
    "NoUnpinnedBuffers",
    "NoEmptyLocalBuffer",
    "OtherSessionTempRelation",
    "QueryCanceled",
    "PinLeakError",
]


class ReadStreamModelError(Exception):
    """Base class of every error the reference model raises."""


class SettingError(ReadStreamModelError, ValueError):
    """A setting (GUC or simulation parameter) has a value PostgreSQL would reject."""


class ModelUsageError(ReadStreamModelError, RuntimeError):
    """The model was called out of protocol (e.g. ``next_buffer`` on an ended stream)."""


class InvariantViolation(ReadStreamModelError, AssertionError):
    """A debug-mode invariant of the model failed (see ``reference_impl.invariants``)."""


class PgError(ReadStreamModelError):
    """An ``ERROR`` as PostgreSQL would report it; ``sqlstate`` mirrors the server's code."""

    sqlstate = "XX000"


class ReadIOError(PgError):
    """``could not read blocks ...``: the storage returned EIO (``mdreadv``/``mdstartreadv``)."""

    sqlstate = "58030"

    def __init__(self, relation: str, fork: str, start: int, nblocks: int) -> None:
        self.relation, self.fork, self.start, self.nblocks = (
            relation,
            fork,
            start,
            nblocks,
        )
        last = start + nblocks - 1
        super().__init__(
            f'could not read blocks {start}..{last} in file of relation "{relation}" '
            f"fork {fork}: Input/output error"
        )


class ChecksumFailure(PgError):
    """``invalid page in block N of relation ...`` (``PageIsVerified`` failed on read)."""

    sqlstate = "XX001"

    def __init__(self, relation: str, fork: str, block: int) -> None:
        self.relation, self.fork, self.block = relation, fork, block
        super().__init__(f'invalid page in block {block} of relation "{relation}" fork {fork}')


class ReadBeyondEOF(PgError):
    """A read at or past the end of a fork (``mdreadv``: could not read block, read only 0 bytes)."""

    sqlstate = "XX001"

    def __init__(self, relation: str, fork: str, block: int, nblocks: int) -> None:
        self.relation, self.fork, self.block, self.nblocks = (
            relation,
            fork,
            block,
            nblocks,
        )
        super().__init__(
            f'could not read block {block} in file of relation "{relation}" fork {fork}: '
            f"read only 0 of 8192 bytes (the fork has {nblocks} blocks)"
        )


class NoUnpinnedBuffers(PgError):
    """``no unpinned buffers available`` (``StrategyGetBuffer`` swept every buffer pinned)."""

    sqlstate = "XX000"

    def __init__(self) -> None:
        super().__init__("no unpinned buffers available")


class NoEmptyLocalBuffer(PgError):
    """``no empty local buffer available`` (``GetLocalVictimBuffer``: every local buffer pinned)."""

    sqlstate = "53000"

    def __init__(self) -> None:
        super().__init__("no empty local buffer available")


class OtherSessionTempRelation(PgError):
    """``cannot access temporary tables of other sessions`` (``RELATION_IS_OTHER_TEMP``)."""

    sqlstate = "0A000"

    def __init__(self, relation: str) -> None:
        self.relation = relation
        super().__init__("cannot access temporary tables of other sessions")


class QueryCanceled(PgError):
    """``canceling statement due to user request`` (a cancel injected at a chosen point)."""

    sqlstate = "57014"

    def __init__(self, where: str = "") -> None:
        suffix = f" ({where})" if where else ""
        super().__init__(f"canceling statement due to user request{suffix}")


class PinLeakError(ReadStreamModelError, AssertionError):
    """Buffers were still pinned at the end of a scan (``CheckForBufferLeaks``)."""

    def __init__(self, backend: str, leaked: dict[int, int]) -> None:
        self.leaked = dict(leaked)
        shown = ", ".join(f"buffer {b} x{n}" for b, n in sorted(leaked.items())[:10])
        more = "" if len(leaked) <= 10 else f" and {len(leaked) - 10} more"
        super().__init__(f"{backend}: buffer pins leaked at end of scan: {shown}{more}")
