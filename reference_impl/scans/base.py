"""The scan framework: a registry of scans, a context that records what a scan did, a runner.

Every consumer of blocks in ``reference_impl.scans`` (sequential scans, sample scans, VACUUM,
pgstattuple, ...) is a function registered with :func:`register_scan`. It receives a
:class:`ScanContext` and the relation, plus ``streamed`` (read through a ``ReadStream``, as the
patch or PostgreSQL 18 does) or not (one ``ReadBuffer`` per block, as the code did before it was
streamified), and its own keyword parameters. It reports each page it consumes with
``ctx.visit(block)`` and returns its answer as a dict (rows counted, blocks sampled, tuples
removed, checksums written ...). The answer must be the same for both variants: that is the
property the project's tests check for every scan.

Versions. A scan runs the code of the instance's version (``Settings.version``, see
:mod:`reference_impl.versions`): where a version's C differs, the scan branches on
``ctx.version_at_least(...)`` with the function named. ``streamed_since`` says which variant a
version's own source runs: the first version whose C reads the scan's blocks through a read
stream (``"18"``: every version; ``None``: none, the streamed variant is a proposal). On an older
version the streamed variant is that newer code run on the older version's stream, the way the
patches were measured before they landed; :func:`native_variant` names the variant a version
runs, which is what a server of that version is compared with.

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
from ..versions import VERSIONS

__all__ = [
    "ScanParam",
    "ScanSpec",
    "ScanContext",
    "ScanResult",
    "SCANS",
    "register_scan",
    "run_scan",
    "scan_names",
    "native_variant",
    "heap_page_live",
    "VARIANTS",
    "EXPLAIN_IO_PARAM",
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
    #: The first version whose source streams this scan (``None``: no version does).
    streamed_since: str | None = None

    def native_variant(self, version: str) -> str:
        """The variant version ``version``'s own source runs."""
        since = self.streamed_since
        if (
            since is not None
            and "streamed" in self.variants
            and VERSIONS.index(version) >= VERSIONS.index(since)
        ):
            return "streamed"
        return "unstreamed" if "unstreamed" in self.variants else self.variants[0]

    def param(self, name: str) -> ScanParam:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


SCANS: dict[str, ScanSpec] = {}

#: ``EXPLAIN (ANALYZE, IO)``: the executor's ``INSTRUMENT_IO`` (PostgreSQL 19 on), taken by the
#: scans whose node passes ``SO_SCAN_INSTRUMENT`` to ``table_beginscan*`` (``nodeSeqscan.c``,
#: ``nodeTidrangescan.c``, ``nodeBitmapHeapscan.c``).
EXPLAIN_IO_PARAM = ScanParam(
    "explain_io",
    bool,
    False,
    "run under EXPLAIN (ANALYZE, IO): the scan's read stream keeps IOStats (PostgreSQL 19 on)",
)


def register_scan(
    name: str,
    *,
    models: str,
    description: str,
    params: tuple[ScanParam, ...] = (),
    variants: tuple[str, ...] = VARIANTS,
    streamed_since: str | None = None,
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Decorator registering ``fn(ctx, rel, *, streamed, **params) -> dict`` as scan ``name``;
    ``streamed_since`` is the first version whose source streams it (see the module docstring)."""

    def deco(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        if name in SCANS:
            raise ModelUsageError(f"scan {name!r} is registered twice")
        if streamed_since is not None and (streamed_since not in VERSIONS or "streamed" not in variants):
            raise ModelUsageError(
                f"scan {name!r}: streamed_since = {streamed_since!r} is invalid: allowed None or one of "
                f"{', '.join(VERSIONS)} for a scan with a streamed variant"
            )
        sig = inspect.signature(fn)
        for p in params:
            if p.name not in sig.parameters:
                raise ModelUsageError(
                    f"scan {name!r}: declared parameter {p.name} is not an argument of {fn.__name__}"
                )
        SCANS[name] = ScanSpec(name, models, description, fn, params, variants, streamed_since)
        return fn

    return deco


def scan_names() -> list[str]:
    return sorted(SCANS)


def native_variant(name: str, version: str) -> str:
    """The variant of scan ``name`` that version ``version``'s source runs (``"18"``, ``"19"``,
    ``"20devel"`` or ``"master"``)."""
    from ..versions import canonical_version

    spec = SCANS.get(name)
    if spec is None:
        raise ModelUsageError(f"unknown scan {name!r}: available {', '.join(scan_names())}")
    return spec.native_variant(canonical_version(version))


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
        #: The version whose C the scan follows (``Settings.version``).
        self.version: str = backend.settings.version
        self.costs = backend.costs
        self.blocks: array[int] | None = array("I") if keep_blocks else None
        self.pages = 0
        self.cancel_after = cancel_after
        self.streams: list[Any] = []
        self.notes: dict[str, Any] = {}
        #: The ``IOStats`` an instrumented scan's stream fills (``instrument_stream``).
        self.io_stats: Any = None
        #: Index relations whose metapage this backend holds in its relcache (``rd_amcache``).
        self.amcache: set[str] = set()
        #: What an index AM's calls of one command leave for the next (pages a bulk delete emptied).
        self.amstate: dict[str, Any] = {}
        self._page_us = self.costs.page_process_us
        self._tuple_us = self.costs.tuple_process_us

    def version_at_least(self, version: str) -> bool:
        """Does the instance's version include the code of ``version`` (``"19"``: 19 and 20devel)?"""
        return VERSIONS.index(self.version) >= VERSIONS.index(version)

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

    def check_explain_io(self, scan: str, explain_io: bool) -> bool:
        """Refuse ``explain_io`` on a version without ``EXPLAIN (IO)`` (18); returns it."""
        if explain_io and not self.version_at_least("19"):
            raise ModelUsageError(
                f"scan {scan!r}: parameter explain_io = True is invalid with version {self.version}: "
                "EXPLAIN (IO) and read_stream_enable_stats exist from PostgreSQL 19"
            )
        return explain_io

    def instrument_stream(self, stream: Any) -> None:
        """``heap_beginscan`` with ``SO_SCAN_INSTRUMENT`` and a stream (19):
        ``read_stream_enable_stats(scan->rs_read_stream, &scan->rs_base.rs_instrument->io)``.

        The counters go to ``ScanResult.io_stats`` (what ``EXPLAIN (IO)`` prints for the node). A
        stream begun again for the same scan counts into the same ``IOStats``.
        """
        if self.io_stats is None:
            self.io_stats = stream.enable_stats()
        else:
            stream.enable_stats(self.io_stats)


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
    #: ``IOStats`` of an instrumented scan (``explain_io``), as ``EXPLAIN (IO)`` reads them.
    io_stats: dict[str, int] | None = None

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
        io_stats=None if ctx.io_stats is None else ctx.io_stats.as_dict(),
    )
