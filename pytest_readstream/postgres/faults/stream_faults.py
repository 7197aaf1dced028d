"""The harness's ``FaultPlan`` on a server's stream: interposer rules for the mirrored tables.

A conformance test puts its faults in the model instance's plan (``readstream_faults``); a remote
stream (``remote_stream``) runs on server tables that mirror the test's relations. This turns each
storage fault of a mirrored relation into a rule of the read interposer (``faults``) on that
table's file, as the ``scans`` path does (``faults.rule_for_fault``), installs them once the
cache state is mirrored (its ``pg_prewarm`` must not trip them), writes what fired into the plan's
own ledger in the model's terms, and keeps them, with their counters, for as long as the test's
plan is the same one (a fault that fired ``times`` times stays spent across the test's aborts and
later streams, as in the model); a stream of another test removes them first, so a table reused
by a later test never carries an old rule. While the harness mirrors a test's cache state and pins
(``pg_prewarm``, ``rsp_pin``) the rules are paused: those reads are the harness's, not the test's.

A read that fails inside the probe call that started it takes that call's trace with it (the
call never returns its report); the ledger still has the request, from which the failed read's
start is put back into the observation.

The server's ``could not read blocks a..b`` error becomes the model's ``ReadIOError`` for the
consumer call that raised it, and its ``invalid page in block n`` (a page the interposer damaged,
failing verification) the model's ``ChecksumFailure``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from typing import Any

import psycopg

from .interposer import (
    URING_NO_DELAY,
    IoRule,
    Latency,
    rule_for_fault,
    unsupported_fault,
)

__all__ = ["URING_KINDS", "StreamFaults", "io_method_problem", "read_error"]

_READ_ERROR = re.compile(r"could not read blocks? (\d+)(?:\.\.(\d+))? in file")
# buffer_readv_report (bufmgr.c): one page, or several with the first named in the detail.
_INVALID_PAGE = re.compile(r"invalid page in block (\d+) of relation")
_FIRST_INVALID = re.compile(r"Block (\d+) held the first invalid page")


#: The model's fault kinds the interposer injects under io_uring (at submission and completion).
URING_KINDS = ("eio", "short_read", "checksum")


def io_method_problem(io_method: str | None, kinds: Iterable[str] = ()) -> str | None:
    """Why faults of ``kinds`` cannot be injected under ``io_method`` (``None``: they can).

    Under ``io_uring`` the kernel performs the read (``method_io_uring.c``); the interposer acts
    on its submission and completion (``io_uring_submit``, ``io_uring_peek_batch_cqe``), which is
    enough for ``eio``, ``short_read`` and ``checksum`` but not for a ``latency`` fault.
    """
    if io_method != "io_uring":
        return None
    for kind in kinds:
        if kind not in URING_KINDS:
            return f"{kind} fault: {URING_NO_DELAY}"
    return None


def read_error(err: psycopg.Error, relation: str) -> Exception | None:
    """The model's ``ReadIOError`` for a server ``EIO`` error, its ``ChecksumFailure`` for a page
    that failed verification (``None`` for any other error)."""
    from reference_impl import ChecksumFailure, ReadIOError

    if isinstance(err, psycopg.errors.DataCorrupted):
        one = _INVALID_PAGE.search(str(err))
        several = _FIRST_INVALID.search(err.diag.message_detail or "")
        found = one or several
        if found is None:
            return None
        return ChecksumFailure(relation, "main", int(found.group(1)))
    if not isinstance(err, psycopg.errors.IoError):
        return None
    match = _READ_ERROR.search(str(err))
    if match is None:
        return None
    first = int(match.group(1))
    last = int(match.group(2) or first)
    return ReadIOError(relation, "main", first, last - first + 1)


class StreamFaults:
    """The interposer rules carrying out one test's ``FaultPlan`` (the model's storage faults below
    ``md.c``) on the server's stream (``read_stream.c`` through the probe); see the module docstring."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl
        self._plan: Any = None
        self._installed: tuple[tuple[int, str], ...] = ()
        self._holding = False  # rules holding another backend's reads are installed
        self._kinds: list[tuple[Any, str]] = []
        self._seen = 0

    @property
    def active(self) -> bool:
        return bool(self._installed) or self._holding

    @property
    def plan(self) -> Any:
        return self._plan

    def paused(self) -> Any:
        """A context in which the rules (if any) let every read through."""
        if not self.active:
            return contextlib.nullcontext()
        return self._impl.server.faults.paused()

    def why_not(self, plan: Any, settings: Any) -> str | None:
        """Why ``plan``'s faults cannot be injected on the server under ``settings`` (``None``: they can)."""
        if "fault-injection" not in self._impl.capabilities:
            return (
                "the server offers no fault injection (capability 'fault-injection'): "
                f"{self._impl.fault_injection_unavailable}"
            )
        for fault in plan.faults:
            why = unsupported_fault(fault, data_checksums=self._impl.data_checksums)
            if why is not None:
                return f"{fault.kind} fault: {why}"
            if int(fault.fork) != 0:
                return (
                    f"{fault.kind} fault on fork {int(fault.fork)}: the server tables mirror main forks only"
                )
        return None

    def why_not_foreign(self, settings: Any) -> str | None:
        """Why another backend's read in progress cannot be staged (``foreign_io``; ``None``: it can)."""
        if "fault-injection" not in self._impl.capabilities:
            return (
                "another backend's I/O in progress is a read the interposer holds, and the server "
                f"offers no fault injection (capability 'fault-injection'): {self._impl.fault_injection_unavailable}"
            )
        return None

    @staticmethod
    def why_not_io_method(settings: Any, *, kinds: Iterable[str], held: bool) -> str | None:
        """Why the interposer cannot inject faults of ``kinds`` or hold another backend's read
        (``held``) under ``settings.io_method`` (``None``: it can).

        Asked only after the server took the settings, so that a build without io_uring gives
        that reason first (it is the one a user can act on)."""
        if held and settings.io_method == "io_uring":
            return f"another backend's I/O in progress is a read the interposer holds, and {URING_NO_DELAY}"
        return io_method_problem(settings.io_method, kinds)

    def install(
        self, plan: Any, mirrored: dict[str, str], held: tuple[tuple[str, int, int, bool], ...] = ()
    ) -> int:
        """Rules for the faults of ``plan`` on the mirrored relations (model name -> server table),
        then one ``hang`` (``hang_eio`` when it fails) rule for each of the other backend's reads
        in ``held`` (table, first block, nblocks, fails), then, for each table of those, a rule
        that only records every request of the table in the ledger (a delay of 0: the reads of
        the stream that meets another backend's read are taken from there, see
        ``ServerObservation.requests``); returns the index of the first ``hang`` rule.

        Installed again only when a relation with faults was mirrored since, or other reads are
        to be held (the counters then start afresh, as a new rule set does).
        """
        wanted: list[tuple[int, str]] = []
        for i, fault in enumerate(plan.faults):
            names = [fault.relation] if fault.relation is not None else sorted(mirrored)
            wanted.extend((i, mirrored[n]) for n in names if n in mirrored)
        key = tuple(wanted)
        if plan is self._plan and key == self._installed and not held:
            return len(wanted)
        injector = self._impl.server.faults
        dbname = self._impl.database.name
        tables = {t for _, t in wanted} | {h[0] for h in held}
        targets = {table: injector.target(dbname, table) for table in tables}
        rules = [rule_for_fault(plan.faults[i], targets[table]) for i, table in wanted]
        rules += [
            IoRule(targets[table], "hang_eio" if fails else "hang", blocks=(first, first + n - 1), times=1)
            for table, first, n, fails in held
        ]
        rules += [
            IoRule(targets[table], "delay", latency=Latency("fixed", 0.0))
            for table in sorted({h[0] for h in held})
        ]
        injector.apply(*rules)
        reverse = {table: name for name, table in mirrored.items()}
        self._kinds = [(plan.faults[i], reverse[table]) for i, table in wanted]
        self._plan, self._installed, self._seen = plan, key, 0
        self._holding = bool(held)
        return len(wanted)

    def sync_ledger(self) -> list[Any]:
        """Append what fired since the last call to the plan's ledger, in the model's terms;
        returns every request a rule matched since the last call (``faults.LedgerEntry``)."""
        if not self.active:
            return []
        entries = self._impl.server.faults.ledger()
        new = entries[self._seen :]
        for e in new:
            if not e.fired or e.rule >= len(self._kinds):
                continue  # the other backend's held reads are not the plan's faults
            fault, relation = self._kinds[e.rule]
            self._plan.ledger.append(
                {
                    "fault": fault.kind,
                    "index": self._plan.faults.index(fault),
                    "relation": relation,
                    "fork": int(fault.fork),
                    "read_start": e.first_block,
                    "read_nblocks": e.nblocks,
                    "nth_read": None,
                    "at_us": 0,
                    "pid": e.pid,
                }
            )
        self._seen = len(entries)
        return new

    def damaged(self, entries: list[Any]) -> set[int]:
        """The blocks whose pages ``corrupt`` rules damaged in ``entries`` (``faults.LedgerEntry``)."""
        out: set[int] = set()
        for e in entries:
            if e.fired and e.action == "corrupt" and 0 <= e.rule < len(self._kinds):
                block = int(self._kinds[e.rule][0].block)
                if e.first_block <= block < e.first_block + e.nblocks:
                    out.add(block)
        return out

    def clear(self) -> None:
        """Remove the rules (the test's transaction ended)."""
        if self.active:
            self.sync_ledger()
            self._impl.server.faults.clear()
        self._plan, self._installed, self._kinds, self._seen = None, (), [], 0
        self._holding = False
