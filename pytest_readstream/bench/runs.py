"""One simulated benchmark run: build an instance as a published benchmark did, run, measure.

The seed threads' tables were measured on real servers: a table of some size and layout, a few
settings, a device with some latency, one or several clients, caches cleared or warm. A
:class:`Run` describes one such measurement for the model in plain, picklable data, so that runs
can be handed to worker processes; :func:`simulate_run` builds a fresh :class:`Instance` from it,
creates the relation (a plain one of ``nblocks`` blocks, or a named synthetic shape), applies the
preparation the benchmark did (a warm-up run for the cached case), runs the registered scan
streamed or unstreamed on one backend or on several concurrent backends sharing the pool, device
and I/O workers (``Instance.simulate``), and returns what the thread reported:

* ``elapsed_us`` (per client, and their mean), and for several clients ``tps``;
* ``reads`` (I/Os, as ``pg_stat_io`` counts them) and ``blocks_read``;
* ``io_time_us``: what ``track_io_timing`` adds to ``pg_stat_io.read_time`` in PostgreSQL 18: the
  whole read for a read the backend executed itself (``sync``, or ``ReadBuffer``), and only the
  time it really had to wait for an asynchronous one;
* ``writes`` and ``write_time_us`` (dirty buffers written by the backend before reuse).

Nothing here changes what the model does: the read log is replaced by a tally that sums instead
of storing (a 64 GiB scan would otherwise keep a million records), and the backend's buffer
flush is timed from outside.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from reference_impl import CpuCosts, DeviceProfile, Instance, ReadPathObserver, Settings
from reference_impl.readahead import HeuristicReadahead
from reference_impl.scans import SCANS, run_scan

__all__ = ["Run", "simulate_run", "trace_run", "ReadTally", "scan_available", "relation_shapes"]


def scan_available(name: str) -> bool:
    """Whether a scan of that name is registered (other engineers add scans over time)."""
    return name in SCANS


def relation_shapes() -> dict[str, Any]:
    """The named synthetic relation shapes, or an empty dict if the package is missing."""
    try:
        from reference_impl import relations
    except ImportError:
        return {}
    return dict(getattr(relations, "SHAPES", {}))


class ReadTally(list):  # type: ignore[type-arg]
    """A read log that keeps sums instead of records (``BackendStats.read_log`` stand-in).

    ``run_scan`` slices the log to return a scan's reads; this one stays empty, so the slice is
    empty and memory stays flat however many reads a run issues.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.blocks = 0
        self.sync_us = 0
        self.by_relation: dict[str, int] = {}

    def append(self, rec: Any) -> None:  # type: ignore[override]
        self.reads += 1
        by = self.by_relation
        by[rec.relation] = by.get(rec.relation, 0) + 1
        self.blocks += rec.nblocks
        if rec.synchronous:
            self.sync_us += rec.complete_us - rec.submit_us


@dataclass(frozen=True)
class Run:
    """One measurement of a seed table, as plain data (see the module docstring).

    ``settings`` and ``costs`` are ``(name, value)`` pairs for ``Settings.from_mapping`` and
    ``CpuCosts``. ``client_params`` gives each client its own scan parameters (e.g. a different
    sampling seed per pgbench client); ``cancel_after`` stops each client after that many pages
    (a measurement window: ``tps`` is then each client's pages per second over the window,
    divided by ``query_pages``, the pages one whole query visits). ``warm`` runs the same scan
    once, unmeasured, before the measured run (the "all data cached" case). ``device_changes``
    are fields of the device this run changes on top of the table's calibrated device (a write
    delay set by the benchmark).
    ``track_reads=False`` skips the per-read tally (faster; then ``io_time_us`` and the
    per-relation read counts are ``None``). ``readahead`` installs
    :class:`~reference_impl.readahead.HeuristicReadahead` with these keyword arguments.
    """

    settings: tuple[tuple[str, Any], ...]
    device: DeviceProfile
    scan: str
    variant: str = "streamed"
    nblocks: int | None = None
    shape: str | None = None
    shape_changes: tuple[tuple[str, Any], ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    costs: tuple[tuple[str, float], ...] = ()
    clients: int = 1
    client_params: tuple[tuple[tuple[str, Any], ...], ...] = ()
    cancel_after: int | None = None
    query_pages: int | None = None
    warm: bool = False
    readahead: tuple[tuple[str, Any], ...] | None = None
    device_changes: tuple[tuple[str, Any], ...] = ()
    track_reads: bool = True
    seed: int = 0
    label: str = field(default="", compare=False)

    def with_device(self, device: DeviceProfile) -> Run:
        """This run on ``device``, with the run's own ``device_changes`` applied on top."""
        if self.device_changes:
            device = device.with_changes(**dict(self.device_changes))
        return replace(self, device=device)


def _relation(inst: Instance, run: Run) -> Any:
    """The relation the scan runs on (a plain one, or the heap of a synthetic shape)."""
    if run.shape is None:
        if run.nblocks is None:
            raise ValueError(f"run {run.label!r}: give nblocks or a relation shape")
        return inst.create_relation("t", run.nblocks)
    shapes = relation_shapes()
    if run.shape not in shapes:
        raise ValueError(
            f"run {run.label!r}: relation shape {run.shape!r} is not defined: "
            f"available {', '.join(sorted(shapes)) or 'none'}"
        )
    from reference_impl.relations import build_relation

    spec = shapes[run.shape]
    changes = dict(run.shape_changes)
    if run.nblocks is not None:
        changes["nblocks"] = run.nblocks
    if changes:
        spec = spec.replace(**changes)
    return build_relation(inst, spec).heap


class _FlushTimer(ReadPathObserver):
    """Adds up the virtual time of the backend's buffer writes (``FlushBuffer``) in ``box[0]``."""

    def __init__(self, box: list[int]) -> None:
        self.box = box

    def buffer_flushed(self, backend: Any, buf: int, context: str, start_us: int, end_us: int) -> None:
        self.box[0] += end_us - start_us


def _timed_flush(backend: Any, box: list[int]) -> None:
    """Time the backend's buffer writes (``FlushBuffer``) without changing them."""
    backend.add_observer(_FlushTimer(box))


def _build_instance(run: Run) -> tuple[Settings, Instance, Any]:
    """A fresh instance as ``run`` describes it (settings, device, CPU costs, seed), and its relation.

    Backends get a read log (``record_reads``): :func:`simulate_run` swaps it for a
    :class:`ReadTally`, :func:`trace_run` returns every read from it.
    """
    settings = Settings.from_mapping(dict(run.settings))
    costs = CpuCosts(**dict(run.costs)) if run.costs else CpuCosts()
    inst = Instance(settings, device=run.device, costs=costs, seed=run.seed, record_reads=True)
    return settings, inst, _relation(inst, run)


def _warm_up(inst: Instance, rel: Any, run: Run, params: dict[str, Any]) -> Any:
    """Run ``run``'s scan once, unmeasured, on a backend of its own (``Run.warm``); return it.

    What it reads stays in shared buffers for the measured run (the "all data cached" case).
    """
    backend = inst.backend("warm-up")
    run_scan(run.scan, backend, rel, variant=run.variant, keep_blocks=False, **params)
    return backend


def simulate_run(run: Run) -> dict[str, Any]:
    """Build the instance a :class:`Run` describes, run it, and return its measurements."""
    if run.scan not in SCANS:
        raise ValueError(f"run {run.label!r}: scan {run.scan!r} is not registered")
    _, inst, rel = _build_instance(run)
    base_params = dict(run.params)
    if run.warm:
        _warm_up(inst, rel, run, base_params).check_for_buffer_leaks()
    nclients = run.clients
    backends = [inst.backend() for _ in range(nclients)]
    tallies = []
    write_us = []
    ra = None
    if run.readahead is not None:
        ra = HeuristicReadahead(**dict(run.readahead))
    for be in backends:
        tally = ReadTally()
        be.stats.read_log = tally if run.track_reads else None
        tallies.append(tally)
        box = [0]
        _timed_flush(be, box)
        write_us.append(box)
        if ra is not None:
            ra.install(be)
    per_client = [
        {**base_params, **dict(run.client_params[i])} if i < len(run.client_params) else base_params
        for i in range(nclients)
    ]

    def client(i: int) -> Any:
        return run_scan(
            run.scan,
            backends[i],
            rel,
            variant=run.variant,
            keep_blocks=False,
            cancel_after=run.cancel_after,
            **per_client[i],
        )

    if nclients == 1:
        results = [client(0)]
    else:
        results = inst.simulate(*[(lambda i=i: client(i)) for i in range(nclients)])
    for res in results:
        if res.error is not None and not (run.cancel_after is not None and res.error_type == "QueryCanceled"):
            raise RuntimeError(f"run {run.label!r}: {res.error_type}: {res.error}")
    elapsed = [res.elapsed_us for res in results]
    by_relation: dict[str, int] = {}
    for t in tallies:
        for name, n in t.by_relation.items():
            by_relation[name] = by_relation.get(name, 0) + n
    pages = [len(res.blocks) if res.blocks is not None else None for res in results]
    out: dict[str, Any] = {
        "elapsed_us": sum(elapsed) / len(elapsed),
        "elapsed_us_per_client": elapsed,
        "reads": sum(be.stats.reads for be in backends),
        "reads_by_relation": by_relation if run.track_reads else None,
        "index_reads": sum(n for name, n in by_relation.items() if name != rel.name)
        if run.track_reads
        else None,
        "blocks_read": sum(be.stats.shared_blks_read for be in backends),
        "hits": sum(res.hits for res in results),
        "io_time_us": (
            sum(t.sync_us + be.stats.wait_us for t, be in zip(tallies, backends)) if run.track_reads else None
        ),
        "writes": sum(be.stats.shared_blks_written for be in backends),
        "write_time_us": sum(box[0] for box in write_us),
        "result": results[0].result,
        "pages": pages,
        "device_reads": inst.device.stats.reads,
        "device_writes": inst.device.stats.writes,
    }
    if run.cancel_after is not None and run.query_pages:
        # A canceled client visited cancel_after pages before the one that raised.
        out["tps"] = sum(run.cancel_after * 1e6 / e / run.query_pages for e in elapsed if e > 0)
    elif nclients > 1:
        out["tps"] = sum(1e6 / e for e in elapsed if e > 0)
    if ra is not None:
        out["readahead"] = ra.finish().as_dict()
    return out


def trace_run(run: Run, max_pages: int | None = None) -> dict[str, Any]:
    """A ``readstream trace``-shaped dict of one client of ``run``: every read, waits, distance.

    ``max_pages`` stops the scan after that many pages (a window at the start of a long run).
    """
    from .plots import attach_wait_recorder

    settings, inst, rel = _build_instance(run)
    params = dict(run.params)
    if run.warm:
        _warm_up(inst, rel, run, params)
    be = inst.backend()
    waits = attach_wait_recorder(be)
    t0 = inst.clock.now
    res = run_scan(
        run.scan, be, rel, variant=run.variant, keep_blocks=False, cancel_after=max_pages, **params
    )
    reads = [
        {
            "relation": r.relation,
            "fork": r.fork,
            "start": r.start,
            "nblocks": r.nblocks,
            "submit_us": r.submit_us - t0,
            "complete_us": r.complete_us - t0,
            "synchronous": r.synchronous,
        }
        for r in res.reads or []
    ]
    return {
        "scan": run.scan,
        "variant": run.variant,
        "label": run.label,
        "settings": settings.as_dict(),
        "device": {"profile": run.device.name, "read_latency_us": run.device.read_latency_us},
        "reads": reads,
        "waits": [(a - t0, b - t0) for a, b in waits],
        "distance_history": [(t - t0, d) for t, d in (res.distance_history or [])],
        "stats": {"reads": res.read_count, "blocks_read": res.read_blocks, "elapsed_us": res.elapsed_us},
    }
