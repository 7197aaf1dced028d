"""``readstream bench seeds --server``: the seed tables' unpatched rows on a real PostgreSQL 18.

The seed threads published base-versus-patch tables; the base side of several of them is what a
stock 18.6 runs (a ``TABLESAMPLE SYSTEM``/``BERNOULLI``/``SYSTEM_ROWS``/``SYSTEM_TIME`` scan read
one block at a time, ``pgstattuple_approx``, a ``VACUUM`` whose hash index is read one page at a
time). This runs those rows on the embedded server with the thread's read latency imposed by the
read interposer (:mod:`.faults`), and the model on the same relation, settings and latency, and
prints both with their ratio beside the thread's published figure.

* **Scale.** The threads' relations (a 64 GiB table, a 1M-tuple table with a hash index) do not
  fit a test budget. Each table runs at a stated factor (:data:`DEFAULT_SCALES`, or ``scale``):
  ``bench.tables.build_tables(factor)`` shrinks its relation and sample sizes in proportion, and
  both sides run that same scaled relation; the published figure (full size) is printed as
  context only and is not compared. ``SYSTEM_TIME(100)`` is not scaled by the tables (it stops
  after 100 ms whatever the size); its 1 GiB table is shrunk here to the same factor, which still
  holds more pages than 100 ms reads.
* **Latency.** The table's device as ``bench seeds`` fits it to the thread's calibration figure
  at full size (the fit kept in ``bench.tables``; refitting at a small scale would fold the
  scaled-away work into the latency), imposed on every read of the relation's files: latency, bandwidth as a
  per-byte cost, channels as the requests served at once. The interposer delays reads only, and
  has no cheaper sequential request: on both sides the device has no write delay and no
  sequential latency (rows whose point is a write delay are left out, with that reason).
* **Timing** as in :mod:`.timing` (``readstream oracle --timing``): the server's
  ``clock_timestamp()`` around the statement, medians of interleaved rounds; the model runs the
  request with ``debug_io_direct=data`` on a device of the per-request service the interposer's
  ledger measured, with ``CpuCosts`` scaled by the row's CPU measured with no imposed latency
  under ``sync``, plus the statement's time outside its reads (measured in the row's own runs:
  what a statement returns can depend on the latency, as ``SYSTEM_TIME``'s rows do). The model's
  CPU figures the threads fitted to their own machines (``pgstattuple``'s per-page cost) are not
  used: the model is held against this machine.

Rows the stock server cannot run are listed with the reason (the patch side, several clients,
``io_uring`` which the interposer cannot delay, online checksum enabling).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .timing import (
    STALL_US,
    measure,
    median_of,
    model_ms,
    model_outcome,
    runqueue_ms,
    scaled_costs,
)

__all__ = [
    "DEFAULT_SCALES",
    "SeedCase",
    "format_seed_server",
    "markdown_seed_server",
    "run_seed_server",
    "seed_cases",
]

#: Per seed table, the factor its relation is shrunk by (a few seconds per round in all).
DEFAULT_SCALES: dict[str, float] = {
    "sample-64gib": 1 / 1024,
    "sample-concurrency": 1 / 1024,
    "sample-system-time": 1 / 32,
    "checksums": 1 / 512,
    "streamify-pgstattuple": 1 / 32,
    "streamify-hash-vacuum": 1 / 32,
    "streamify-hash-vacuum-medium": 1 / 32,
}


@dataclass(frozen=True)
class SeedCase:
    """One unpatched seed row as the server runs it: the scan (``tsm_system.c``, ``tsm_system_rows.c``,
    ``tsm_bernoulli.c``, ``tsm_system_time.c``, ``pgstatapprox.c``, ``vacuumlazy.c`` with
    ``hashbulkdelete``) on the table's scaled relation, under the thread's latency."""

    key: str
    table: str
    row: str
    scale: float
    published: float
    unit: str
    request: Any  # the server's ScanRequest (buffered)
    device: Any  # DeviceProfile imposed on the server's reads
    thread_latency_us: float

    @property
    def model_request(self) -> Any:
        """The same request for the model: direct I/O, as the interposer acts below the page cache."""
        return replace(self.request, settings=replace(self.request.settings, debug_io_direct="data"))

    @property
    def calibration_request(self) -> Any:
        """The same scan under ``sync`` (its CPU and reads take turns), for the zero-latency run."""
        return replace(self.request, settings=replace(self.request.settings, io_method="sync"))


def _zero_device() -> Any:
    from reference_impl.storage.device import DeviceProfile

    return DeviceProfile("imposed-0us", 0, 0, 1_000_000.0, 65536)


# A device change of the write latency above this is a benchmark's write delay (the SSD's own
# write time is tens of microseconds).
_WRITE_DELAY_US = 100


def _timed_base_row(spec: Any) -> bool:
    """A row of the unpatched side that publishes an elapsed time (others are not server rows)."""
    return spec.side == "base" and spec.metric == "elapsed" and len(spec.runs) == 1


def _skip_reason(table: Any, spec: Any) -> str | None:
    from ..impl.scanops import NOT_OFFERED, SERVER_VARIANTS

    run = spec.runs[0]
    if run.scan in NOT_OFFERED:
        return NOT_OFFERED[run.scan]
    if run.scan not in SERVER_VARIANTS or run.variant != SERVER_VARIANTS[run.scan]:
        return f"{run.scan} {run.variant}: not what stock 18.6 runs"
    if run.clients != 1:
        return f"{run.clients} concurrent clients (the server timing runs one statement)"
    if run.warm:
        return "a cached run (no read is delayed)"
    settings = dict(run.settings)
    if settings.get("io_method") == "io_uring":
        return "io_method=io_uring: the kernel performs the read, which the interposer cannot delay"
    if dict(run.device_changes).get("write_latency_us", 0) > _WRITE_DELAY_US:
        return "its point is a write delay; the interposer delays reads only"
    return None


def _case(table: Any, spec: Any, scale: float, device: Any) -> SeedCase:
    from reference_impl import Settings
    from reference_impl.relations import SHAPES, IndexSpec, RelationSpec

    from ...protocol import ScanRequest

    run = spec.runs[0]
    if run.shape is not None:
        rel = SHAPES[run.shape]
        changes = dict(run.shape_changes)
        nblocks = run.nblocks
        if table.key == "sample-system-time" and nblocks is not None:
            nblocks = max(2048, round(nblocks * scale))  # the tables do not scale SYSTEM_TIME
        if nblocks is not None:
            changes["nblocks"] = nblocks
        rel = rel.replace(**changes) if changes else rel
        if any(ix.kind == "hash" for ix in rel.indexes):
            # The thread's index grew by bucket splits (a layout inferred from its read counts);
            # a server builds its own (_hash_init sizes the buckets, CREATE INDEX adds overflow
            # pages), and the model builds that same layout from PostgreSQL's hash of the keys.
            rel = rel.replace(
                indexes=tuple(
                    IndexSpec("hash", name=ix.name, key_hash="hashint4", overflow="build")
                    if ix.kind == "hash"
                    else ix
                    for ix in rel.indexes
                )
            )
    else:
        rel = RelationSpec(name="seed", nblocks=run.nblocks or 1000, seed=run.seed)
    settings = {k: v for k, v in dict(run.settings).items() if k != "version"}
    settings["debug_io_direct"] = ""
    # The rows run on 18.6: a fixed pool of the thread's size stands for master's bounds, and
    # 19's pool settings, which 18 lacks, go (reference_impl.settings refuses them on 18).
    low, high = settings.pop("io_min_workers", None), settings.pop("io_max_workers", None)
    settings.pop("io_worker_idle_timeout", None)
    settings.pop("io_worker_launch_interval", None)
    if low is not None and low == high:
        settings.setdefault("io_workers", low)
    dev = run.with_device(device).device
    # Reads only, and no cheaper sequential request: what the interposer can impose.
    dev = replace(dev, write_latency_us=0, sequential_latency_us=None, jitter=0.0)
    request = ScanRequest(
        run.scan,
        rel,
        variant=run.variant,
        params=dict(run.params),
        settings=Settings.from_mapping({"version": "18", **settings}),
    )
    return SeedCase(
        key=table.key,
        table=table.title,
        row=spec.row,
        scale=scale,
        published=spec.published,
        unit=spec.unit,
        request=request,
        device=dev,
        thread_latency_us=float(dev.read_latency_us),
    )


def seed_cases(
    tables: Iterable[str] | None = None, scale: float | None = None
) -> tuple[list[SeedCase], list[dict[str, Any]]]:
    """The unpatched rows a stock server runs, at their scales, and the other unpatched elapsed
    times with why not (patched rows, read counts and I/O times are not timed here).

    Each table's device is the one ``bench seeds`` fits at full size (its last fit, kept in the
    table's calibration as the solver's starting point).
    """
    from ...bench.tables import build_tables

    if scale is not None and not (isinstance(scale, float | int) and 0 < scale <= 1):
        raise ValueError(f"scale = {scale!r} is not valid; allowed: 0 < scale <= 1")
    keys = [t.key for t in build_tables(1.0)]
    wanted = list(dict.fromkeys(tables)) if tables else keys
    unknown = [k for k in wanted if k not in keys]
    if unknown:
        raise ValueError(f"unknown seed table(s) {', '.join(unknown)}: allowed {', '.join(keys)}")
    cases: list[SeedCase] = []
    skipped: list[dict[str, Any]] = []
    for key in wanted:
        factor = float(scale) if scale is not None else DEFAULT_SCALES.get(key, 1 / 64)
        table = next(t for t in build_tables(factor) if t.key == key)
        base = [spec for spec in table.rows if _timed_base_row(spec)]
        reasons = {spec.row: _skip_reason(table, spec) for spec in base}
        for spec in base:
            if reasons[spec.row] is not None:
                skipped.append(
                    {"key": key, "table": table.title, "row": spec.row, "reason": reasons[spec.row]}
                )
        runnable = [spec for spec in base if reasons[spec.row] is None]
        if not runnable:
            continue
        # The device of the table's full-size fit (CalibSpec.x0 is kept at the last one): a fit
        # at a small scale would fold the scaled-away work into the latency.
        device = table.device(table.calibration.x0)
        cases.extend(_case(table, spec, factor, device) for spec in runnable)
    return cases, skipped


def run_seed_server(
    cases: Sequence[SeedCase],
    *,
    repeats: int = 5,
    impl: Any = None,
    bindir: str | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Time ``cases`` on the server and in the model (see the module doc); the JSON-ready result."""
    from ..impl.implementation import PostgresImplementation

    if not isinstance(repeats, int) or not 1 <= repeats <= 99:
        raise ValueError(f"repeats = {repeats!r} is not valid; allowed: 1..99")
    if not cases:
        return {"server_version": None, "repeats": repeats, "rows": [], "skipped": []}
    own = impl is None
    if impl is None:
        impl = PostgresImplementation(bindir=bindir, interpose=True, pytest_mode=False)

    # One zero-latency sync run per distinct scan (relation, parameters): its CPU between reads.
    def cal_key(c: SeedCase) -> tuple[str, ...]:
        r = c.request
        return ("calibration", r.scan, repr(r.relation), repr(sorted(r.params.items())))

    plan: list[tuple[Any, Any, Any, float]] = []
    for key in dict.fromkeys(cal_key(c) for c in cases):
        first = next(c for c in cases if cal_key(c) == key)
        plan.append((key, first.calibration_request, _zero_device(), 0.0))
    plan += [((c.key, c.row), c.request, c.device, c.thread_latency_us) for c in cases]
    plan.sort(key=lambda p: (p[1].settings.io_method, p[1].settings.io_workers))
    try:
        runs = measure(impl, plan, repeats, progress)
        version = impl.server.version
    finally:
        if own:
            impl.close()
    rows = [_row(c, runs[(c.key, c.row)], runs[cal_key(c)]) for c in cases]
    return {"server_version": version, "repeats": repeats, "rows": rows, "skipped": []}


def _row(c: SeedCase, runs: list[dict[str, float]], cal_runs: list[dict[str, float]]) -> dict[str, Any]:
    cal_model = replace(c.model_request, settings=replace(c.model_request.settings, io_method="sync"))
    model_cpu = model_ms(cal_model, 0.0, None, label=c.row) * 1000.0
    server_cpu = median_of(cal_runs, "cpu")
    cpu_scale = server_cpu / model_cpu if model_cpu > 0 and server_cpu > 0 else 1.0
    # The statement's time outside its reads from the row's own runs: what it returns can depend
    # on the latency (SYSTEM_TIME returns the rows it reached in 100 ms, each a trip to the client).
    overhead_ms = median_of(runs, "outside") / 1000.0
    costs = scaled_costs(cpu_scale)
    served = median_of(runs, "mean_service")
    out = model_outcome(c.model_request, served, costs, channels=c.device.channels, label=c.row)
    model = out.elapsed_us / 1000.0 + overhead_ms
    server = median_of(runs, "total") / 1000.0
    stalled = [r["stalls"] + max(0.0, r["outside"] - overhead_ms * 1000.0 - STALL_US) for r in runs]
    return {
        "key": c.key,
        "table": c.table,
        "row": c.row,
        "scale": c.scale,
        "published": c.published,
        "published_unit": c.unit,
        "latency_us": c.thread_latency_us,
        "io_method": c.request.settings.io_method,
        "service_us": round(served, 1),
        "requests": round(median_of(runs, "requests")),
        "model_requests": out.reads,
        "cpu_scale": round(cpu_scale, 3),
        "overhead_ms": round(overhead_ms, 3),
        "model_ms": round(model, 2),
        "server_ms": round(server, 2),
        "server_runs_ms": [round(r["total"] / 1000.0, 2) for r in runs],
        "stalls_ms": round(statistics.median(stalled) / 1000.0, 2),
        "runqueue_ms": runqueue_ms(runs),
        "ratio": round(model / server, 3) if server > 0 else None,
    }


def _runq(r: dict[str, Any]) -> str:
    return "" if r.get("runqueue_ms") is None else f"{r['runqueue_ms']:.2f}ms"


def _within(ratio: float | None) -> str:
    return "" if ratio is not None and 0.8 <= ratio <= 1.25 else "  <-- outside 0.8-1.25"


def format_seed_server(result: dict[str, Any]) -> str:
    """The rows as plain text, per seed table (what the command prints), then the rows left out."""
    if result["server_version"] is None:
        lines = ["no row of these tables runs on a stock server (no server started)"]
    else:
        lines = [
            f"PostgreSQL {result['server_version']}: the seed tables' unpatched rows, median of "
            f"{result['repeats']} interleaved runs; model and server at the stated scale, the thread's "
            "figure at full size (context)"
        ]
    current = None
    for r in result["rows"]:
        if r["table"] != current:
            current = r["table"]
            lines += ["", f"== {r['table']} =="]
            lines.append(
                f"   {'row':<34} {'scale':>7} {'latency':>9} {'served':>8} {'reqs':>5} {'stmt ms':>8} {'model ms':>9} "
                f"{'server ms':>10} {'ratio':>6} {'stalls':>7} {'runq':>7}   published (full size)"
            )
        lines.append(
            f"   {r['row']:<34} 1/{1 / r['scale']:<5.0f} {r['latency_us']:>7.0f}us {r['service_us']:>6.0f}us "
            f"{r['requests']:>5} {r['overhead_ms']:>8.2f} {r['model_ms']:>9.2f} {r['server_ms']:>10.2f} {r['ratio']:>6.2f} "
            f"{r['stalls_ms']:>5.2f}ms {_runq(r):>7}   {r['published']:g} {r['published_unit']}{_within(r['ratio'])}"
        )
    if result.get("skipped"):
        lines += ["", "not run on the server:"]
        for s in result["skipped"]:
            lines.append(f"   {s['table']}: {s['row']}: {s['reason']}")
    return "\n".join(lines)


def markdown_seed_server(result: dict[str, Any]) -> str:
    """The rows as one Markdown table (for ``docs/benchmarks.md``)."""
    lines = [
        "| table | row | scale | latency | served per request | requests | statement ms | model ms | server ms "
        "| ratio | stalls ms | backend's run-queue wait ms | published (full size) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['key']} | {r['row']} | 1/{1 / r['scale']:.0f} | {r['latency_us']:.0f} µs | "
            f"{r['service_us']:.0f} µs | {r['requests']} | {r['overhead_ms']:.2f} | {r['model_ms']:.2f} | {r['server_ms']:.2f} | "
            f"{r['ratio']:.2f} | {r['stalls_ms']:.2f} | {_runq(r).removesuffix('ms') or '—'} | {r['published']:g} {r['published_unit']} |"
        )
    return "\n".join(lines)
