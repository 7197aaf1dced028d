"""``readstream bench seeds``: the seed threads' tables, published beside simulated.

For every table of the three seed threads (see :mod:`pytest_readstream.bench.tables`) this
module fits the table's device to one published figure, simulates every row on that device,
and prints each published figure beside the simulated one with their ratio, then each published
speedup (or reduction) beside the simulated one. It checks what the project promised:

* the **direction** of every speedup or regression (a relative change within ±1 % counts as
  "unchanged", and the thread's "almost unchanged" must come out that way);
* speedup **magnitudes within a factor of 1.5** of the published ones;
* **read-count reductions within 2 %** where the table's layout is known.

The rows are also returned (and written as JSON) as dicts with at least ``thread``, ``table``,
``row``, ``published``, ``simulated`` and ``unit``; rows that fitted the device say so in
``role``, derived rows (speedups) carry ``check`` and ``ok``. Simulations run in parallel worker
processes (``jobs``, two by default): first every table's calibration, then every run, longest
first. A table whose scan is not registered yet is reported with ``simulated: null`` and a note.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TextIO

from .calibration import Calibration, calibrate
from .runs import Run, relation_shapes, scan_available, simulate_run
from .tables import METRICS, UNITS, RowSpec, SeedTable, build_tables

__all__ = [
    "format_seed_markdown",
    "run_seed_benchmarks",
    "format_seed_rows",
    "table_rows",
    "TIE_BAND",
    "SPEEDUP_FACTOR",
    "READS_RTOL",
]

TIE_BAND = 0.01
"""A relative change smaller than this counts as "unchanged"."""
SPEEDUP_FACTOR = 1.5
"""Simulated speedups must be within this factor of the published ones."""
READS_RTOL = 0.02
"""Read-count reductions must be within this relative error where the layout is known."""


# ------------------------------------------------------------------------------------ workers
def _metric(row_metric: str, unit: str, results: list[dict[str, Any]]) -> float | None:
    if row_metric == "time_ratio":
        base, patch = results[0]["elapsed_us"], results[1]["elapsed_us"]
        return patch / base if base else None
    value = METRICS[row_metric](results[0])
    if value is None:
        return None
    return float(value) * UNITS[unit]


def _table(key: str, scale: float) -> SeedTable:
    for t in build_tables(scale):
        if t.key == key:
            return t
    raise KeyError(key)


def _calibrate_table(key: str, scale: float) -> tuple[Calibration, Run, dict[str, Any]]:
    """Worker: fit the table's device parameter to its calibration figure.

    Returns the calibration, and the calibration run at the fitted value with its result (so
    that a table row using the same run is not simulated twice).
    """
    table = _table(key, scale)
    cal = table.calibration
    seen: dict[float, tuple[Run, dict[str, Any]]] = {}

    figure_row = next((r for r in table.rows if r.row == cal.figure), None)
    per_scale = scale if figure_row is None or figure_row.extensive else 1.0

    def measure(x: float) -> float:
        run = table.prepared(cal.run).with_device(table.device(x))
        res = simulate_run(run)
        seen[x] = (run, res)
        value = _metric(cal.metric, cal.unit, [res])
        if value is None:
            raise RuntimeError(f"calibration run of {key} produced no {cal.metric}")
        return value / per_scale

    x, y, n = calibrate(measure, cal.published, x0=cal.x0, x1=cal.x1, lo=cal.lo, hi=cal.hi)
    done_run, done_res = seen[x]
    return (
        Calibration(
            table=key,
            figure=cal.figure,
            published=cal.published / cal.fraction if cal.fraction != 1.0 else cal.published,
            unit=cal.unit,
            parameter=cal.parameter,
            value=x,
            simulated=y / cal.fraction if cal.fraction != 1.0 else y,
            runs=n,
            fraction=cal.fraction,
        ),
        done_run,
        done_res,
    )


def _timed_run(run: Run) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    res = simulate_run(run)
    return res, time.perf_counter() - t0


class _Inline(Executor):
    """A sequential executor (``jobs=1``): same interface, no processes."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        from concurrent.futures import Future

        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            fut.set_exception(exc)
        return fut


def _executor(jobs: int) -> Executor:
    if jobs <= 1:
        return _Inline()
    ctx = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)


def _run_cost(run: Run) -> float:
    """A rough order for scheduling: simulated pages × clients."""
    params = dict(run.params)
    n: float = run.nblocks or 10_000
    if run.scan == "tablesample_system":
        n = n * params.get("sample_percent", 1.0) / 100.0
    elif "time_ms" in params:
        n = params["time_ms"] * 20
    elif "rows" in params:
        n = params["rows"]
    elif "limit" in params:
        n = params["limit"]
    if run.cancel_after is not None:
        n = min(n, run.cancel_after)
    cost = n * run.clients
    if run.variant == "unstreamed":
        cost *= 1.6
    if run.clients > 1 and run.variant == "unstreamed":
        cost *= 6  # every read switches between simulated backends
    return cost


# ------------------------------------------------------------------------------------ rows
def _missing(table: SeedTable) -> str | None:
    lacking = [s for s in table.scans if not scan_available(s)]
    if lacking:
        return f"scan {', '.join(lacking)} not registered in reference_impl.scans"
    shapes = relation_shapes()
    lacking = [s for s in table.shapes if s not in shapes]
    if lacking:
        return f"relation shape {', '.join(lacking)} not defined"
    return None


def _verdict_speedup(pub: float, sim: float) -> tuple[bool, str]:
    pub_dir = 0 if abs(pub - 1.0) < TIE_BAND else (1 if pub > 1.0 else -1)
    sim_dir = 0 if abs(sim - 1.0) < TIE_BAND else (1 if sim > 1.0 else -1)
    if pub_dir != sim_dir:
        if sim_dir == 0:
            return False, "direction wrong: simulated unchanged"
        if pub_dir == 0:
            return False, "direction wrong: published unchanged"
        return False, "direction wrong"
    if pub_dir == 0:
        return True, "unchanged, as published"
    factor = max(pub, sim) / min(pub, sim) if pub > 0 and sim > 0 else math.inf
    if factor > SPEEDUP_FACTOR:
        return False, f"direction right, magnitude off by {factor:.2f}x"
    return True, f"direction right, within {factor:.2f}x"


def table_rows(
    table: SeedTable, calib: Calibration | None, results: dict[Run, dict[str, Any]], missing: str | None
) -> list[dict[str, Any]]:
    """The output rows of one table: its figures, then the derived speedups and reductions."""
    out: list[dict[str, Any]] = []
    values: dict[str, float | None] = {}
    dev = table.device(calib.value) if calib is not None else None
    for spec in table.rows:
        sim: float | None = None
        if missing is None and dev is not None:
            res = [results.get(table.prepared(r).with_device(dev)) for r in spec.runs]
            if all(r is not None for r in res):
                sim = _metric(spec.metric, spec.unit, res)  # type: ignore[arg-type]
                if sim is not None and spec.extensive:
                    sim /= table.scale
        values[spec.row] = sim
        row: dict[str, Any] = _base_row(table, spec.row, spec.published, sim, spec.unit)
        row["role"] = "simulated"
        if calib is not None and spec.row == calib.figure:
            row["role"] = "calibration"
            row["calibrated"] = {"parameter": calib.parameter, "value": round(calib.value, 1)}
        if spec.metric == "time_ratio":
            row.update(_ratio_check(spec, sim))
        if spec.note:
            row["note"] = spec.note
        if missing:
            row["note"] = missing
        out.append(row)
    out.extend(_pair_rows(table, values, missing))
    return out


def _base_row(table: SeedTable, name: str, published: float, sim: float | None, unit: str) -> dict[str, Any]:
    return {
        "key": table.key,
        "thread": table.thread,
        "table": table.title,
        "row": name,
        "published": published,
        "simulated": None if sim is None else _round(sim),
        "unit": unit,
        "ratio": None if sim is None or not published else _round(sim / published),
    }


def _round(x: float) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    digits = max(0, 4 - math.floor(math.log10(abs(x))))
    return round(x, digits)


def _ratio_check(spec: RowSpec, sim: float | None) -> dict[str, Any]:
    if sim is None:
        return {"check": spec.check, "ok": None}
    if spec.check == "tie":
        ok = abs(sim - 1.0) < max(TIE_BAND, 0.03)
        return {"check": "unchanged (within ±3 %)", "ok": ok}
    ok, why = _verdict_speedup(spec.published, sim)
    return {"check": why, "ok": ok}


def _speedup(base: float | None, patch: float | None, higher_better: bool) -> float | None:
    if base is None or patch is None or base == 0 or patch == 0:
        return None
    return patch / base if higher_better else base / patch


def _pair_rows(
    table: SeedTable, values: dict[str, float | None], missing: str | None
) -> list[dict[str, Any]]:
    pairs: dict[str, dict[str, RowSpec]] = {}
    for spec in table.rows:
        if spec.pair and spec.side:
            pairs.setdefault(spec.pair, {})[spec.side] = spec
    out = []
    for name, sides in pairs.items():
        if "base" not in sides or "patch" not in sides:
            continue
        base, patch = sides["base"], sides["patch"]
        higher_better = base.metric == "tps"
        reads = base.metric == "reads"
        kind = "speedup" if base.metric in ("elapsed", "tps") else "reduction"
        pub = _speedup(base.published, patch.published, higher_better)
        sim = _speedup(values.get(base.row), values.get(patch.row), higher_better)
        row = _base_row(table, f"{name} {kind}", _round(pub) if pub else pub, sim, "×")  # type: ignore[arg-type]
        row["role"] = "derived"
        if sim is None:
            row["ok"] = None
            row["check"] = missing or "not simulated"
        elif reads and table.reads_layout_known:
            err = abs(sim / pub - 1.0)  # type: ignore[operator]
            row["ok"] = err <= READS_RTOL
            row["check"] = f"read reduction within {err * 100:.1f} % (target {READS_RTOL * 100:.0f} %)"
        else:
            ok, why = _verdict_speedup(pub, sim)  # type: ignore[arg-type]
            row["ok"] = ok
            row["check"] = why
        out.append(row)
    return out


# ------------------------------------------------------------------------------------ report
def _fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    if unit == "×":
        return f"{x:.3g}×" if x < 10 else f"{x:.1f}×"
    if abs(x) >= 10_000:
        return f"{x:,.0f} {unit}"
    return f"{x:.5g} {unit}"


def format_seed_rows(rows: list[dict[str, Any]], calibrations: dict[str, Calibration] | None = None) -> str:
    """Plain-text tables: per seed table, each figure, then each speedup with its verdict."""
    lines: list[str] = []
    current = None
    for r in rows:
        key = (r["thread"], r["table"])
        if key != current:
            current = key
            lines.append("")
            lines.append(f"== {r['thread']} thread: {r['table']} ==")
            cal = (calibrations or {}).get(r["table"])
            if cal is not None:
                lines.append("   " + cal.describe())
            lines.append(f"   {'row':<44} {'published':>14} {'simulated':>14} {'sim/pub':>8}  check")
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        check = ""
        if r.get("role") == "calibration":
            check = "(calibration figure)"
        elif "ok" in r:
            mark = "n/a" if r["ok"] is None else ("ok" if r["ok"] else "MISS")
            check = f"{mark}: {r.get('check', '')}"
        elif r.get("note"):
            check = r["note"]
        lines.append(
            f"   {r['row']:<44} {_fmt(r['published'], r['unit']):>14} {_fmt(r['simulated'], r['unit']):>14} "
            f"{ratio:>8}  {check}"
        )
    return "\n".join(lines).lstrip("\n")


def format_seed_markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as Markdown tables, one per seed table (what docs/benchmarks.md shows)."""
    out: list[str] = []
    current = None
    for r in rows:
        if r["table"] != current:
            current = r["table"]
            out += ["", f"**{r['thread']}: {r['table']}**", ""]
            out += ["| row | published | simulated | sim/pub | check |", "| --- | ---: | ---: | ---: | --- |"]
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        if r.get("role") == "calibration":
            check = "calibration figure"
        elif "ok" in r:
            check = (
                "n/a" if r["ok"] is None else ("ok" if r["ok"] else "**miss**")
            ) + f": {r.get('check', '')}"
        else:
            check = r.get("note", "")
        out.append(
            f"| {r['row']} | {_fmt(r['published'], r['unit'])} | {_fmt(r['simulated'], r['unit'])} | {ratio} | {check} |"
        )
    return "\n".join(out).lstrip("\n") + "\n"


def run_seed_benchmarks(
    json_path: str | os.PathLike[str] | None = None,
    plot_dir: str | os.PathLike[str] | None = None,
    *,
    scale: float = 1.0,
    jobs: int | None = None,
    tables: Iterable[str] | None = None,
    out: TextIO | None = None,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Reproduce every seed table; print them, return the rows, optionally write JSON and plots.

    ``scale`` < 1 shrinks the tables (tests); ``jobs`` worker processes (default: two, or one
    on a single CPU); ``tables`` restricts to some table keys; ``out`` receives the printed
    tables (standard output by default, ``None`` printing nothing is not offered: pass
    ``open(os.devnull, "w")``). ``progress`` (a :class:`pytest_readstream._progress.Progress`)
    is told of every calibration and run as it finishes.
    """
    t_start = time.perf_counter()
    stream = out if out is not None else sys.stdout
    all_tables = build_tables(scale)
    if tables is not None:
        wanted = set(tables)
        unknown = wanted - {t.key for t in all_tables}
        if unknown:
            raise ValueError(
                f"unknown seed table(s) {', '.join(sorted(unknown))}: allowed {', '.join(t.key for t in all_tables)}"
            )
        all_tables = [t for t in all_tables if t.key in wanted]
    if jobs is None:
        jobs = max(1, min(2, os.cpu_count() or 1))
    missing = {t.key: _missing(t) for t in all_tables}
    ready = [t for t in all_tables if missing[t.key] is None]
    calibs: dict[str, Calibration] = {}
    results: dict[Run, dict[str, Any]] = {}
    with _executor(jobs) as pool:
        # Tables sharing a calibration (same figure and run) fit it once.
        by_cal: dict[tuple[str, Run], list[str]] = {}
        for t in ready:
            by_cal.setdefault((t.calibration.figure, t.calibration.run), []).append(t.key)
        # A table's runs are submitted as soon as its calibration is known (no barrier after the
        # calibrations: both workers stay busy), each batch longest first.
        futs = {pool.submit(_calibrate_table, keys[0], scale): keys for keys in by_cal.values()}
        if progress is not None:
            progress.add(len(futs))
        run_futs: dict[Run, Any] = {}
        by_key = {t.key: t for t in ready}
        for fut in as_completed(futs):
            keys = futs[fut]
            cal, done_run, done_res = fut.result()
            results[done_run] = done_res
            if progress is not None:
                progress.step(f"calibrated {', '.join(keys)}")
            batch: dict[Run, None] = {}
            for k in keys:
                calibs[k] = cal
                for r in by_key[k].runs(cal.value):
                    if r not in results and r not in run_futs:
                        batch[r] = None
            for r in sorted(batch, key=_run_cost, reverse=True):
                run_futs[r] = pool.submit(_timed_run, r)
            if progress is not None:
                progress.add(len(batch))
        # Collected as they finish, so that the progress shows each run when it ends.
        run_of = {rfut: r for r, rfut in run_futs.items()}
        for rfut in as_completed(run_of):
            r = run_of[rfut]
            res, seconds = rfut.result()
            results[r] = res
            if progress is not None:
                progress.step(f"ran {r.label or r.scan} ({seconds:.1f} s)")
    rows: list[dict[str, Any]] = []
    for t in all_tables:
        rows.extend(table_rows(t, calibs.get(t.key), results, missing[t.key]))
    by_title = {t.title: calibs[t.key] for t in all_tables if t.key in calibs}
    stream.write(format_seed_rows(rows, by_title) + "\n")
    checked = [r for r in rows if r.get("ok") is not None]
    passed = sum(1 for r in checked if r["ok"])
    elapsed = time.perf_counter() - t_start
    stream.write(
        f"\n{passed}/{len(checked)} checks passed; {len(rows)} rows from {len(all_tables)} tables "
        f"({sum(1 for t in all_tables if missing[t.key])} not simulated) in {elapsed:.1f} s\n"
    )
    for t in all_tables:
        if missing[t.key]:
            stream.write(f"not simulated: {t.title}: {missing[t.key]}\n")
    for row in rows:
        row.setdefault("note", "")
    if json_path is not None:
        Path(json_path).write_text(json.dumps(rows, indent=2) + "\n")
    if plot_dir is not None:
        from .plots import plot_seed_tables

        paths = plot_seed_tables(rows, plot_dir)
        paths += _timeline_plots(all_tables, calibs, Path(plot_dir))
        for path in paths:
            stream.write(f"plot written to {path}\n")
    return rows


# Runs drawn as I/O timelines with --plot: (table key, row, pages of the window, parameters
# replaced). The checksums run is drawn without the cluster's catalogs, which come first and
# would fill the window with one-page forks.
_TIMELINES: tuple[tuple[str, str, int | None, tuple[tuple[str, Any], ...] | None], ...] = (
    ("sample-64gib", "SYSTEM(1) master", 60, None),
    ("sample-64gib", "SYSTEM(1) patch", 400, None),
    ("sample-system-time", "sync eic=256 patched", None, None),
    ("checksums", "io_method=worker patch", 600, ()),
)


def _timeline_plots(tables: list[SeedTable], calibs: dict[str, Calibration], out: Path) -> list[Path]:
    """I/O timeline (with distance) PNGs of a few seed runs, at their calibrated devices."""
    from .plots import plot_trace
    from .runs import trace_run

    paths = []
    by_key = {t.key: t for t in tables}
    for key, row, pages, params in _TIMELINES:
        table = by_key.get(key)
        if table is None or key not in calibs:
            continue
        spec = next((r for r in table.rows if r.row == row), None)
        if spec is None:
            continue
        run = table.prepared(spec.runs[0]).with_device(table.device(calibs[key].value))
        if params is not None:
            run = dataclasses.replace(run, params=params)
        trace = trace_run(run, max_pages=pages)
        window = f", first {pages} pages" if pages else ""
        title = f"{table.thread}: {row}{window} ({trace['settings']['io_method']})"
        name = f"trace-{key}-{_slug_row(row)}.png"
        paths.append(plot_trace(trace, out / name, title=title))
    return paths


def _slug_row(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-").replace("--", "-")
