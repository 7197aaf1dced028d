"""Faults and the read interposer: the preloaded library that delays, fails, shortens, holds or
damages a server's reads (``interposer``, C sources in ``interpose/``), another backend's read
held in progress (``foreign_io``) and a stream test's fault plan carried out on a server
(``stream_faults``). The interposer's public names are importable from here."""

from .interposer import (
    ACTIONS,
    URING_NO_DELAY,
    ControlArea,
    FaultInjector,
    IoRule,
    Latency,
    LedgerEntry,
    RelationTarget,
    interposer_library,
    io_uring_problem,
    rule_for_device,
    rule_for_fault,
    unsupported_fault,
)

__all__ = [
    "ACTIONS",
    "ControlArea",
    "FaultInjector",
    "IoRule",
    "Latency",
    "LedgerEntry",
    "URING_NO_DELAY",
    "RelationTarget",
    "interposer_library",
    "io_uring_problem",
    "rule_for_device",
    "rule_for_fault",
    "unsupported_fault",
]
