"""``readstream oracle --timing``: the model's elapsed time beside a real server's, under a latency.

The seed tables the project reproduces rest on the model's timing; this holds it against a real
PostgreSQL 18 whose reads are made slow by the harness's read interposer (:mod:`.faults`). Per
case (a scan, an imposed per-request latency, ``io_method``, ``effective_io_concurrency``):

1. **the server**: :meth:`PostgresImplementation.time_scan` runs the scan cold ``repeats``
   times with the latency imposed on every file of the relation, timing it with the server's
   ``clock_timestamp()`` around the statement; the figure is the **median** (a noisy machine
   moves single runs, not the median of several). The interposer's ledger also gives how long
   each read request was really in service: the imposed latency plus the time the process took
   to wake up (tens of microseconds on a loaded two-core machine) plus the read itself;
2. **the model**: ``reference_impl`` runs the same ``ScanRequest`` on a device with that
   *measured* per-request latency, unlimited channels and no bandwidth limit, with
   ``debug_io_direct=data``: the interposer acts below the page cache, so no read-ahead or
   ``posix_fadvise`` can hide a request's latency, exactly as with direct I/O. The server itself
   runs buffered (its files are in the page cache, so each read costs the imposed latency and a
   copy); ``direct=True`` cases run it with ``debug_io_direct=data`` too, where the real device's
   own latency then adds to the imposed one (the ledger includes it);
3. **CPU**: the model's ``CpuCosts`` are calibrated from the same machine and run: a sequential
   scan with no imposed latency, timed in every round beside the cases, against the model on a
   free device gives one factor by which every default cost is scaled (``calibration`` in the
   output). Without it, the model predicts the CPU of "a current x86 server", not of the machine
   the server runs on.

The repeats are interleaved (round after round of every case), so a change of the machine's load
during the run moves all cases alike.

The ratio is model / server; the goal is 0.8-1.25 per case and, for each configuration, the
streamed / unstreamed speedup (``pg_prewarm`` in mode ``buffer``, streamed in 18, against mode
``read``, one block at a time) within 15 % of the server's.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise, product
from typing import Any

__all__ = [
    "DEFAULT_LATENCIES",
    "TIMED_SCANS",
    "TimingCase",
    "cases",
    "format_timing",
    "markdown_timing",
    "measure",
    "median_of",
    "model_ms",
    "model_outcome",
    "run_timing",
    "runqueue_ms",
    "scaled_costs",
    "speedups",
    "split_run",
]

#: The scans timed, with their parameters (a 20 % SYSTEM sample: 18.6 reads it one block at a time).
TIMED_SCANS: dict[str, dict[str, Any]] = {
    "seqscan": {},
    "pg_prewarm": {},
    "pg_prewarm_read": {},
    "tablesample_system": {"sample_percent": 20.0, "repeatable_seed": 7},
    "vacuum": {},
}
DEFAULT_LATENCIES = (200, 2000)
_METHODS = ("sync", "worker")
_EICS = (1, 16)
# The streamed / unstreamed pair whose speedup is compared.
_PAIR = ("pg_prewarm", "pg_prewarm_read")


@dataclass(frozen=True)
class TimingCase:
    """One row: a scan (``heapam.c``'s sequential scan, ``pg_prewarm.c``, ``tsm_system``, ``vacuumlazy.c``)
    under an imposed read latency and I/O settings."""

    scan: str
    latency_us: int
    io_method: str
    eic: int
    direct: bool = False

    @property
    def config(self) -> tuple[int, str, int, bool]:
        return (self.latency_us, self.io_method, self.eic, self.direct)

    @property
    def label(self) -> str:
        d = ", direct" if self.direct else ""
        return f"{self.scan} {self.latency_us / 1000:g} ms {self.io_method} eic {self.eic}{d}"


def cases(
    scans: Iterable[str] = tuple(TIMED_SCANS),
    latencies: Iterable[int] = DEFAULT_LATENCIES,
    methods: Iterable[str] = _METHODS,
    eics: Iterable[int] = _EICS,
    direct: Iterable[bool] = (False,),
) -> list[TimingCase]:
    """Every combination, scans varying fastest (so a pair's two scans run back to back)."""
    scans = list(scans)
    unknown = [s for s in scans if s not in TIMED_SCANS]
    if unknown:
        raise ValueError(f"timed scan(s) {unknown} are not valid; allowed: {', '.join(TIMED_SCANS)}")
    out = []
    for lat, method, eic, d in product(latencies, methods, eics, direct):
        if not isinstance(lat, int) or not 0 <= lat <= 1_000_000:
            raise ValueError(f"latency {lat!r} µs is not valid; allowed: an int 0..1000000")
        for scan in scans:
            out.append(TimingCase(scan, lat, method, eic, d))
    return out


def _spec(nblocks: int) -> Any:
    from reference_impl.relations import RelationSpec

    # Twenty 300-byte tuples a page: a scan's CPU per page stays small beside a read's latency.
    return RelationSpec(name="timed", nblocks=nblocks, tuple_width=300, seed=3)


def _device(latency_us: float) -> Any:
    from reference_impl.storage.device import DeviceProfile

    # No bandwidth limit and as many channels as requests: the interposer adds only latency.
    return DeviceProfile(f"imposed-{latency_us:g}us", round(latency_us), 0, 1_000_000.0, 65536)


def _request(case: TimingCase, spec: Any, *, model: bool) -> Any:
    from reference_impl import Settings

    from ...protocol import ScanRequest
    from ..impl.scanops import SERVER_VARIANTS

    settings = Settings(
        io_method=case.io_method,
        effective_io_concurrency=case.eic,
        maintenance_io_concurrency=case.eic,
        debug_io_direct="data" if (model or case.direct) else "",
    )
    return ScanRequest(
        case.scan,
        spec,
        variant=SERVER_VARIANTS[case.scan],
        params=dict(TIMED_SCANS[case.scan]),
        settings=settings,
    )


def _model_ms(case: TimingCase, spec: Any, latency_us: float, costs: Any) -> float:
    return model_ms(_request(case, spec, model=True), latency_us, costs, label=case.label)


def model_ms(request: Any, latency_us: float, costs: Any, *, channels: int = 65536, label: str = "") -> float:
    """The model's elapsed ms for ``request`` on a device of ``latency_us`` per request (what the
    server's reads were measured to take in service), no bandwidth limit, ``channels`` at once."""
    out = model_outcome(request, latency_us, costs, channels=channels, label=label)
    return float(out.elapsed_us) / 1000.0


def model_outcome(
    request: Any, latency_us: float, costs: Any, *, channels: int = 65536, label: str = ""
) -> Any:
    """The model's ``ScanOutcome`` behind :func:`model_ms` (its reads, its elapsed time)."""
    from dataclasses import replace

    from reference_impl.storage.device import DeviceProfile

    from ..._reference_scans import run_scan as model_run

    device = DeviceProfile(f"served-{latency_us:.0f}us", round(latency_us), 0, 1_000_000.0, channels)
    out = model_run(replace(request, device=device), costs=costs)
    if out.error is not None or out.elapsed_us is None:
        raise RuntimeError(f"the model's {label or request.scan} failed: {out.error}")
    return out


def measure(
    impl: Any, plan: Sequence[tuple[Hashable, Any, Any, float]], repeats: int, progress: Any = None
) -> dict[Hashable, list[dict[str, float]]]:
    """Time every ``(key, request, device, latency_us)`` of ``plan`` on the server ``repeats``
    times, interleaved (round after round of the whole plan); each run split by
    :func:`split_run`. Requests with the same I/O settings should be adjacent in ``plan``: the
    first run after a change of them (a restart) is made once more, unrecorded, because the
    first statements after a restart pay for it (the relcache init file is rebuilt, catalog
    pages are read)."""
    runs: dict[Hashable, list[dict[str, float]]] = {key: [] for key, *_ in plan}
    for round_no in range(repeats):
        group = None
        for key, request, device, latency_us in plan:
            settings = request.settings
            io = (settings.io_method, settings.debug_io_direct) if settings is not None else None
            if io != group:
                group = io
                impl.time_scan(request, device, repeats=1)
            t = impl.time_scan(request, device, repeats=1)
            waits = t.runqueue_us if len(t.runqueue_us) == len(t.seconds) else [None] * len(t.seconds)
            for secs, iv, wait in zip(t.seconds, t.intervals or [[]] * len(t.seconds), waits, strict=True):
                figures = split_run(secs, iv, latency_us)
                if wait is not None:
                    figures["runqueue"] = wait
                runs[key].append(figures)
        if progress is not None:
            progress(f"round {round_no + 1} of {repeats} done")
    return runs


def scaled_costs(scale: float) -> Any:
    from dataclasses import fields

    from reference_impl.costs import CpuCosts

    base = CpuCosts()
    return CpuCosts(**{f.name: getattr(base, f.name) * scale for f in fields(CpuCosts)})


def _calibration_cases(chosen: Sequence[TimingCase]) -> list[TimingCase]:
    """Each chosen scan with no imposed latency under ``sync``, ``effective_io_concurrency`` 1: one
    process, so its reads and its CPU take turns and the gaps between reads are its CPU."""
    return [TimingCase(scan, 0, "sync", 1) for scan in dict.fromkeys(c.scan for c in chosen)]


#: A wait this much longer than the same step takes in a clean run is the machine's scheduler
#: (a process that was runnable but had no CPU), never PostgreSQL's work: no step of these scans
#: between two reads, and no read beyond its imposed latency, takes a millisecond.
STALL_US = 1000.0


def split_run(seconds: float, intervals: Sequence[tuple[int, int]], latency_us: float) -> dict[str, float]:
    """One run's split (µs): the reads' span (first start to last end), the service inside it,
    the statement's time outside it, and the stalls (waits ``STALL_US`` longer than the step)."""
    total = seconds * 1e6
    if not intervals:
        return {
            "total": total,
            "span": 0.0,
            "busy": 0.0,
            "outside": total,
            "mean_service": 0.0,
            "mean_unstalled_service": 0.0,
            "requests": 0,
            "stalls": 0.0,
            "cpu": 0.0,
        }
    span = (intervals[-1][1] - intervals[0][0]) / 1000.0
    busy = sum(end - start for start, end in intervals) / 1000.0
    read_stalls = sum(max(0.0, (end - start) / 1000.0 - latency_us - STALL_US) for start, end in intervals)
    gap_stalls = sum(max(0.0, (nxt[0] - prev[1]) / 1000.0 - STALL_US) for prev, nxt in pairwise(intervals))
    return {
        "total": total,
        "span": span,
        "busy": busy,
        "outside": max(total - span, 0.0),
        "mean_service": busy / len(intervals),
        "mean_unstalled_service": (busy - read_stalls) / len(intervals),
        "requests": len(intervals),
        "stalls": read_stalls + gap_stalls,
        "cpu": span - busy - gap_stalls,
    }


def median_of(runs: Sequence[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs) if runs else 0.0


def runqueue_ms(runs: Sequence[dict[str, float]]) -> float | None:
    """The median run's time the backend waited for a CPU (ms), where the kernel said."""
    if not runs or any("runqueue" not in r for r in runs):
        return None
    return round(median_of(runs, "runqueue") / 1000.0, 2)


def _calibrate(
    chosen: Sequence[TimingCase], runs: dict[TimingCase, list[dict[str, float]]], spec: Any
) -> dict[str, Any]:
    """Per scan (see the module doc, "CPU" and "statement"):

    * ``cpu_scale``: the server's CPU between reads with no imposed latency under ``sync`` (the
      reads' span minus their service and minus any stall between them) over the model's elapsed time on a device with no latency
      (its CPU alone);
    * ``overhead_ms``: the statement's time outside the reads' span, the median over every run
      of the scan (it does not depend on the latency or the I/O settings).
    """
    out: dict[str, Any] = {}
    for cpu in _calibration_cases(chosen):
        server_cpu = median_of(runs[cpu], "cpu")
        model_cpu = _model_ms(cpu, spec, 0.0, None) * 1000.0
        scale = server_cpu / model_cpu if model_cpu > 0 and server_cpu > 0 else 1.0
        every = [r for c, rs in runs.items() if c.scan == cpu.scan for r in rs]
        out[cpu.scan] = {
            "cpu_scale": round(scale, 3),
            "server_cpu_ms": round(server_cpu / 1000.0, 3),
            "model_cpu_ms": round(model_cpu / 1000.0, 3),
            "overhead_ms": round(median_of(every, "outside") / 1000.0, 3),
        }
    return out


def run_timing(
    chosen: Sequence[TimingCase],
    *,
    nblocks: int = 256,
    repeats: int = 5,
    calibrate: bool = True,
    impl: Any = None,
    dsn: str | None = None,
    bindir: str | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Time ``chosen`` on the server and in the model; the JSON-ready table (see the module doc).

    The repeats are interleaved: each round runs every case once (grouped by ``io_method`` so a
    round restarts the server at most twice), so a machine whose load changes during the run
    moves every case alike instead of deciding some of them. The calibration cases (each scan
    with no imposed latency) run in every round too.
    """
    from ..impl.implementation import PostgresImplementation

    if not isinstance(nblocks, int) or not 16 <= nblocks <= 131072:
        raise ValueError(f"nblocks = {nblocks!r} is not valid; allowed: 16..131072")
    if not isinstance(repeats, int) or not 1 <= repeats <= 99:
        raise ValueError(f"repeats = {repeats!r} is not valid; allowed: 1..99")
    own = impl is None
    if impl is None:
        impl = PostgresImplementation(dsn=dsn, bindir=bindir, interpose=True, pytest_mode=False)
    spec = _spec(nblocks)
    extra = [c for c in _calibration_cases(chosen) if c not in chosen] if calibrate else []
    plan = sorted([*extra, *dict.fromkeys(chosen)], key=lambda c: (c.io_method, c.direct))
    try:
        runs: dict[Any, list[dict[str, float]]] = measure(
            impl,
            [(c, _request(c, spec, model=False), _device(c.latency_us), c.latency_us) for c in plan],
            repeats,
            progress,
        )
        version = impl.server.version
    finally:
        if own:
            impl.close()
    calibration = _calibrate(chosen, runs, spec) if calibrate else None
    rows = []
    for case in chosen:
        server_ms = median_of(runs[case], "total") / 1000.0
        # A scan's elapsed time is linear in its requests' service, so the per-run mean, not the
        # median request, is what the model's one latency must be: a read whose process woke up
        # late (a busy machine) kept the scan waiting just as long as the latency did.
        served = median_of(runs[case], "mean_service")
        if calibration is not None:
            cal = calibration[case.scan]
            costs = scaled_costs(cal["cpu_scale"])
            overhead_ms = cal["overhead_ms"]
        else:
            costs, overhead_ms = None, 0.0
        model_ms = _model_ms(case, spec, served, costs) + overhead_ms
        # The machine's share: stalls inside the reads' span, and a statement that took a stall
        # longer than the scan's usual overhead outside it.
        stalled = [r["stalls"] + max(0.0, r["outside"] - overhead_ms * 1000.0 - STALL_US) for r in runs[case]]
        unstalled = (
            statistics.median(r["total"] - st for r, st in zip(runs[case], stalled, strict=True)) / 1000.0
        )
        unstalled_model = (
            _model_ms(case, spec, median_of(runs[case], "mean_unstalled_service"), costs) + overhead_ms
        )
        rows.append(
            {
                "scan": case.scan,
                "latency_us": case.latency_us,
                "io_method": case.io_method,
                "eic": case.eic,
                "direct": case.direct,
                "service_us": round(served, 1),
                "requests": round(median_of(runs[case], "requests")),
                "server_ms": round(server_ms, 2),
                "server_runs_ms": [round(r["total"] / 1000.0, 2) for r in runs[case]],
                "overhead_ms": round(overhead_ms, 3),
                "stalls_ms": round(statistics.median(stalled) / 1000.0, 2),
                "runqueue_ms": runqueue_ms(runs[case]),
                "unstalled_ms": round(unstalled, 2),
                "unstalled_model_ms": round(unstalled_model, 2),
                "unstalled_ratio": round(unstalled_model / unstalled, 3) if unstalled > 0 else None,
                "model_ms": round(model_ms, 2),
                "ratio": round(model_ms / server_ms, 3) if server_ms > 0 else None,
            }
        )
    return {
        "server_version": version,
        "nblocks": nblocks,
        "repeats": repeats,
        "calibration": calibration,
        "rows": rows,
        "speedups": speedups(rows),
    }


def speedups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Unstreamed / streamed time per configuration, on both sides, and how far apart they are."""
    by: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in rows:
        key = (r["latency_us"], r["io_method"], r["eic"], r["direct"])
        by.setdefault(key, {})[r["scan"]] = r
    out = []
    for (lat, method, eic, direct), scans in by.items():
        if not all(s in scans for s in _PAIR):
            continue
        streamed, unstreamed = scans[_PAIR[0]], scans[_PAIR[1]]
        server = unstreamed["server_ms"] / streamed["server_ms"]
        model = unstreamed["model_ms"] / streamed["model_ms"]
        entry = {
            "latency_us": lat,
            "io_method": method,
            "eic": eic,
            "direct": direct,
            "server_speedup": round(server, 2),
            "model_speedup": round(model, 2),
            "deviation": round(model / server - 1.0, 3),
        }
        if all(r.get("unstalled_ms") and r.get("unstalled_model_ms") for r in (streamed, unstreamed)):
            # The same on both sides with the machine's stalls taken out (see split_run).
            s_server = unstreamed["unstalled_ms"] / streamed["unstalled_ms"]
            s_model = unstreamed["unstalled_model_ms"] / streamed["unstalled_model_ms"]
            entry["unstalled_deviation"] = round(s_model / s_server - 1.0, 3)
        out.append(entry)
    return out


def _within(ratio: float | None) -> str:
    return "" if ratio is not None and 0.8 <= ratio <= 1.25 else "  <-- outside 0.8-1.25"


def _opt(value: float | None, fmt: str) -> str:
    return fmt.format(value) if value is not None else " " * len(fmt.format(0.0))


def format_timing(result: dict[str, Any]) -> str:
    """The table as plain text (what the command prints)."""
    lines = [
        f"PostgreSQL {result['server_version']}, {result['nblocks']} blocks, median of {result['repeats']}"
    ]
    cal = result.get("calibration")
    if cal:
        lines.append(
            "calibration, per scan with no imposed latency (CPU under sync; statement outside the reads):"
        )
        for scan, c in cal.items():
            lines.append(
                f"  {scan:<20} CPU {c['server_cpu_ms']:.2f} ms server / {c['model_cpu_ms']:.2f} ms model: "
                f"CpuCosts x {c['cpu_scale']:.2f}; statement {c['overhead_ms']:.2f} ms"
            )
    lines.append(
        f"{'scan':<20} {'latency':>8} {'method':<7} {'eic':>3} {'served':>8} {'reqs':>5} "
        f"{'stmt ms':>8} {'model ms':>9} {'server ms':>10} {'ratio':>6} {'stalls':>7} {'w/o':>5} {'runq':>7}"
    )
    for r in result["rows"]:
        lines.append(
            f"{r['scan']:<20} {r['latency_us'] / 1000:>6g}ms {r['io_method']:<7} {r['eic']:>3} "
            f"{r['service_us']:>6.0f}us {r['requests']:>5} {r.get('overhead_ms', 0.0):>8.2f} "
            f"{r['model_ms']:>9.2f} {r['server_ms']:>10.2f} "
            f"{r['ratio']:>6.2f}{' direct' if r['direct'] else ''} {_opt(r.get('stalls_ms'), '{:>5.2f}ms')} "
            f"{_opt(r.get('unstalled_ratio'), '{:>5.2f}')} {_opt(r.get('runqueue_ms'), '{:>5.2f}ms')}"
            f"{_within(r['ratio'])}"
        )
    if result["speedups"]:
        lines.append("streamed (pg_prewarm buffer) vs unstreamed (pg_prewarm read): unstreamed / streamed")
        for s in result["speedups"]:
            flag = "" if abs(s["deviation"]) <= 0.15 else "  <-- more than 15 % apart"
            lines.append(
                f"  {s['latency_us'] / 1000:g} ms {s['io_method']:<7} eic {s['eic']:>2}"
                f"{', direct' if s['direct'] else ''}: server "
                f"{s['server_speedup']:.2f}x, model {s['model_speedup']:.2f}x ({s['deviation']:+.1%})"
                + (f"; without stalls {s['unstalled_deviation']:+.1%}" if "unstalled_deviation" in s else "")
                + flag
            )
    return "\n".join(lines)


def markdown_timing(result: dict[str, Any]) -> str:
    """The table in Markdown (for ``docs/benchmarks.md``)."""
    lines = [
        "| scan | latency | io_method | eic | served per request | requests | statement ms | model ms | server ms "
        "| ratio | stalls ms | ratio without stalls | backend's run-queue wait ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['scan']} | {r['latency_us'] / 1000:g} ms{' (direct)' if r['direct'] else ''} | {r['io_method']} | {r['eic']} | "
            f"{r['service_us']:.0f} µs | {r['requests']} | {r.get('overhead_ms', 0.0):.2f} | "
            f"{r['model_ms']:.2f} | {r['server_ms']:.2f} | "
            f"{r['ratio']:.2f} | {_opt(r.get('stalls_ms'), '{:.2f}').strip()} | "
            f"{_opt(r.get('unstalled_ratio'), '{:.2f}').strip()} | {_opt(r.get('runqueue_ms'), '{:.2f}').strip()} |"
        )
    if result["speedups"]:
        lines += [
            "",
            "| latency | io_method | eic | server speedup | model speedup | deviation | deviation without stalls |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s in result["speedups"]:
            lines.append(
                f"| {s['latency_us'] / 1000:g} ms{' (direct)' if s['direct'] else ''} | {s['io_method']} | {s['eic']} | "
                f"{s['server_speedup']:.2f}x | "
                f"{s['model_speedup']:.2f}x | {s['deviation']:+.1%} | "
                + (f"{s['unstalled_deviation']:+.1%} |" if "unstalled_deviation" in s else "|")
            )
    return "\n".join(lines)
