"""The implementation protocol: what an implementation under test must provide.

pytest-readstream runs one conformance suite against many implementations, as array-api-tests
does. An implementation is any object with a ``name``, a set of ``capabilities`` and the methods
those capabilities promise:

``stream-api``
    ``begin_stream(backend, rel, callback, private=None, *, fork, flags, strategy,
    per_buffer_data) -> stream``. The harness creates the simulated instance and hands the
    implementation a :class:`reference_impl.Backend`, the **harness's buffer manager**. The stream
    must do all its buffer work through it, exactly as ``read_stream.c`` goes through
    ``bufmgr.c``; that is how pins and reads are observed from outside the stream. The buffer
    manager API a stream may use:

    * ``backend.settings`` — the GUCs (``effective_io_combine_limit``,
      ``effective_io_concurrency``, ``maintenance_io_concurrency``, ``io_method``, ...);
    * ``backend.get_pin_limit()``, ``backend.get_additional_pin_limit()``;
    * ``reference_impl.get_access_strategy_pin_limit(strategy, backend.settings.nbuffers)``;
    * ``backend.start_read_buffers(op, buffers, index, blocknum, nblocks, flags)`` →
      ``(accepted, need_wait)``, with ``op = reference_impl.ReadBuffersOperation(rel, fork,
      strategy)``; ``backend.start_read_buffer(op, blocknum, flags)`` → ``(buffer, need_wait)``;
      ``backend.wait_read_buffers(op)``;
    * ``backend.release_buffer(buffer)``; ``backend.storage.direct_io``; ``backend.io_method.name``.

    The callback is called as ``callback(stream, private)`` and returns a block number or
    ``reference_impl.InvalidBlockNumber``; with ``per_buffer_data=True`` it returns
    ``(block, data)`` tuples, and the stream hands ``data`` back with the buffer.

    The returned stream has ``next_buffer() -> int`` (``INVALID_BUFFER`` = -1 at the end; the
    caller owns and releases the pin), ``reset()``, ``end()`` and, with per-buffer data,
    ``next_buffer_with_data() -> (buffer, data)``.

``set-strategy``
    the stream has ``set_strategy(strategy)`` (the sample-scan thread's
    ``read_stream_set_strategy``).

``pause-resume``
    the stream has ``pause() -> InvalidBlockNumber`` (called from inside the callback) and
    ``resume()`` (PostgreSQL 19 and later).

``introspection``
    the stream exposes ``max_pinned_buffers``, ``max_ios``, ``distance`` and
    ``io_combine_limit`` attributes, so limits can be checked directly and not only through
    their observable effects, and its capacity statistic: ``enable_stats().distance_capacity``
    (19's ``read_stream_enable_stats``) or ``stats.capacity``.

``scans``
    ``scan_variants(scan) -> tuple[str, ...]`` (a subset of ``("streamed", "unstreamed")``) and
    ``run_scan(request: ScanRequest) -> ScanOutcome``. A real PostgreSQL server offers only
    this capability.

``fault-injection``
    scans honour ``ScanRequest.faults`` (a :class:`reference_impl.FaultPlan`).

``virtual-time``
    outcomes report simulated time (performance properties can be checked without noise).

A test that needs a capability the implementation lacks is **skipped with that reason**, never
passed silently.

Two optional hooks: ``capabilities_for(settings) -> frozenset[str]`` narrows the capabilities for
a test's settings (the reference offers ``pause-resume`` only with ``version`` 19 or later), and
``close()`` is called once at the end of the session (a real server is stopped there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CAPABILITIES",
    "StreamProtocol",
    "StreamImplementation",
    "ScanImplementation",
    "Implementation",
    "ScanRequest",
    "ScanOutcome",
    "check_implementation",
]

CAPABILITIES: dict[str, str] = {
    "stream-api": "begin_stream() over the harness's buffer manager",
    "set-strategy": "stream.set_strategy()",
    "pause-resume": "stream.pause() / stream.resume()",
    "per-buffer-data": "per_buffer_data=True streams",
    "introspection": "stream.max_pinned_buffers / max_ios / distance / io_combine_limit",
    "scans": "scan_variants() and run_scan()",
    "fault-injection": "scans honour a FaultPlan",
    "virtual-time": "simulated time in outcomes",
}

_REQUIRED_METHODS: dict[str, tuple[str, ...]] = {
    "stream-api": ("begin_stream",),
    "scans": ("scan_variants", "run_scan"),
}


@runtime_checkable
class StreamProtocol(Protocol):
    """A read stream as the conformance suite drives it (``read_stream.h``)."""

    def next_buffer(self) -> int: ...

    def reset(self) -> None: ...

    def end(self) -> None: ...


@runtime_checkable
class StreamImplementation(Protocol):
    """An implementation offering the ``stream-api`` capability."""

    name: str
    capabilities: frozenset[str]

    def begin_stream(
        self,
        backend: Any,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any = None,
        *,
        fork: Any = ...,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> StreamProtocol: ...


@dataclass(frozen=True)
class ScanRequest:
    """One scan to run: what, on which relation, with which settings and cache state.

    ``relation`` is a ``reference_impl.relations.RelationSpec`` (the same description builds the
    model's relation and the real server's table); ``target`` names the relation the scan runs
    on when it is not the table itself (an index of the spec, by name; ``None``: the table, or
    for index-level scans the spec's first index of the right kind); ``params`` are the scan's own parameters
    (``sample_percent``, ``repeatable_seed``, ``rows``, ``time_ms``, ``limit``, ...);
    ``cached_fraction`` of the relation's blocks are resident before the scan (chosen with
    ``seed``); ``cancel_after_buffers`` cancels the statement once that many pages were
    consumed.
    """

    scan: str
    relation: Any
    variant: str = "streamed"
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    settings: Any = None
    cached_fraction: float = 0.0
    seed: int = 0
    faults: Any = None
    cancel_after_buffers: int | None = None
    device: str = "nvme"
    #: A server imposes ``device`` on the relation's files (its read interposer: the profile's
    #: latency and bandwidth per read request), so that its reads take the model's time; the
    #: model runs on ``device`` in any case.
    impose_device: bool = False


@dataclass
class ScanOutcome:
    """What a scan did, as the implementation observed it.

    ``result`` holds the scan's answer (rows counted, sampled block set, tuples removed, checksum
    pages written, ...) and must be equal for the streamed and unstreamed variants. ``reads``,
    ``read_bytes`` and ``read_sizes`` describe the physical reads (``read_sizes`` may be empty
    when the implementation can only count them, as a real server can); ``blocks`` are the
    main-fork blocks visited in order when known; ``pinned_after`` is the number of buffers
    still pinned after the scan (or after its cancellation).
    """

    result: dict[str, Any]
    reads: int
    read_bytes: int
    read_sizes: list[int] = field(default_factory=list)
    read_ranges: list[tuple[int, int]] = field(default_factory=list)
    blocks: list[int] | None = None
    hits: int = 0
    elapsed_us: int | None = None
    pinned_after: int = 0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ScanImplementation(Protocol):
    """An implementation offering the ``scans`` capability."""

    name: str
    capabilities: frozenset[str]

    def scan_variants(self, scan: str) -> tuple[str, ...]: ...

    def run_scan(self, request: ScanRequest) -> ScanOutcome: ...


class Implementation(Protocol):
    """Any implementation: a name and its capabilities (plus the capabilities' methods)."""

    name: str
    capabilities: frozenset[str]


def check_implementation(obj: Any) -> list[str]:
    """Problems that make ``obj`` unusable as an implementation (empty list when fine)."""
    problems: list[str] = []
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        problems.append("it has no 'name' string attribute")
    caps = getattr(obj, "capabilities", None)
    if not isinstance(caps, (set, frozenset)) or not all(isinstance(c, str) for c in caps):
        problems.append("it has no 'capabilities' set of strings")
        return problems
    unknown = sorted(set(caps) - set(CAPABILITIES))
    if unknown:
        problems.append(
            f"unknown capabilities {', '.join(unknown)} (known: {', '.join(sorted(CAPABILITIES))})"
        )
    for cap, methods in _REQUIRED_METHODS.items():
        if cap in caps:
            for m in methods:
                if not callable(getattr(obj, m, None)):
                    problems.append(f"capability {cap!r} needs a callable {m}()")
    if not ({"stream-api", "scans"} & set(caps)):
        problems.append("it offers neither 'stream-api' nor 'scans'")
    return problems
