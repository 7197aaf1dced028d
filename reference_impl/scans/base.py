"""The scan framework: a registry of scans, a context that records what a scan did, a runner.

Every consumer of blocks in ``reference_impl.scans`` (sequential scans, sample scans, VACUUM,
pgstattuple, ...) is a function registered with :func:`register_scan`. It receives a
:class:`ScanContext` and the relation, plus ``streamed`` (read through a ``ReadStream``, as the
patch or PostgreSQL 18 does) or not (one ``ReadBuffer`` per block, as the code did before it was
streamified), and its own keyword parameters. It reports each page it consumes with
``ctx.visit(block)`` and returns its answer as a dict (rows counted, blocks sampled, tuples
removed, checksums written ...). The answer must be the same for both variants: that is the
property the project's tests check for every scan.

:func:`run_scan` validates the parameters against the scan's declaration, runs it, and returns a
:class:`ScanResult`: the answer, the pages visited, the reads the backend issued meanwhile (from
its read log), hits, simulated time, and the pins left behind. A PostgreSQL error inside the scan
(an I/O error, a cancel) aborts the "transaction" as the server would: the resource owner drops
every pin without ending streams (``Backend.abort``), and the result records the error.
"""

from __future__ import annotations

import inspect
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..buffers.bufmgr import Backend
from ..errors import ModelUsageError, PgError, QueryCanceled
from ..stats import ReadRecord
from ..storage.relation import ForkNumber, Relation

__all__ = [
    "ScanParam",
    "ScanSpec",
    "ScanContext",
    "ScanResult",
    "SCANS",
    "register_scan",
    "run_scan",
    "scan_names",
    "heap_page_live",
    "VARIANTS",
]

VARIANTS = ("streamed", "unstreamed")


@dataclass(frozen=True)
class ScanParam:
    """One parameter of a scan: its name, type, default and allowed range (for CLI and errors)."""

    name: str
    type: type
    default: Any = None
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    # Parameters take int, float, bool or str values; comparisons below apply to numbers only.
    choices: tuple[Any, ...] | None = None

    def check(self, scan: str, value: Any) -> Any:
        if value is None:
            return value
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.type is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ModelUsageError(
                f"scan {scan!r}: parameter {self.name} = {value!r} must be of type {self.type.__name__}"
            )
        if self.choices is not None and value not in self.choices:
            raise ModelUsageError(
                f"scan {scan!r}: parameter {self.name} = {value!r} is invalid: allowed "
                f"{', '.join(map(str, self.choices))}"
            )
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            raise ModelUsageError(f"scan {scan!r}: parameter {self.name} = {value!r} is below {self.minimum}")
        if self.maximum is not None and isinstance(value, (int, float)) and value > self.maximum:
            raise ModelUsageError(f"scan {scan!r}: parameter {self.name} = {value!r} is above {self.maximum}")
        return value


@dataclass(frozen=True)
class ScanSpec:
    """A registered scan: its name, the PostgreSQL function it models, its parameters."""

    name: str
    models: str
    description: str
    function: Callable[..., dict[str, Any]]
    params: tuple[ScanParam, ...] = ()
    variants: tuple[str, ...] = VARIANTS

    def param(self, name: str) -> ScanParam:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


SCANS: dict[str, ScanSpec] = {}


def register_scan(
    name: str,
    *,
    models: str,
    description: str,
    params: tuple[ScanParam, ...] = (),
    variants: tuple[str, ...] = VARIANTS,
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Decorator registering ``fn(ctx, rel, *, streamed, **params) -> dict`` as scan ``name``."""

    def deco(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        if name in SCANS:
            raise ModelUsageError(f"scan {name!r} is registered twice")
        sig = inspect.signature(fn)
        for p in params:
            if p.name not in sig.parameters:
                raise ModelUsageError(
                    f"scan {name!r}: declared parameter {p.name} is not an argument of {fn.__name__}"
                )
        SCANS[name] = ScanSpec(name, models, description, fn, params, variants)
        return fn

    return deco


def scan_names() -> list[str]:
    return sorted(SCANS)


class ScanContext:
    """What a running scan reports to: its backend, the pages it visits, a cancel point."""

    def __init__(
        self,
        backend: Backend,
        *,
        keep_blocks: bool = True,
        cancel_after: int | None = None,
    ) -> None:
        self.backend = backend
        self.instance = backend.instance
        self.settings = backend.settings
        self.costs = backend.costs
        self.blocks: array[int] | None = array("I") if keep_blocks else None
        self.pages = 0
        self.cancel_after = cancel_after
        self.streams: list[Any] = []
        self.notes: dict[str, Any] = {}
        self._page_us = self.costs.page_process_us
        self._tuple_us = self.costs.tuple_process_us

    def visit(self, block: int) -> None:
        """The consumer has a page in hand (counted; cancel point)."""
        self.pages += 1
        if self.blocks is not None:
            self.blocks.append(block)
        if self.cancel_after is not None and self.pages > self.cancel_after:
            raise QueryCanceled(f"after {self.cancel_after} pages")

    def process_page(self, ntuples: int) -> None:
        """Spend the CPU of examining a page with ``ntuples`` tuples."""
        be = self.backend
        d = be._cpu_debt + self._page_us + ntuples * self._tuple_us
        if d >= 1.0:
            whole = int(d)
            be._cpu_debt = d - whole
            clock = be.clock
            if clock._sim is None:
                clock.now += whole
            else:
                clock.advance(whole)
        else:
            be._cpu_debt = d

    def track_stream(self, stream: Any) -> Any:
        """Remember a stream the scan created (its statistics go into the result)."""
        self.streams.append(stream)
        return stream


@dataclass
class ScanResult:
    """What one scan run did (see module docstring)."""

    scan: str
    variant: str
    result: dict[str, Any]
    blocks: list[int] | None
    reads: list[ReadRecord] | None
    read_count: int
    read_blocks: int
    hits: int
    elapsed_us: int
    pinned_after: int
    error: str | None = None
    error_type: str | None = None
    stream_stats: list[dict[str, Any]] = field(default_factory=list)
    io: dict[str, dict[str, int]] = field(default_factory=dict)
    distance_history: list[tuple[int, int]] | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def read_sizes(self) -> list[int]:
        return [r.nblocks for r in self.reads] if self.reads is not None else []

    def summary(self) -> dict[str, Any]:
        return {
            "scan": self.scan,
            "variant": self.variant,
            "reads": self.read_count,
            "blocks_read": self.read_blocks,
            "hits": self.hits,
            "elapsed_us": self.elapsed_us,
            "pinned_after": self.pinned_after,
            "error": self.error,
        }


def heap_page_live(rel: Relation, block: int) -> int:
    """Visible tuples on a heap page (1 when the relation has no content model)."""
    if rel.content is None:
        return 1
    page = rel.content.page(ForkNumber.MAIN, block)
    return int(page.nlive)


def _io_totals(backend: Backend) -> tuple[int, int, int, dict[str, dict[str, int]]]:
    st = backend.stats
    return st.reads, st.shared_blks_read, st.hits, st.io_dict()


def run_scan(
    name: str,
    backend: Backend,
    rel: Relation,
    *,
    variant: str = "streamed",
    cancel_after: int | None = None,
    keep_blocks: bool = True,
    **params: Any,
) -> ScanResult:
    """Run scan ``name`` on ``rel`` with ``backend``; returns what it did (errors included)."""
    spec = SCANS.get(name)
    if spec is None:
        raise ModelUsageError(f"unknown scan {name!r}: available {', '.join(scan_names())}")
    if variant not in spec.variants:
        raise ModelUsageError(f"scan {name!r} has no {variant!r} variant: allowed {', '.join(spec.variants)}")
    known = {p.name: p for p in spec.params}
    for key in params:
        if key not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise ModelUsageError(f"scan {name!r} has no parameter {key!r}: allowed {allowed}")
    checked = {k: known[k].check(name, v) for k, v in params.items()}
    ctx = ScanContext(backend, keep_blocks=keep_blocks, cancel_after=cancel_after)
    log = backend.stats.read_log
    log_start = len(log) if log is not None else 0
    r0, b0, h0, io0 = _io_totals(backend)
    t0 = backend.clock.now
    error: PgError | None = None
    result: dict[str, Any] = {}
    try:
        result = spec.function(ctx, rel, streamed=(variant == "streamed"), **checked)
    except PgError as exc:
        error = exc
        backend.abort()
    r1, b1, h1, io1 = _io_totals(backend)
    io = {
        ctx_name: {k: io1[ctx_name][k] - io0[ctx_name][k] for k in io1[ctx_name]}
        for ctx_name in io1
        if any(io1[ctx_name][k] != io0[ctx_name][k] for k in io1[ctx_name])
    }
    return ScanResult(
        scan=name,
        variant=variant,
        result=result,
        blocks=list(ctx.blocks) if ctx.blocks is not None else None,
        reads=log[log_start:] if log is not None else None,
        read_count=r1 - r0,
        read_blocks=b1 - b0,
        hits=h1 - h0,
        elapsed_us=backend.clock.now - t0,
        pinned_after=backend.refs.distinct(),
        error=None if error is None else str(error),
        error_type=None if error is None else type(error).__name__,
        stream_stats=[s.stats.as_dict() for s in ctx.streams],
        io=io,
        distance_history=ctx.streams[0].stats.distance_history if ctx.streams else None,
        notes=ctx.notes,
    )
