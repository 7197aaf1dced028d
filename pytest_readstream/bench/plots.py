"""Plots of the model's I/O: timelines, look-ahead distance, seed tables, read-ahead evaluation.

Everything here draws on matplotlib's object API (a ``Figure`` with an Agg canvas, never the
global ``pyplot`` state), imported only when a plot is asked for; without the ``plot`` extra a
call raises :class:`PlotUnavailable` naming the extra to install. Each function writes one small
PNG and returns its path.

* :func:`plot_trace` — a ``readstream trace`` dict: every read as a bar from submission to
  completion, on the lowest free *lane* (reads in flight at the same time sit on different
  lanes, as they occupy different device channels or I/O workers), the consumer's waits as
  red spans above them, and, when the trace has it, the look-ahead distance over time below.
* :func:`plot_distance` — ``ReadStream.stats.distance_history`` alone.
* :func:`plot_seed_tables` — per seed table, published beside simulated: its figures (log scale)
  and its speedups / reductions.
* :func:`plot_readahead` — the heuristic read-ahead evaluation (time and reads with and without).

:func:`attach_wait_recorder` collects a backend's waits (start, end) for a trace, by wrapping its
``wait_read_buffers`` from outside; the model itself records only their count and total.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PlotUnavailable",
    "plot_trace",
    "plot_distance",
    "plot_seed_tables",
    "plot_readahead",
    "attach_wait_recorder",
    "assign_lanes",
]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (the ``plot`` extra)."""


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailable(
            "plots need matplotlib, which is not installed: pip install 'pytest-readstream[plot]'"
        ) from exc
    fig = Figure(figsize=(width, height), dpi=80)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, png_path: str | os.PathLike[str]) -> Path:
    """Write the figure as a small PNG (an adaptive 64-colour palette: the plots are flat colours)."""
    import io

    path = Path(png_path)
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    try:
        from PIL import Image
    except ImportError:  # matplotlib needs Pillow, but keep the plain PNG if it is missing
        path.write_bytes(buf.getvalue())
        return path
    buf.seek(0)
    with Image.open(buf) as img:
        img.convert("RGB").quantize(colors=64).save(path, format="PNG", optimize=True)
    return path


def assign_lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """The lowest lane free at each interval's start (intervals in any order; ends exclusive)."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][1]))
    lane_end: list[int] = []
    lanes = [0] * len(intervals)
    for i in order:
        start, end = intervals[i]
        for k, free_at in enumerate(lane_end):
            if free_at <= start:
                lane_end[k] = end
                lanes[i] = k
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(end)
    return lanes


def attach_wait_recorder(backend: Any) -> list[tuple[int, int]]:
    """Record the (start, end) of every wait of ``backend`` for a read; returns the live list."""
    from reference_impl.trace import record_waits

    return record_waits(backend)


def _distance_series(trace: dict[str, Any]) -> list[tuple[int, int]]:
    hist = trace.get("distance_history", trace.get("distance")) or []
    return [(int(t), int(d)) for t, d in hist]


def plot_trace(
    trace: dict[str, Any],
    png_path: str | os.PathLike[str],
    *,
    title: str | None = None,
    max_reads: int = 4000,
) -> Path:
    """I/O timeline of a trace dict (``readstream trace --plot``): reads per lane, waits, distance.

    ``trace`` needs ``reads`` (each with ``submit_us``, ``complete_us``, ``nblocks``); ``waits``
    (pairs of µs) and ``distance_history`` / ``distance`` (pairs of µs, blocks) are drawn when
    present. Only the first ``max_reads`` reads are drawn (the title says so).
    """
    reads = list(trace.get("reads") or [])
    shown = reads[:max_reads]
    distance = _distance_series(trace)
    waits = [(int(a), int(b)) for a, b in trace.get("waits") or []]
    fig = _figure(9.0, 5.0 if distance else 3.8)
    if distance:
        ax, axd = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    else:
        ax, axd = fig.subplots(1, 1), None
    spans = [(int(r["submit_us"]), max(int(r["complete_us"]), int(r["submit_us"]) + 1)) for r in shown]
    lanes = assign_lanes(spans)
    to_ms = 1e-3
    colors = {1: "#9ecae1"}
    for (a, b), lane, r in zip(spans, lanes, shown):
        n = int(r.get("nblocks", 1))
        ax.broken_barh(
            [(a * to_ms, (b - a) * to_ms)],
            (lane + 0.1, 0.8),
            facecolors=colors.get(n, "#3182bd") if not r.get("synchronous") else "#fd8d3c",
            edgecolor="none",
        )
    top = (max(lanes) + 1) if lanes else 1
    if waits:
        ax.broken_barh(
            [(a * to_ms, (b - a) * to_ms) for a, b in waits if a <= (spans[-1][1] if spans else b)],
            (top + 0.3, 0.6),
            facecolors="#de2d26",
            edgecolor="none",
        )
        ax.text(0, top + 1.1, "consumer waits", color="#de2d26", fontsize=8, va="bottom")
    ax.set_ylim(0, top + (1.6 if waits else 0.2))
    ax.set_ylabel("reads in flight (lane)")
    cut = f", first {len(shown)} of {len(reads)} reads" if len(reads) > len(shown) else ""
    stats = trace.get("stats", {})
    head = title or (
        f"{trace.get('scan', 'scan')} ({trace.get('variant', '')}), "
        f"io_method={trace.get('settings', {}).get('io_method', '?')}, "
        f"{stats.get('reads', len(reads))} reads{cut}"
    )
    ax.set_title(head, fontsize=10)
    ax.text(
        0.99,
        0.02,
        "blue: asynchronous read (dark: combined), orange: executed by the backend",
        transform=ax.transAxes,
        ha="right",
        fontsize=7,
        color="#555555",
    )
    if axd is not None:
        xs = [t * to_ms for t, _ in distance]
        ys = [d for _, d in distance]
        end = spans[-1][1] * to_ms if spans else (xs[-1] if xs else 0)
        axd.step([*xs, end], [*ys, *ys[-1:]], where="post", color="#31a354")
        axd.set_ylabel("distance")
        axd.set_xlabel("simulated time (ms)")
        axd.set_ylim(bottom=0)
    else:
        ax.set_xlabel("simulated time (ms)")
    return _save(fig, png_path)


def plot_distance(
    history: Sequence[tuple[int, int]], png_path: str | os.PathLike[str], *, title: str = ""
) -> Path:
    """The look-ahead distance over simulated time (``ReadStream.stats.distance_history``)."""
    fig = _figure(7.0, 2.8)
    ax = fig.subplots(1, 1)
    xs = [t / 1000 for t, _ in history]
    ys = [d for _, d in history]
    ax.step(xs, ys, where="post", color="#31a354")
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("look-ahead distance (blocks)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "look-ahead distance", fontsize=10)
    return _save(fig, png_path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def plot_seed_tables(rows: Sequence[dict[str, Any]], out_dir: str | os.PathLike[str]) -> list[Path]:
    """One PNG per seed table: its figures and its speedups, published beside simulated."""
    out = Path(out_dir)
    if not out.is_dir():
        raise FileNotFoundError(f"plot directory {out} does not exist")
    tables: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        tables.setdefault((r.get("key") or _slug(r["table"]), r["thread"], r["table"]), []).append(r)
    paths = []
    for (key, thread, table), trs in tables.items():
        figures = [r for r in trs if r.get("role") != "derived" and r["unit"] != "×" and r.get("simulated")]
        derived = [r for r in trs if r["unit"] == "×" and r.get("simulated")]
        if not figures and not derived:
            continue
        fig = _figure(11.0, 4.2)
        axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(len(figures), 1), max(len(derived), 1)]})
        _bars(axes[0], figures, log=True, ylabel="published unit (log scale)")
        axes[0].set_title("figures", fontsize=9)
        _bars(axes[1], derived, log=False, ylabel="× (speedup / reduction / ratio)")
        axes[1].set_title("speedups and ratios", fontsize=9)
        fig.suptitle(f"{thread}: {table}", fontsize=10)
        paths.append(_save(fig, out / f"seed-{_slug(key)}.png"))
    return paths


def _bars(ax: Any, rows: Sequence[dict[str, Any]], *, log: bool, ylabel: str) -> None:
    if not rows:
        ax.set_axis_off()
        return
    xs = range(len(rows))
    pub = [float(r["published"]) for r in rows]
    sim = [float(r["simulated"]) for r in rows]
    ax.bar([x - 0.2 for x in xs], pub, width=0.4, color="#bdbdbd", label="published")
    ax.bar(
        [x + 0.2 for x in xs],
        sim,
        width=0.4,
        color=["#de2d26" if r.get("ok") is False else "#3182bd" for r in rows],
        label="simulated",
    )
    if log:
        ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r['row']} ({r['unit']})" for r in rows], rotation=60, ha="right", fontsize=6)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=7)


def plot_readahead(evaluation: Sequence[dict[str, Any]], png_path: str | os.PathLike[str]) -> Path:
    """Read-ahead evaluation: time and reads of each workload with it relative to without it."""
    fig = _figure(10.0, 4.0)
    ax_t, ax_r = fig.subplots(1, 2)
    names = [e["workload"] for e in evaluation]
    xs = list(range(len(names)))
    t_ratio = [e["elapsed_with_ms"] / e["elapsed_without_ms"] for e in evaluation]
    r_ratio = [e["reads_with"] / e["reads_without"] if e["reads_without"] else 1.0 for e in evaluation]
    ax_t.bar(xs, t_ratio, color=["#de2d26" if v > 1.005 else "#31a354" for v in t_ratio])
    ax_t.axhline(1.0, color="black", lw=0.8)
    ax_t.set_ylabel("time with / without read-ahead")
    ax_r.bar(xs, r_ratio, color=["#de2d26" if v > 1.005 else "#31a354" for v in r_ratio])
    ax_r.axhline(1.0, color="black", lw=0.8)
    ax_r.set_ylabel("reads with / without read-ahead")
    for ax in (ax_t, ax_r):
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    fig.suptitle("heuristic read-ahead on unstreamed paths (red: it loses)", fontsize=10)
    return _save(fig, png_path)
