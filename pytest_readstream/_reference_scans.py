"""The reference implementation's ``scans`` capability: a ``ScanRequest`` run on the model.

Each request gets a fresh simulated instance, so scans never see each other's cache state:

1. ``Instance(settings, device=request.device, faults=<a copy of request.faults>, seed=request.seed)``;
2. the relation built from ``request.relation`` (a ``RelationSpec``) straight into storage;
3. ``cached_fraction`` of its main-fork blocks made resident, chosen with a numpy generator seeded
   by ``request.seed`` (the same choice ``readstream trace`` makes);
4. the plan's foreign I/Os started (another backend's reads in progress);
5. the scan run by the model's registry (``reference_impl.scans.run_scan``) on a new backend,
   cancelled after ``cancel_after_buffers`` pages (or the plan's ``CancelAt``).

Most scans read the table; the index scans (``btvacuumscan``, ``hashbulkdelete``,
``gistvacuumscan``, ``pgstatindex``, ``pgstathashindex``) read the relation's first index of their
access method, which the ``RelationSpec`` must declare (``indexes=(IndexSpec("btree"),)``).

The ``ScanResult`` becomes a ``ScanOutcome``; what has no field of its own (the I/O per context,
the streams' statistics, the faults that fired, the ``IOStats`` an ``explain_io`` scan kept)
goes into ``extra``.
"""

from __future__ import annotations

from typing import Any

from .protocol import ScanOutcome, ScanRequest

__all__ = ["scan_variants", "run_scan", "prepare_instance", "INDEX_SCANS"]

INDEX_SCANS: dict[str, str] = {
    "btvacuumscan": "btree",
    "hashbulkdelete": "hash",
    "gistvacuumscan": "gist",
    "pgstatindex": "btree",
    "pgstathashindex": "hash",
}


def scan_variants(scan: str) -> tuple[str, ...]:
    """The variants of ``scan`` the model has (empty for a scan it does not know)."""
    from reference_impl.scans import SCANS

    spec = SCANS.get(scan)
    return tuple(spec.variants) if spec is not None else ()


def _plan_copy(faults: Any, seed: int) -> Any:
    from reference_impl import FaultPlan
    from reference_impl.errors import ModelUsageError

    if faults is None:
        return FaultPlan(seed=seed)
    if isinstance(faults, FaultPlan):
        # A plan counts what fired; the request's own object stays untouched and reusable.
        return FaultPlan.from_dict(faults.to_dict())
    if isinstance(faults, dict):
        return FaultPlan.from_dict(faults)
    raise ModelUsageError(
        f"ScanRequest.faults = {faults!r} is invalid: allowed a FaultPlan, its dict or None"
    )


def prepare_instance(request: ScanRequest, *, costs: Any = None) -> tuple[Any, Any, Any]:
    """The instance, built relation and fault plan a request describes (steps 1-4 above).

    ``costs`` (a ``reference_impl.CpuCosts``) replaces the model's default CPU costs.
    """
    import numpy as np

    from reference_impl import Instance, Settings
    from reference_impl.errors import ModelUsageError
    from reference_impl.relations import RelationSpec, build_relation

    if not isinstance(request.relation, RelationSpec):
        raise ModelUsageError(
            f"ScanRequest.relation = {request.relation!r} is invalid: allowed a reference_impl.relations.RelationSpec"
        )
    if not 0.0 <= request.cached_fraction <= 1.0:
        raise ModelUsageError(
            f"ScanRequest.cached_fraction = {request.cached_fraction!r} is invalid: allowed 0.0 .. 1.0"
        )
    settings = request.settings if request.settings is not None else Settings()
    plan = _plan_copy(request.faults, request.seed)
    inst = Instance(settings, device=request.device, faults=plan, seed=request.seed, costs=costs)
    rel = build_relation(inst, request.relation)
    n = rel.heap.nblocks()
    if request.cached_fraction > 0 and n:
        rng = np.random.default_rng(request.seed)
        k = round(request.cached_fraction * n)
        cached = np.sort(rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)
        inst.prewarm(rel.heap, [int(b) for b in cached])
    for fio in plan.foreign_ios:
        inst.start_foreign_io(fio)
    return inst, rel, plan


def run_scan(request: ScanRequest, *, costs: Any = None) -> ScanOutcome:
    """Run ``request`` on a fresh instance of the model (see the module docstring)."""
    from reference_impl import scans

    inst, rel, plan = prepare_instance(request, costs=costs)
    cancel = request.cancel_after_buffers
    if cancel is None and plan.cancel is not None:
        cancel = plan.cancel.after_buffers
    res = scans.run_scan(
        request.scan,
        inst.backend(),
        _target(request, rel),
        variant=request.variant,
        cancel_after=cancel,
        **request.params,
    )
    reads = res.reads or []
    return ScanOutcome(
        result=res.result,
        reads=res.read_count,
        read_bytes=res.read_blocks * 8192,
        read_sizes=[r.nblocks for r in reads],
        read_ranges=[(r.start, r.nblocks) for r in reads if r.fork == "main"],
        blocks=res.blocks,
        hits=res.hits,
        elapsed_us=res.elapsed_us,
        pinned_after=res.pinned_after,
        error=res.error,
        extra={
            "error_type": res.error_type,
            "io": res.io,
            "stream_stats": res.stream_stats,
            "faults_fired": list(plan.ledger),
            "reads_by_fork": _reads_by_fork(reads),
            # EXPLAIN (IO)'s counters of a scan run with explain_io (19 on), else None
            "io_stats": res.io_stats,
        },
    )


def _target(request: ScanRequest, rel: Any) -> Any:
    from reference_impl.errors import ModelUsageError

    kind = INDEX_SCANS.get(request.scan)
    if kind is None:
        return rel.heap
    for index_spec, index in zip(rel.spec.indexes, rel.indexes.values()):
        if index_spec.kind == kind:
            return index
    raise ModelUsageError(
        f"scan {request.scan!r} reads a {kind} index, and relation {rel.spec.name!r} has none: "
        f"give RelationSpec(indexes=(IndexSpec({kind!r}),))"
    )


def _reads_by_fork(reads: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reads:
        key = f"{r.relation}/{r.fork}"
        out[key] = out.get(key, 0) + 1
    return out
