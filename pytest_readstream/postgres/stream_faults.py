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
consumer call that raised it.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import psycopg

from .faults import rule_for_fault, unsupported_fault

__all__ = ["StreamFaults", "io_method_problem", "read_error"]

_READ_ERROR = re.compile(r"could not read blocks? (\d+)(?:\.\.(\d+))? in file")


def io_method_problem(io_method: str | None) -> str | None:
    """Why faults cannot be injected under ``io_method`` (``None``: they can).

    Under ``io_uring`` the reads are submitted through the kernel's ring (``method_io_uring.c``),
    not ``pread``/``preadv``, so the interposer never sees them; only a build with liburing
    (``pgbuild``) gets that far.
    """
    if io_method == "io_uring":
        return (
            "io_method=io_uring reads through the kernel's ring, not pread/preadv, so the read "
            "interposer cannot act on them (faults run under sync and worker)"
        )
    return None


def read_error(err: psycopg.Error, relation: str) -> Exception | None:
    """The model's ``ReadIOError`` for a server ``EIO`` error (``None`` for any other error)."""
    from reference_impl import ReadIOError

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
        self._kinds: list[tuple[Any, str]] = []
        self._seen = 0

    @property
    def active(self) -> bool:
        return bool(self._installed)

    @property
    def plan(self) -> Any:
        return self._plan

    def paused(self) -> Any:
        """A context in which the rules (if any) let every read through."""
        if not self._installed:
            return contextlib.nullcontext()
        return self._impl.server.faults.paused()

    def why_not(self, plan: Any) -> str | None:
        """Why ``plan``'s faults cannot be injected on the server (``None``: they can)."""
        if "fault-injection" not in self._impl.capabilities:
            return (
                "the server offers no fault injection (capability 'fault-injection'): "
                f"{self._impl.fault_injection_unavailable}"
            )
        for fault in plan.faults:
            why = unsupported_fault(fault)
            if why is not None:
                return f"{fault.kind} fault: {why}"
            if int(fault.fork) != 0:
                return (
                    f"{fault.kind} fault on fork {int(fault.fork)}: the server tables mirror main forks only"
                )
        return None

    def install(self, plan: Any, mirrored: dict[str, str]) -> None:
        """Rules for the faults of ``plan`` on the mirrored relations (model name -> server table).

        Installed again only when a relation with faults was mirrored since (the counters then
        start afresh, as a new rule set does).
        """
        wanted: list[tuple[int, str]] = []
        for i, fault in enumerate(plan.faults):
            names = [fault.relation] if fault.relation is not None else sorted(mirrored)
            wanted.extend((i, mirrored[n]) for n in names if n in mirrored)
        key = tuple(wanted)
        if plan is self._plan and key == self._installed:
            return
        injector = self._impl.server.faults
        dbname = self._impl.database.name
        targets = {table: injector.target(dbname, table) for table in {t for _, t in wanted}}
        rules = [rule_for_fault(plan.faults[i], targets[table]) for i, table in wanted]
        injector.apply(*rules)
        reverse = {table: name for name, table in mirrored.items()}
        self._kinds = [(plan.faults[i], reverse[table]) for i, table in wanted]
        self._plan, self._installed, self._seen = plan, key, 0

    def sync_ledger(self) -> list[Any]:
        """Append what fired since the last call to the plan's ledger, in the model's terms;
        returns every request a rule matched since the last call (``faults.LedgerEntry``)."""
        if not self._installed:
            return []
        entries = self._impl.server.faults.ledger()
        new = entries[self._seen :]
        for e in new:
            if not e.fired:
                continue
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

    def clear(self) -> None:
        """Remove the rules (the test's transaction ended)."""
        if self._installed:
            self.sync_ledger()
            self._impl.server.faults.clear()
        self._plan, self._installed, self._kinds, self._seen = None, (), [], 0
