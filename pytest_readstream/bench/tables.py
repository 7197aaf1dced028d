"""The seed threads' published tables, and the model setup that reproduces each of them.

Each :class:`SeedTable` holds the figures a thread published (copied from the thread, with the
row names it used), the setup the thread describes (table size and layout, ``shared_buffers``,
``io_method`` and workers, direct I/O, ``effective_io_concurrency``, ``io_combine_limit``, clients,
read and write delays) as :class:`~pytest_readstream.bench.runs.Run` objects, a *device shape*
with one free parameter, and the one published figure that parameter is fitted to
(:class:`CalibSpec`). What the thread leaves open is chosen here and said in the table's
``assumptions``; :func:`build_tables` returns them all, and ``bench_seeds`` runs them.

Threads and tables:

* **sample-scan** (streamed TABLESAMPLE, against master): the 64 GiB table (five queries, master
  vs patch), 8 concurrent clients, the ``effective_io_concurrency``/cached remarks, and the
  ``SYSTEM_TIME(100)`` table by ``io_method`` × ``effective_io_concurrency`` on a 1 GiB table;
* **online-checksums** (streamed ``ProcessSingleRelationFork``): the 956,815-block table with
  ``io_method`` sync and worker: times, reads and ``io_time``;
* **streamify** (streamed ``pgstattuple_approx`` and hash VACUUM): ``pgstattuple_small`` and
  ``hash_vacuum`` with io_uring and workers, and ``hash_vacuum_medium`` with a 2 ms and a 0 ms
  write delay (the thread's point about Amdahl's law).

``scale`` (< 1 in tests) shrinks relation sizes and sample sizes proportionally; published
figures that grow with the work done (``extensive`` rows: times, reads) are compared after
dividing the simulated value by ``scale``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from reference_impl import DEVICE_PROFILES, DeviceProfile

from .calibration import scaled_profile
from .runs import Run

__all__ = [
    "RowSpec",
    "CalibSpec",
    "SeedTable",
    "build_tables",
    "METRICS",
    "UNITS",
    "THREADS",
]

THREADS = {
    "sample-scan": "[PATCH] Use streaming read I/O in sample scans",
    "online-checksums": "Use streaming read I/O when enabling data checksums online",
    "streamify": "Re: Streamify more code paths",
}

METRICS: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "elapsed": lambda r: r["elapsed_us"],
    "reads": lambda r: r["reads"],
    "index_reads": lambda r: r["index_reads"],
    "io_time": lambda r: r["io_time_us"],
    "read_write_time": lambda r: None if r["io_time_us"] is None else r["io_time_us"] + r["write_time_us"],
    "write_time": lambda r: r["write_time_us"],
    "writes": lambda r: r["writes"],
    "tps": lambda r: r.get("tps"),
}
"""Row metric → its value from ``simulate_run``'s result (``time_ratio`` rows divide two runs)."""

_TALLY_METRICS = frozenset({"io_time", "read_write_time", "index_reads"})

UNITS: dict[str, float] = {
    "µs": 1.0,
    "ms": 1e-3,
    "s": 1e-6,
    "reads": 1.0,
    "writes": 1.0,
    "TPS": 1.0,
    "×": 1.0,
}
"""Unit → factor from the metric's own unit (µs for times) to the published unit."""


@dataclass
class RowSpec:
    """One published figure and the run(s) that simulate it.

    ``metric`` names what is read from the run's result (:data:`METRICS`), or ``time_ratio``:
    ``runs[1]``'s elapsed time over ``runs[0]``'s (rows that publish a relative change).
    ``pair``/``side`` ("base" or "patch") group the rows whose ratio is a published speedup.
    ``check`` for ``time_ratio`` rows: ``"tie"`` (published "almost unchanged") or ``"direction"``.
    """

    row: str
    published: float
    unit: str
    runs: tuple[Run, ...]
    metric: str = "elapsed"
    pair: str | None = None
    side: str | None = None
    note: str = ""
    check: str | None = None
    extensive: bool = True


@dataclass
class CalibSpec:
    """Which published figure fits which device parameter, and on what run.

    ``x0`` and ``x1`` are the solver's two starting points; ``x0`` is set near a previous fit so
    that the first run usually lands within tolerance, but the solver always measures and, if the
    model has changed, moves on from there. ``fraction`` < 1: the run is a proportional slice.
    """

    figure: str
    parameter: str
    run: Run
    published: float
    unit: str
    metric: str = "elapsed"
    x0: float = 50.0
    x1: float = 100.0
    lo: float = 1.0
    hi: float = 100_000.0
    fraction: float = 1.0


@dataclass
class SeedTable:
    """One published table with its model setup (see the module docstring)."""

    key: str
    thread: str
    title: str
    setup: str
    assumptions: list[str]
    device: Callable[[float], DeviceProfile]
    calibration: CalibSpec
    rows: list[RowSpec]
    scans: tuple[str, ...]
    shapes: tuple[str, ...] = ()
    pairs: dict[str, str] = field(default_factory=dict)
    reads_layout_known: bool = False
    scale: float = 1.0

    def runs(self, x: float) -> list[Run]:
        """Every distinct run of the table, with the device for parameter value ``x``."""
        dev = self.device(x)
        seen: dict[Run, None] = {}
        for r in self.rows:
            for run in r.runs:
                seen[self.prepared(run).with_device(dev)] = None
        return list(seen)

    def prepared(self, run: Run) -> Run:
        """``run`` with the read tally on only if a row of the table needs it."""
        needs = any(r.metric in _TALLY_METRICS for r in self.rows if run in r.runs)
        if run == self.calibration.run and self.calibration.metric in _TALLY_METRICS:
            needs = True
        return replace(run, track_reads=needs)


def _settings(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kw.items()))


def _fixed_workers(n: int) -> dict[str, int]:
    """A fixed pool of ``n`` I/O workers on master, whose pool sizes itself between
    ``io_min_workers`` and ``io_max_workers`` (PostgreSQL 18's ``io_workers`` is not a setting
    there): both bounds ``n``."""
    return {"io_min_workers": n, "io_max_workers": n}


def _params(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in kw.items() if v is not None))


def _base_patch_rows(
    name: str,
    runs: tuple[Run, Run],
    published: tuple[float, float],
    unit: str = "ms",
    *,
    figure: str = "",
    metric: str = "elapsed",
    base_word: str = "base",
    note: str = "",
) -> list[RowSpec]:
    """The two rows of one published base-vs-patch comparison, paired for its speedup.

    ``runs`` and ``published`` are (base, patch). The rows are named ``"<name> <base_word>
    <figure>"`` and ``"<name> patch <figure>"`` (the threads call the base "base", "master" or
    "HEAD"; ``figure`` is empty for the elapsed time) and share the pair ``"<name> <figure>"``,
    which ``bench_seeds`` turns into the published speedup or reduction.
    """
    suffix = f" {figure}" if figure else ""
    pair = name + suffix
    (base_run, patch_run), (base, patch) = runs, published
    return [
        RowSpec(
            f"{name} {base_word}{suffix}",
            base,
            unit,
            (base_run,),
            metric=metric,
            pair=pair,
            side="base",
            note=note,
        ),
        RowSpec(
            f"{name} patch{suffix}",
            patch,
            unit,
            (patch_run,),
            metric=metric,
            pair=pair,
            side="patch",
            note=note,
        ),
    ]


def _io_method_name(method: str, workers: int) -> str:
    """How the streamify thread names a configuration: ``io_uring``, or ``worker=<io_workers>``."""
    return "io_uring" if method == "io_uring" else f"worker={workers}"


def _shape_nblocks(full_nblocks: int, scale: float) -> int | None:
    """A named shape's heap size at ``scale``: ``None`` (the shape's own) at full scale.

    ``full_nblocks`` is the shape's own size; scaled, it shrinks in proportion, to 64 blocks at
    the least.
    """
    return None if scale == 1.0 else max(64, round(full_nblocks * scale))


_PLACEHOLDER = DEVICE_PROFILES["nvme"]


# ------------------------------------------------------------------------------------ sample scan
SAMPLE_SCANS = {
    "system": "tablesample_system",
    "bernoulli": "tablesample_bernoulli",
    "system_rows": "tablesample_system_rows",
    "system_time": "tablesample_system_time",
}
_SAMPLE_SEED = 20260826  # a fixed REPEATABLE seed stands in for the run's random one


def _sample_device(latency: float) -> DeviceProfile:
    """NVMe SSD: random 8 kB reads cost ``latency``; the next 8 kB after a read costs a fifth.

    SSDs read ahead internally, which is why the thread's one-block-at-a-time BERNOULLI scan
    (sequential) ran at 18 µs per page against ~88 µs for the random ones (SYSTEM).
    """
    return scaled_profile(
        DEVICE_PROFILES["nvme"],
        "nvme-sample-thread",
        read_latency_us=latency,
        sequential_latency_us=latency / 5.0,
    )


_SAMPLE_SHAPE = "sample-thread-64gib"
_SAMPLE_COSTS = (("page_process_us", 8.0),)  # the thread's CPU per sampled page (see assumptions)


def _sample_run(
    settings: tuple[tuple[str, Any], ...],
    variant: str,
    label: str,
    *,
    method: str,
    nblocks: int,
    **params: Any,
) -> Run:
    """A sampling scan (``method``: a key of :data:`SAMPLE_SCANS`) of the sample thread's table.

    Every sample-scan table was measured by the same author on the same machine: the same
    one-row-per-page shape (``nblocks`` of it) and the same per-page CPU. ``params`` are the
    scan's parameters (``None`` values left out).
    """
    return Run(
        settings=settings,
        device=_PLACEHOLDER,
        scan=SAMPLE_SCANS[method],
        variant=variant,
        shape=_SAMPLE_SHAPE,
        nblocks=nblocks,
        params=_params(**params),
        costs=_SAMPLE_COSTS,
        label=label,
    )


def _sample_tables(scale: float) -> list[SeedTable]:
    nblocks = max(1000, round(8_388_608 * scale))
    settings = _settings(
        version="master",
        io_method="worker",
        **_fixed_workers(32),
        debug_io_direct="data",
        shared_buffers=16384,
        effective_io_concurrency=16,
        synchronize_seqscans=False,
    )

    def run(variant: str, label: str, settings: tuple = settings, **params: Any) -> Run:
        return _sample_run(settings, variant, label, nblocks=nblocks, **params)

    rows_limit = max(100, round(100_000 * scale))
    queries: list[tuple[str, float, float, dict[str, Any]]] = [
        (
            "SYSTEM(0.1)",
            829.0,
            121.0,
            {"method": "system", "sample_percent": 0.1, "repeatable_seed": _SAMPLE_SEED},
        ),
        (
            "SYSTEM(1)",
            7530.0,
            890.0,
            {"method": "system", "sample_percent": 1.0, "repeatable_seed": _SAMPLE_SEED},
        ),
        (
            "SYSTEM(10)",
            70840.0,
            10620.0,
            {"method": "system", "sample_percent": 10.0, "repeatable_seed": _SAMPLE_SEED},
        ),
        (
            f"SYSTEM_ROWS({rows_limit})",
            9050.0,
            970.0,
            {"method": "system_rows", "rows": rows_limit, "seed": _SAMPLE_SEED},
        ),
        (
            f"BERNOULLI(100) LIMIT {rows_limit}",
            1830.0,
            560.0,
            {
                "method": "bernoulli",
                "sample_percent": 100.0,
                "limit": rows_limit,
                "repeatable_seed": _SAMPLE_SEED,
            },
        ),
    ]
    rows: list[RowSpec] = []
    for name, base, patch, prm in queries:
        runs = (run("unstreamed", f"{name} master", **prm), run("streamed", f"{name} patch", **prm))
        rows += _base_patch_rows(name, runs, (base, patch), base_word="master")
    # Calibrate on an eighth of the table: SYSTEM(1) reads 1 % of it, page by page, each page
    # costing the same, so the time of the slice is an eighth of the whole run's.
    fraction = 0.125
    calib_run = replace(
        rows[2].runs[0], nblocks=round(nblocks * fraction), label="SYSTEM(1) master, 1/8 slice"
    )
    main = SeedTable(
        key="sample-64gib",
        thread="sample-scan",
        title="64 GiB table (8,388,608 pages, one row per page): master vs patch",
        setup=(
            "version=master, io_method=worker, debug_io_direct=data, shared_buffers=128MB, "
            "effective_io_concurrency=16; cold shared buffers (restart before each run)"
        ),
        assumptions=[
            "a fixed pool of 32 I/O workers (io_min_workers = io_max_workers = 32): master grows its pool "
            "under load and the thread does not say how far; the 8-client figure needs about 32 reads in flight",
            "8 µs of backend CPU per sampled page (page_process_us): the patched runs are CPU-bound "
            "(BERNOULLI LIMIT at 5.6 µs/page); PostgreSQL also spends CPU per I/O submitted to a worker, "
            "which the model charges nowhere else",
            "device: the 'nvme' profile (64 channels, 3 GB/s) with sequential 8 kB reads at 1/5 of the "
            "random latency (the SSD's own read-ahead)",
            "a fixed REPEATABLE seed stands in for each query's random seed",
        ],
        device=_sample_device,
        calibration=CalibSpec(
            figure="SYSTEM(1) master",
            parameter="read_latency_us",
            run=calib_run,
            published=7530.0 * fraction,
            unit="ms",
            x0=75.0,
            x1=90.0,
            lo=5.0,
            hi=5000.0,
            fraction=fraction,
        ),
        rows=rows,
        scans=tuple(SAMPLE_SCANS[m] for m in ("system", "system_rows", "bernoulli")),
        shapes=(_SAMPLE_SHAPE,),
    )
    # 8 concurrent clients: each runs SYSTEM(1) with its own seed; TPS over a window of pages.
    window = max(200, round(2000 * scale))
    seeds = tuple(_params(repeatable_seed=_SAMPLE_SEED + i) for i in range(8))

    def clients(variant: str, label: str) -> Run:
        r = run(variant, label, method="system", sample_percent=1.0)
        return replace(
            r, clients=8, client_params=seeds, cancel_after=window, query_pages=round(nblocks / 100)
        )

    tps_rows = [
        RowSpec(
            "8 clients SYSTEM(1) master",
            1.06,
            "TPS",
            (clients("unstreamed", "8 clients master"),),
            metric="tps",
            pair="8 clients SYSTEM(1)",
            side="base",
            extensive=False,
            note=f"throughput over each client's first {window} pages, as TPS of the whole query",
        ),
        RowSpec(
            "8 clients SYSTEM(1) patch",
            4.29,
            "TPS",
            (clients("streamed", "8 clients patch"),),
            metric="tps",
            pair="8 clients SYSTEM(1)",
            side="patch",
            extensive=False,
        ),
    ]
    # The remarks: eic=0, eic=1 (worker), all cached. Published as relative changes.
    s1: dict[str, Any] = {"method": "system", "sample_percent": 1.0, "repeatable_seed": _SAMPLE_SEED}
    s01: dict[str, Any] = {"method": "system", "sample_percent": 0.1, "repeatable_seed": _SAMPLE_SEED}

    def with_eic(eic: int) -> tuple:
        return tuple(sorted({**dict(settings), "effective_io_concurrency": eic}.items()))

    remark_rows = [
        RowSpec(
            "eic=0: patch time / master time",
            1.0,
            "×",
            (
                run("unstreamed", "eic0 master", with_eic(0), **s1),
                run("streamed", "eic0 patch", with_eic(0), **s1),
            ),
            metric="time_ratio",
            check="tie",
            extensive=False,
            note="'performance was almost unchanged' (SYSTEM(1))",
        ),
        RowSpec(
            "worker eic=1: patch time / master time",
            1.08,
            "×",
            (
                run("unstreamed", "eic1 master", with_eic(1), **s1),
                run("streamed", "eic1 patch", with_eic(1), **s1),
            ),
            metric="time_ratio",
            check="direction",
            extensive=False,
            note="'about 8% slower' (SYSTEM(1))",
        ),
        RowSpec(
            "all cached: patch time / master time",
            1.015,
            "×",
            (
                replace(run("unstreamed", "cached master", **s01), warm=True),
                replace(run("streamed", "cached patch", **s01), warm=True),
            ),
            metric="time_ratio",
            check="direction",
            extensive=False,
            note="'1% to 2%' slower; SYSTEM(0.1) REPEATABLE, whose 8,389 pages fit in shared buffers, run twice",
        ),
    ]
    conc = SeedTable(
        key="sample-concurrency",
        thread="sample-scan",
        title="64 GiB table: 8 concurrent clients, effective_io_concurrency and cached remarks",
        setup=main.setup + "; 8 clients share one pool, one device and one I/O worker pool",
        assumptions=main.assumptions,
        device=_sample_device,
        calibration=main.calibration,
        rows=tps_rows + remark_rows,
        scans=(SAMPLE_SCANS["system"],),
        shapes=main.shapes,
    )
    return [main, conc, _system_time_table(scale)]


def _system_time_table(scale: float) -> SeedTable:
    # Not scaled: a 100 ms time limit touches ~1,500 pages whatever the table's size, and the
    # overshoot being measured is absolute. ``scale`` is accepted for a uniform interface.
    del scale
    nblocks = 131_072
    time_ms = 100
    published = [
        ("worker", 16, 100.14, 100.83),
        ("worker", 256, 100.11, 103.23),
        ("sync", 16, 100.08, 101.51),
        ("sync", 256, 100.11, 123.31),
        ("io_uring", 16, 100.10, 100.17),
        ("io_uring", 256, 100.10, 100.19),
    ]
    rows: list[RowSpec] = []
    for method, eic, base, patch in published:
        settings = _settings(
            version="master",
            io_method=method,
            **_fixed_workers(2),
            debug_io_direct="data",
            shared_buffers=262144,
            io_combine_limit=16,
            effective_io_concurrency=eic,
            synchronize_seqscans=False,
        )
        for variant, side, value in (("unstreamed", "base", base), ("streamed", "patch", patch)):
            label = f"{method} eic={eic} {'unpatched' if side == 'base' else 'patched'}"
            r = _sample_run(
                settings,
                variant,
                label,
                method="system_time",
                nblocks=nblocks,
                time_ms=float(time_ms),
                seed=_SAMPLE_SEED,
            )
            rows.append(
                RowSpec(label, value, "ms", (r,), pair=f"{method} eic={eic}", side=side, extensive=False)
            )
    calib = next(r for r in rows if r.row == "sync eic=256 patched")
    return SeedTable(
        key="sample-system-time",
        thread="sample-scan",
        title="SYSTEM_TIME(100) on a 1 GiB table (131,072 pages, one row per page), median of five",
        setup=(
            "version=master, shared_buffers=2GB, io_combine_limit=128kB, debug_io_direct=data, "
            "2 I/O workers (io_min_workers = io_max_workers = 2), table evicted before each query"
        ),
        assumptions=[
            "the same NVMe shape and per-page CPU as the 64 GiB table (same author, same machine)",
            "the time limit counts from the first block choice; the overshoot is what was queued",
        ],
        device=_sample_device,
        calibration=CalibSpec(
            figure="sync eic=256 patched",
            parameter="read_latency_us",
            run=calib.runs[0],
            published=calib.published,
            unit="ms",
            x0=75.0,
            x1=90.0,
            lo=5.0,
            hi=5000.0,
        ),
        rows=rows,
        scans=(SAMPLE_SCANS["system_time"],),
        shapes=(_SAMPLE_SHAPE,),
    )


# ------------------------------------------------------------------------------------ checksums
CHECKSUMS_SCAN = "data_checksums"


def _checksums_device(write_latency: float) -> DeviceProfile:
    """A SATA SSD (the thread: "my test storage is SSD") whose direct 8 kB writes cost ``write_latency``."""
    return scaled_profile(
        DEVICE_PROFILES["sata-ssd"], "sata-ssd-checksums-thread", write_latency_us=write_latency
    )


def _checksums_table(scale: float) -> SeedTable:
    nblocks = max(2000, round(956_815 * scale))

    def run(method: str, variant: str, label: str, fraction: float = 1.0) -> Run:
        return Run(
            settings=_settings(
                version="master", io_method=method, debug_io_direct="data", **_fixed_workers(3)
            ),
            device=_PLACEHOLDER,
            scan=CHECKSUMS_SCAN,
            variant=variant,
            shape="checksums-thread",
            nblocks=max(1000, round(nblocks * fraction)),
            params=_params(cluster=True, cluster_resident=True) if scale == 1.0 else (),
            label=label,
        )

    rows = []
    for method, base, patch in (("sync", 460_003.0, 383_069.0), ("worker", 458_885.0, 352_155.0)):
        name = f"io_method={method}"
        runs = (run(method, "unstreamed", f"{method} HEAD"), run(method, "streamed", f"{method} patch"))
        rows += _base_patch_rows(name, runs, (base, patch), base_word="HEAD")
        rows += _base_patch_rows(
            name, runs, (958_482.0, 60_248.0), "reads", figure="reads", metric="reads", base_word="HEAD"
        )
        if method == "sync":
            rows += _base_patch_rows(
                name,
                runs,
                (299_082.0, 264_387.0),
                figure="io_time",
                metric="read_write_time",
                base_word="HEAD",
            )
    fraction = 0.0625
    return SeedTable(
        key="checksums",
        thread="online-checksums",
        title="~7.5 GiB table (956,815 blocks), pg_enable_data_checksums(), median of five",
        setup="version=master, debug_io_direct=data, io_method sync / worker, defaults otherwise",
        assumptions=[
            "device: the 'sata-ssd' profile (150 µs reads, 520 MB/s); its write latency is the fitted "
            "parameter, since every block is also written back (full-page image, VACUUM ring)",
            "the other relations are the catalogs of a fresh cluster, pages a relation-opening pass "
            "touches already resident (the thread's 958,482 − 956,815 reads are other relations and forks)",
            "io_time is read time plus write time: streaming cut it by only 12 %, so it cannot be the "
            "reads alone (they drop 16-fold in number)",
            "a fixed pool of 3 I/O workers (io_min_workers = io_max_workers = 3: the PostgreSQL 18 default "
            "io_workers; the thread does not say)",
        ],
        device=_checksums_device,
        calibration=CalibSpec(
            figure="io_method=sync HEAD",
            parameter="write_latency_us",
            run=replace(run("sync", "unstreamed", "calibration slice", fraction), params=()),
            published=460_003.0 * fraction,
            unit="ms",
            x0=290.0,
            x1=250.0,
            lo=0.0,
            hi=20_000.0,
            fraction=fraction,
        ),
        rows=rows,
        scans=(CHECKSUMS_SCAN,),
        shapes=("checksums-thread",),
        reads_layout_known=True,
    )


# ------------------------------------------------------------------------------------ streamify
_SSD_WRITE_US = 25


def _delay_device(read_delay: float, write_delay: float = 2000.0) -> DeviceProfile:
    """An NVMe SSD behind a delay target (dm-delay): each request waits a fixed delay.

    The SSD's own latency under the delay is 80 µs per read (included in the fitted read delay)
    and 25 µs per write (added to the write delay), at 7 GB/s.
    """
    return DeviceProfile(
        "delayed-nvme",
        read_latency_us=max(0, round(read_delay)),
        write_latency_us=max(0, round(write_delay + _SSD_WRITE_US)),
        bandwidth_mb_s=7000.0,
        channels=256,
        description="NVMe SSD behind a fixed per-request delay (the streamify thread's read/write delays)",
    )


# Both pgstattuple_small base rows spend 11.2 s outside I/O (total − io_time: 11,223 ms with
# io_uring, 11,218 ms with workers), far more than the CPU of 20k tuples. That time is spent page
# by page, between the reads, not once around the scan: the patched runs take 10,950 ms and
# 11,470 ms in all while waiting only 55 ms and 70 ms for I/O, which is possible only if the
# stream's reads overlap it (260 reads of 12 ms take at least 195 ms with at most 16 in flight).
# So it is charged as CPU per page examined: 11.22 s over the shape's 4,138 heap pages.
_PGSTATTUPLE_PAGE_US = 11_220_000 / 4138


def _hash_index(scale: float) -> Any:
    """The shape's hash index (docs/scans/maintenance.md), shrunk in proportion when ``scale`` < 1.

    At full size the index is the one ``SHAPES["hash-vacuum-thread"]`` has: 3,258 buckets grown
    by splits, one overflow page on each of buckets 1,210..2,047, the layout inferred from the
    thread's read counts. Scaled, the same fractions of buckets and of overflowed buckets.
    """
    from reference_impl.relations import IndexSpec

    buckets = max(16, round(3258 * scale))
    lo, hi = round(1210 * buckets / 3258), round(2047 * buckets / 3258)
    return IndexSpec(
        "hash", buckets=buckets, overflow=tuple(1 if lo <= b <= hi else 0 for b in range(buckets))
    )


def _streamify_tables(scale: float) -> list[SeedTable]:
    tables = []
    pg_rows = []
    for method, workers, base, patch, io_base, io_patch in (
        ("io_uring", 3, 60_839.9, 10_949.9, 49_616.97, 55.25),
        ("worker", 3, 60_577.5, 11_470.0, 49_359.79, 69.60),
    ):
        name = _io_method_name(method, workers)
        settings = _settings(
            version="master", io_method=method, debug_io_direct="data", **_fixed_workers(workers)
        )

        def run(variant: str, label: str, settings: tuple = settings) -> Run:
            return Run(
                settings=settings,
                device=_PLACEHOLDER,
                scan="pgstattuple_approx",
                variant=variant,
                shape="pgstattuple-thread",
                nblocks=_shape_nblocks(4138, scale),
                params=(),
                costs=(("page_process_us", _PGSTATTUPLE_PAGE_US),),
                label=label,
            )

        runs = (
            run("unstreamed", f"pgstattuple_small {name} base"),
            run("streamed", f"pgstattuple_small {name} patch"),
        )
        pg_rows += [
            *_base_patch_rows(name, runs, (base, patch)),
            *_base_patch_rows(name, runs, (4139.0, 260.0), "reads", figure="reads", metric="reads"),
            *_base_patch_rows(name, runs, (io_base, io_patch), figure="io_time", metric="io_time"),
        ]
    tables.append(
        SeedTable(
            key="streamify-pgstattuple",
            thread="streamify",
            title="pgstattuple_small (20k tuples): pgstattuple_approx, base vs patch",
            setup="version=master, io_uring or worker=3; read and write delays on the device",
            assumptions=[
                "direct I/O (the benchmark's delays act on every read)",
                "device: a fast SSD behind a fixed per-request delay; the read delay is fitted",
                "11.2 s per run outside I/O (base total − base io_time: 11,223 ms with io_uring, "
                "11,218 ms with workers) is spent page by page between the reads, as the patched "
                "runs' 55 ms and 70 ms of io_time show: 2.71 ms of CPU per heap page examined",
                "io_time as PostgreSQL 18 counts it: a read executed by the backend in full, an "
                "asynchronous one only for the time the backend really waited",
            ],
            device=lambda x: _delay_device(x),
            calibration=CalibSpec(
                figure="io_uring base io_time",
                parameter="read_latency_us",
                run=pg_rows[0].runs[0],
                published=49_616.97,
                unit="ms",
                metric="io_time",
                x0=12_000.0,
                x1=10_000.0,
                lo=10.0,
                hi=200_000.0,
            ),
            rows=pg_rows,
            scans=("pgstattuple_approx",),
            shapes=("pgstattuple-thread",),
            reads_layout_known=True,
        )
    )
    tables.append(_hash_vacuum_table(scale))
    tables.append(_hash_vacuum_medium_table(scale))
    return tables


def _hash_vacuum_settings(method: str, workers: int) -> tuple[tuple[str, Any], ...]:
    """The settings of both hash_vacuum benchmarks: direct I/O and shared_buffers=1GB."""
    return _settings(
        version="master",
        io_method=method,
        **_fixed_workers(workers),
        debug_io_direct="data",
        shared_buffers=131072,
    )


def _hash_run(settings: tuple, stream: bool, label: str, scale: float = 1.0) -> Run:
    return Run(
        settings=settings,
        device=_PLACEHOLDER,
        scan="vacuum",
        variant="streamed",
        shape="hash-vacuum-thread",
        nblocks=_shape_nblocks(4425, scale),
        shape_changes=() if scale == 1.0 else (("indexes", (_hash_index(scale),)),),
        params=_params(hash_stream=stream),
        label=label,
    )


_LAYOUT_INPUT = "layout input: the index layout was inferred from these counts"


def _hash_vacuum_table(scale: float) -> SeedTable:
    rows = []
    for method, workers, base, patch, io_base, io_patch in (
        ("io_uring", 3, 199_929.0, 161_747.0, 47_084.8, 9_925.77),
        ("worker", 12, 203_417.0, 161_687.0, 48_356.3, 9_917.24),
    ):
        name = _io_method_name(method, workers)
        settings = _hash_vacuum_settings(method, workers)
        runs = (
            _hash_run(settings, False, f"hash_vacuum {name} base", scale),
            _hash_run(settings, True, f"hash_vacuum {name} patch", scale),
        )
        rows += [
            *_base_patch_rows(name, runs, (base, patch)),
            *_base_patch_rows(
                name, runs, (4665.0, 1615.0), "reads", figure="reads", metric="reads", note=_LAYOUT_INPUT
            ),
            *_base_patch_rows(name, runs, (io_base, io_patch), figure="io_time", metric="io_time"),
        ]
    return SeedTable(
        key="streamify-hash-vacuum",
        thread="streamify",
        title="hash_vacuum (1M tuples): VACUUM with a hash index, base vs patch",
        setup="version=master, io_uring or worker=12, debug_io_direct=data; heap and index cold",
        assumptions=[
            "device: a fast SSD behind one fixed per-request delay for reads and writes alike (the "
            "thread: 'both read and write delays are set to 2 ~ 5 ms'); the delay is fitted",
            "the table and index of SHAPES['hash-vacuum-thread']: 4,425 heap pages, 10 % of the rows "
            "deleted, a hash index of 3,258 buckets grown by splits with one overflow page on buckets "
            "1,210..2,047 — the layout docs/scans/maintenance.md infers from the thread's read counts, "
            "so those rows are inputs, not predictions",
            "shared_buffers=1GB: the pool size with which the model reproduces the patch's few fewer "
            "writes (ring escapes; docs/scans/maintenance.md)",
        ],
        device=lambda x: _delay_device(x, x),
        calibration=CalibSpec(
            figure="io_uring base",
            parameter="read_latency_us = write_latency_us",
            run=rows[0].runs[0],
            published=199_929.0,
            unit="ms",
            x0=11_100.0,
            x1=10_000.0,
            lo=10.0,
            hi=100_000.0,
        ),
        rows=rows,
        scans=("vacuum",),
        shapes=("hash-vacuum-thread",),
    )


def _hash_vacuum_medium_table(scale: float) -> SeedTable:
    settings = _hash_vacuum_settings("worker", 12)
    rows = []
    published = {
        2: (33_743.2, 27_371.3, 8_242.51, 1_725.03, 12_689.0, 12_651.0, 25_144.87, 25_041.75),
        0: (8_601.1, 2_234.0, 8_021.65, 1_637.87, 12_689.0, 12_651.0, 337.38, 288.15),
    }
    for wd, (base, patch, rt_b, rt_p, w_b, w_p, wt_b, wt_p) in published.items():
        tag = f"write-delay {wd} ms"
        delay = (("write_latency_us", wd * 1000 + _SSD_WRITE_US),)
        b = replace(_hash_run(settings, False, f"medium {tag} base", scale), device_changes=delay)
        p = replace(_hash_run(settings, True, f"medium {tag} patch", scale), device_changes=delay)
        runs = (b, p)
        rows += [
            *_base_patch_rows(tag, runs, (base, patch)),
            *_base_patch_rows(
                tag, runs, (4662.0, 1612.0), "reads", figure="reads", metric="reads", note=_LAYOUT_INPUT
            ),
            *_base_patch_rows(tag, runs, (rt_b, rt_p), figure="read_time", metric="io_time"),
            # The write counts are compared one by one, not paired: no reduction is derived.
            RowSpec(f"{tag} base writes", w_b, "writes", (b,), metric="writes"),
            RowSpec(f"{tag} patch writes", w_p, "writes", (p,), metric="writes"),
            *_base_patch_rows(tag, runs, (wt_b, wt_p), figure="write_time", metric="write_time"),
        ]
    calib = next(r for r in rows if r.row == "write-delay 0 ms base")
    return SeedTable(
        key="streamify-hash-vacuum-medium",
        thread="streamify",
        title="hash_vacuum_medium, worker=12: write delay 2 ms vs 0 ms (Amdahl's law)",
        setup=(
            "version=master, io_method=worker, io_min_workers = io_max_workers = 12, debug_io_direct=data; "
            "heap and index cold"
        ),
        assumptions=[
            "device: a fast SSD behind a fixed read delay (fitted) and the thread's write delay (2 or 0 ms)",
            "the same table, index and shared_buffers=1GB as hash_vacuum",
        ],
        device=lambda x: _delay_device(x, 2000.0),
        calibration=CalibSpec(
            figure="write-delay 0 ms base",
            parameter="read_latency_us",
            run=calib.runs[0],
            published=calib.published,
            unit="ms",
            x0=1560.0,
            x1=1400.0,
            lo=10.0,
            hi=100_000.0,
        ),
        rows=rows,
        scans=("vacuum",),
        shapes=("hash-vacuum-thread",),
    )


def build_tables(scale: float = 1.0) -> list[SeedTable]:
    """Every seed table, at ``scale`` (1.0 = the published sizes)."""
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"scale = {scale!r} is out of range: allowed 0 < scale <= 1")
    tables = [*_sample_tables(scale), _checksums_table(scale), *_streamify_tables(scale)]
    for t in tables:
        t.scale = scale
    return tables
