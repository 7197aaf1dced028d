"""A scrollable cursor over a sequential scan: ``DECLARE c SCROLL CURSOR FOR SELECT 1 FROM t``.

Models the portal (``pquery.c``: ``PortalRunFetch``/``DoPortalRunFetch``/``PortalRunSelect``,
``DoPortalRewind``), the executor (``execMain.c``: ``ExecutePlan`` stops after the requested
number of tuples; ``ExecReScanSeqScan`` rewinds) and the heap scan it drives in either direction
(``heapam.c``: ``heap_getnextslot`` → ``heapgettup_pagemode`` → ``heap_fetch_next_buffer``; see
:mod:`.heapscan`). What the server does between commands is what matters for reads and pins:

* the scan is created by the first fetch that runs the executor (``SeqNext``), not by DECLARE;
* ``FETCH FORWARD`` at the end and ``FETCH BACKWARD`` at the start run no executor at all
  (the portal's ``atEnd``/``atStart``); ``FETCH ABSOLUTE n`` rewinds (``heap_rescan``: the stream
  is reset, the ramp starts again) when the target is nearer the start than half the current
  position, otherwise it moves relative to where it is; ``FETCH ABSOLUTE -n`` runs to the end
  first; ``FETCH 0`` steps back one row and forward again;
* between commands the backend holds the stream's look-ahead pins and the slot's page;
* ``CLOSE`` and ``COMMIT`` end the executor: ``heap_endscan`` ends the stream (its drain still
  reads a pending read) while the slot pins its page, then the slot is cleared; ``ROLLBACK``
  aborts: the portal is marked failed, nothing is drained, the resource owner drops every pin.

``commands`` is a ``;``-separated script of ``FETCH``/``MOVE`` commands with PostgreSQL's
directions (``NEXT``, ``PRIOR``, ``FIRST``, ``LAST``, ``ABSOLUTE n``, ``RELATIVE n``, ``n``,
``ALL``, ``FORWARD [n|ALL]``, ``BACKWARD [n|ALL]``) ending with ``CLOSE``, ``COMMIT`` or
``ROLLBACK``. After each command the reads the backend issued are waited for (an observer on
the server polls ``pg_aios`` the same way); the answer lists, per command, the rows it returned
(``MOVE``: the count its tag reports) and the pages of the table pinned afterwards (valid pages,
as ``pg_buffercache`` shows them; under ``io_method=sync`` a staged look-ahead read has not run,
so its pages are not valid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..buffers.pool import BM_VALID
from ..errors import ModelUsageError
from ..storage.relation import ForkNumber, Relation
from .base import ScanContext, ScanParam, register_scan
from .heapscan import BACKWARD, FORWARD, HeapScan

__all__ = ["CursorCommand", "FETCH_ALL", "parse_commands", "cursor"]

#: ``FETCH_ALL`` (``parsenodes.h``: ``LONG_MAX``).
FETCH_ALL = 2**63 - 1

_ENDS = ("CLOSE", "COMMIT", "ROLLBACK")
_GRAMMAR = (
    "allowed FETCH or MOVE with NEXT, PRIOR, FIRST, LAST, ABSOLUTE n, RELATIVE n, n, ALL, "
    "FORWARD [n|ALL] or BACKWARD [n|ALL]; then CLOSE, COMMIT or ROLLBACK last"
)


@dataclass(frozen=True)
class CursorCommand:
    """One command of a cursor script: ``kind`` FETCH/MOVE/CLOSE/COMMIT/ROLLBACK; for FETCH and
    MOVE the ``FetchDirection`` (``forward``, ``backward``, ``absolute``, ``relative``) and count."""

    kind: str
    direction: str = "forward"
    count: int = 1
    text: str = ""


def _count(word: str, text: str) -> int:
    try:
        return int(word)
    except ValueError:
        raise ModelUsageError(f"scan 'cursor': command {text!r} has count {word!r}, not an integer") from None


def _parse_one(text: str) -> CursorCommand:
    words = text.upper().split()
    if not words:
        raise ModelUsageError(f"scan 'cursor': an empty command in the script: {_GRAMMAR}")
    kind, rest = words[0], words[1:]
    if kind in _ENDS:
        if rest:
            raise ModelUsageError(f"scan 'cursor': command {text!r} is invalid: {_GRAMMAR}")
        return CursorCommand(kind, text=text)
    if kind not in ("FETCH", "MOVE"):
        raise ModelUsageError(f"scan 'cursor': command {text!r} is invalid: {_GRAMMAR}")
    # gram.y's fetch_args: the direction words, each with its count.
    if not rest or rest == ["NEXT"]:
        return CursorCommand(kind, "forward", 1, text)
    if rest == ["PRIOR"]:
        return CursorCommand(kind, "backward", 1, text)
    if rest == ["FIRST"]:
        return CursorCommand(kind, "absolute", 1, text)
    if rest == ["LAST"]:
        return CursorCommand(kind, "absolute", -1, text)
    if rest == ["ALL"]:
        return CursorCommand(kind, "forward", FETCH_ALL, text)
    if rest[0] in ("FORWARD", "BACKWARD") and len(rest) <= 2:
        direction = rest[0].lower()
        if len(rest) == 1:
            return CursorCommand(kind, direction, 1, text)
        n = FETCH_ALL if rest[1] == "ALL" else _count(rest[1], text)
        if n < 0:  # FORWARD -n is BACKWARD n (gram.y)
            direction, n = ("backward" if direction == "forward" else "forward"), -n
        return CursorCommand(kind, direction, n, text)
    if rest[0] in ("ABSOLUTE", "RELATIVE") and len(rest) == 2:
        return CursorCommand(kind, rest[0].lower(), _count(rest[1], text), text)
    if len(rest) == 1:
        n = _count(rest[0], text)
        return CursorCommand(kind, "forward" if n >= 0 else "backward", abs(n), text)
    raise ModelUsageError(f"scan 'cursor': command {text!r} is invalid: {_GRAMMAR}")


def parse_commands(script: str) -> list[CursorCommand]:
    """The commands of a ``;``-separated script; one clear error for anything else."""
    parts = [p.strip() for p in script.split(";")]
    if parts and parts[-1] == "":
        parts.pop()
    commands = [_parse_one(p) for p in parts]
    if not commands or commands[-1].kind not in _ENDS:
        raise ModelUsageError(f"scan 'cursor': commands = {script!r} must end the cursor: {_GRAMMAR}")
    for c in commands[:-1]:
        if c.kind in _ENDS:
            raise ModelUsageError(
                f"scan 'cursor': commands = {script!r} has {c.kind} before the end: {_GRAMMAR}"
            )
    return commands


class _Portal:
    """A scrollable cursor's portal over ``SELECT 1 FROM t`` (``PortalData``: ``atStart``,
    ``atEnd``, ``portalPos``) with its sequential scan (``SeqScanState``)."""

    def __init__(self, ctx: ScanContext, rel: Relation, streamed: bool) -> None:
        self.ctx = ctx
        self.rel = rel
        self.streamed = streamed
        self.at_start = True
        self.at_end = False
        self.pos = 0
        self.scan: HeapScan | None = None

    def _on_page(self, block: int) -> None:
        ctx = self.ctx
        ctx.visit(block)
        assert self.scan is not None
        ctx.process_page(self.scan.ntuples)

    def _executor_run(self, direction: int, count: int) -> int:
        """``ExecutorRun`` → ``ExecutePlan``: up to ``count`` tuples (0: all) in ``direction``."""
        if direction == 0:
            return 0
        if self.scan is None:
            # SeqNext begins the scan on its first call.
            self.scan = HeapScan(self.ctx, self.rel, streamed=self.streamed, sets_hints=True, read_only=True)
        n = 0
        while self.scan.getnext(direction, self._on_page):
            n += 1
            if count and n == count:
                break
        return n

    def run_select(self, forward: bool, count: int) -> int:
        """``PortalRunSelect``."""
        if forward:
            direction = 0 if self.at_end or count <= 0 else FORWARD
            if direction == 0:
                count = 0
            if count == FETCH_ALL:
                count = 0
            n = self._executor_run(direction, count)
            if direction:
                if n > 0:
                    self.at_start = False
                if count == 0 or n < count:
                    self.at_end = True
                self.pos += n
            return n
        direction = 0 if self.at_start or count <= 0 else BACKWARD
        if direction == 0:
            count = 0
        if count == FETCH_ALL:
            count = 0
        n = self._executor_run(direction, count)
        if direction:
            if n > 0 and self.at_end:
                self.at_end = False
                self.pos += 1
            if count == 0 or n < count:
                self.at_start = True
                self.pos = 0
            else:
                self.pos -= n
        return n

    def rewind(self) -> None:
        """``DoPortalRewind`` → ``ExecutorRewind`` → ``ExecReScanSeqScan``."""
        if self.scan is not None:
            self.scan.rescan()
            self.scan.clear_slot()
        self.at_start = True
        self.at_end = False
        self.pos = 0

    def run_fetch(self, direction: str, count: int, is_move: bool) -> int:
        """``DoPortalRunFetch``."""
        if direction == "absolute":
            if count > 0:
                if count - 1 <= self.pos // 2:
                    self.rewind()
                    if count > 1:
                        self.run_select(True, count - 1)
                else:
                    pos = self.pos + (1 if self.at_end else 0)
                    if count <= pos:
                        self.run_select(False, pos - count + 1)
                    elif count > pos + 1:
                        self.run_select(True, count - pos - 1)
                return self.run_select(True, 1)
            if count < 0:
                self.run_select(True, FETCH_ALL)
                if count < -1:
                    self.run_select(False, -count - 1)
                return self.run_select(False, 1)
            self.rewind()
            return self.run_select(True, 0)
        if direction == "relative":
            if count > 0:
                if count > 1:
                    self.run_select(True, count - 1)
                return self.run_select(True, 1)
            if count < 0:
                if count < -1:
                    self.run_select(False, -count - 1)
                return self.run_select(False, 1)
            direction = "forward"
        forward = direction == "forward"
        if count == 0:
            on_row = not self.at_start and not self.at_end
            if is_move:
                return 1 if on_row else 0
            if on_row:
                self.run_select(False, 1)
                count = 1
                forward = True
        if not forward and count == FETCH_ALL and is_move:
            # MOVE BACKWARD ALL is a rewind.
            result = self.pos
            if result > 0 and not self.at_end:
                result -= 1
            self.rewind()
            return result
        return self.run_select(forward, count)

    def close(self) -> None:
        """``PortalCleanup`` → ``ExecutorEnd``: ``heap_endscan`` while the slot still pins its
        page, then the tuple table is reset."""
        if self.scan is not None:
            self.scan.end()
            self.scan.clear_slot()
            self.scan = None


def _visible_pins(ctx: ScanContext, rel: Relation) -> int:
    """Pages of ``rel`` this backend pins, as ``pg_buffercache`` shows them once its reads have
    completed: valid pages only (a staged ``sync`` read has not run, so its pages are not).

    Only the backend's own pins count: after a ROLLBACK a read still in flight holds its
    buffers until it completes, and then nothing is pinned.
    """
    be = ctx.backend
    pool = be.pool
    pool.wait_for_owner(be.id)
    base = rel.tag_base(ForkNumber.MAIN)
    return sum(
        1
        for buf in be.refs.pinned()
        if base <= pool.tag[buf] < base + (1 << 32) and pool.flags[buf] & BM_VALID
    )


@register_scan(
    "cursor",
    streamed_since="18",
    models="PortalRunFetch (pquery.c) → ExecutorRun → SeqNext → heap_getnextslot (heapam.c), either direction",
    description="a SCROLL cursor over SELECT 1 FROM t driven by FETCH/MOVE commands, then CLOSE/COMMIT/ROLLBACK",
    params=(
        ScanParam(
            "commands",
            str,
            "FETCH ALL; CLOSE",
            "';'-separated FETCH/MOVE commands (NEXT, PRIOR, FIRST, LAST, ABSOLUTE n, RELATIVE n, n, ALL, "
            "FORWARD [n|ALL], BACKWARD [n|ALL]) ending with CLOSE, COMMIT or ROLLBACK",
        ),
    ),
)
def cursor(
    ctx: ScanContext, rel: Relation, *, streamed: bool, commands: str = "FETCH ALL; CLOSE"
) -> dict[str, Any]:
    script = parse_commands(commands)
    portal = _Portal(ctx, rel, streamed)
    rows_per_command: list[int] = []
    pins_per_command: list[int] = []
    fetched = 0
    for c in script:
        n = 0
        if c.kind in ("FETCH", "MOVE"):
            n = portal.run_fetch(c.direction, c.count, c.kind == "MOVE")
            if c.kind == "FETCH":
                fetched += n
        elif c.kind == "ROLLBACK":
            # The portal is marked failed: no ExecutorEnd, no drain; the resource owner releases.
            ctx.backend.abort()
            portal.scan = None
        else:
            portal.close()
        rows_per_command.append(n)
        pins_per_command.append(_visible_pins(ctx, rel))
    return {
        "rows": fetched,
        "rows_per_command": rows_per_command,
        "pins_per_command": pins_per_command,
        "commands": [c.text for c in script],
    }
