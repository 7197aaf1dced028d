"""Plots of the model's I/O: timelines, look-ahead distance, seed tables, read-ahead evaluation.

Everything here draws on matplotlib's object API (a ``Figure`` with an Agg canvas, never the
global ``pyplot`` state), imported only when a plot is asked for; without the ``plot`` extra a
call raises :class:`PlotUnavailable` naming the extra to install. Each function writes one small
PNG and returns its path.

* :func:`plot_trace` — a ``readstream trace`` dict. Up to :data:`LANE_LIMIT` reads, every read is
  a bar from submission to completion on the lowest free *lane* (reads in flight at the same
  time sit on different lanes, as they occupy different device channels or I/O workers), with
  the consumer's waits as red spans above them. A longer trace is drawn per time bin instead
  (blocks read per ms, mean reads in flight, the consumer's waiting share), since its reads are
  narrower than a pixel; in both, the look-ahead distance over time below. One legend sits in
  its own strip under the title, never over the data.
* :func:`plot_distance` — ``ReadStream.stats.distance_history`` alone.
* :func:`plot_seed_tables` — per seed table, published beside simulated, values written on the
  bars: its figures (log scale) and its speedups / reductions (log scale when they span more
  than 20x, so a 5x speedup stays visible beside a 2,000x one).
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
    "LANE_LIMIT",
    "PlotUnavailable",
    "plot_trace",
    "trace_figure",
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


def _layout(fig: Any) -> None:
    """Lay the axes out, below the title and legend strip when there is one (see _legend)."""
    top = getattr(fig, "_readstream_top", 0.0)
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))


def _save(fig: Any, png_path: str | os.PathLike[str]) -> Path:
    """Write the figure as a small PNG (an adaptive 64-colour palette: the plots are flat colours)."""
    import io

    path = Path(png_path)
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist")
    _layout(fig)
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


#: Up to this many reads a trace is drawn read by read, on lanes; beyond it, a read is narrower
#: than a pixel of a 9-inch plot and the lanes fuse into solid bars, so the trace is binned.
LANE_LIMIT = 150
_BINS = 160
_COLORS = {
    "async": "#3182bd",
    "single": "#9ecae1",
    "backend": "#fd8d3c",
    "wait": "#de2d26",
    "distance": "#31a354",
}


def _legend(fig: Any, entries: Sequence[tuple[str, str]]) -> None:
    """One legend for the figure, in its own strip under the title, never over the data.

    Its place is fixed in inches (under a 0.3-inch title strip) whatever the figure's size;
    :func:`_save` lays the axes out below the strip (``fig._readstream_top``).
    """
    from matplotlib.patches import Patch

    height = fig.get_figheight()
    handles = [Patch(facecolor=color, edgecolor="none", label=label) for label, color in entries]
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.3 / height),
        ncol=len(handles),
        fontsize=9,
        frameon=False,
        handlelength=1.2,
        columnspacing=1.5,
    )
    fig._readstream_top = 0.75  # inches kept free above the axes: title and legend


def _trace_title(trace: dict[str, Any], reads: Sequence[dict[str, Any]], how: str) -> str:
    stats = trace.get("stats", {})
    settings = trace.get("settings", {})
    return (
        f"{trace.get('scan', 'scan')} ({trace.get('variant', '')}), io_method={settings.get('io_method', '?')}, "
        f"{stats.get('reads', len(reads)):,} reads of {stats.get('blocks_read', sum(int(r.get('nblocks', 1)) for r in reads)):,} "
        f"blocks; {how}"
    )


def plot_trace(
    trace: dict[str, Any],
    png_path: str | os.PathLike[str],
    *,
    title: str | None = None,
    max_reads: int = LANE_LIMIT,
) -> Path:
    """I/O timeline of a trace dict (``readstream trace --plot``), readable at any size.

    ``trace`` needs ``reads`` (each with ``submit_us``, ``complete_us``, ``nblocks``); ``waits``
    (pairs of µs) and ``distance_history`` / ``distance`` (pairs of µs, blocks) are drawn when
    present. Up to ``max_reads`` reads, each read is a bar on its lane; a longer trace (a whole
    10,000-block scan has 629 reads, a 7 GB one 59,805) is drawn per time bin: blocks read per
    millisecond, mean reads in flight, the share of time the consumer waited, and the distance.
    """
    return _save(trace_figure(trace, title=title, max_reads=max_reads), png_path)


def trace_figure(trace: dict[str, Any], *, title: str | None = None, max_reads: int = LANE_LIMIT) -> Any:
    """The figure :func:`plot_trace` saves: lanes up to ``max_reads`` reads, time bins beyond."""
    reads = list(trace.get("reads") or [])
    distance = _distance_series(trace)
    waits = [(int(a), int(b)) for a, b in trace.get("waits") or []]
    if len(reads) <= max_reads:
        return _plot_lanes(trace, reads, distance, waits, title)
    return _plot_binned(trace, reads, distance, waits, title)


def _plot_lanes(
    trace: dict[str, Any],
    reads: list[dict[str, Any]],
    distance: list[tuple[int, int]],
    waits: list[tuple[int, int]],
    title: str | None,
) -> Any:
    fig = _figure(9.0, 5.4 if distance else 4.2)
    if distance:
        ax, axd = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    else:
        ax, axd = fig.subplots(1, 1), None
    spans = [(int(r["submit_us"]), max(int(r["complete_us"]), int(r["submit_us"]) + 1)) for r in reads]
    lanes = assign_lanes(spans)
    to_ms = 1e-3
    for (a, b), lane, r in zip(spans, lanes, reads):
        kind = "backend" if r.get("synchronous") else ("single" if int(r.get("nblocks", 1)) == 1 else "async")
        # A white edge keeps back-to-back reads apart (io_method=sync reads one after another).
        ax.broken_barh(
            [(a * to_ms, (b - a) * to_ms)],
            (lane + 0.1, 0.8),
            facecolors=_COLORS[kind],
            edgecolor="white",
            linewidth=0.5,
        )
    top = (max(lanes) + 1) if lanes else 1
    if waits:
        end = spans[-1][1] if spans else max(b for _, b in waits)
        ax.broken_barh(
            [(a * to_ms, (b - a) * to_ms) for a, b in waits if a <= end],
            (top + 0.3, 0.6),
            facecolors=_COLORS["wait"],
            edgecolor="none",
        )
    ax.set_ylim(0, top + (1.1 if waits else 0.2))
    ax.set_ylabel("reads in flight (lane)", fontsize=9)
    entries = [
        ("combined read", _COLORS["async"]),
        ("one-block read", _COLORS["single"]),
        ("read by the backend", _COLORS["backend"]),
    ]
    if waits:
        entries.append(("consumer waits (top row)", _COLORS["wait"]))
    if distance:
        entries.append(("look-ahead distance", _COLORS["distance"]))
    _legend(fig, entries)
    fig.suptitle(
        title or _trace_title(trace, reads, "each read on a lane"),
        fontsize=10,
        y=1 - 0.05 / fig.get_figheight(),
        va="top",
    )
    if axd is not None:
        xs = [t * to_ms for t, _ in distance]
        ys = [d for _, d in distance]
        end_ms = spans[-1][1] * to_ms if spans else (xs[-1] if xs else 0)
        axd.step([*xs, end_ms], [*ys, *ys[-1:]], where="post", color=_COLORS["distance"])
        axd.set_ylabel("distance", fontsize=9)
        axd.set_xlabel("simulated time (ms)")
        axd.set_ylim(bottom=0)
    else:
        ax.set_xlabel("simulated time (ms)")
    return fig


def _plot_binned(
    trace: dict[str, Any],
    reads: list[dict[str, Any]],
    distance: list[tuple[int, int]],
    waits: list[tuple[int, int]],
    title: str | None,
) -> Any:
    import numpy as np

    submit = np.array([int(r["submit_us"]) for r in reads], dtype=np.float64)
    complete = np.maximum(np.array([int(r["complete_us"]) for r in reads], dtype=np.float64), submit + 1)
    blocks = np.array([int(r.get("nblocks", 1)) for r in reads], dtype=np.float64)
    backend = np.array([bool(r.get("synchronous")) for r in reads])
    end = float(max(complete.max(), max((b for _, b in waits), default=0)))
    edges = np.linspace(0.0, end, _BINS + 1)
    width_us = edges[1] - edges[0]
    centers_ms = (edges[:-1] + width_us / 2) / 1000

    def overlap(starts: Any, ends: Any) -> Any:
        """Per bin, the total time (µs) the spans cover: the time-weighted count in flight."""
        out = np.zeros(_BINS)
        lo, hi = edges[:-1], edges[1:]
        for a, b in zip(starts, ends):
            first, last = np.searchsorted(edges, a, "right") - 1, np.searchsorted(edges, b, "left")
            sl = slice(max(first, 0), min(last, _BINS))
            out[sl] += np.clip(np.minimum(hi[sl], b) - np.maximum(lo[sl], a), 0, None)
        return out

    done_async = np.histogram(complete[~backend], bins=edges, weights=blocks[~backend])[0]
    done_backend = np.histogram(complete[backend], bins=edges, weights=blocks[backend])[0]
    in_flight = overlap(submit, complete) / width_us
    waiting = overlap([a for a, _ in waits], [b for _, b in waits]) / width_us * 100 if waits else None
    panels = 3 + (waiting is not None) - (not distance)
    fig = _figure(9.0, 1.7 * panels + 1.3)
    axes = list(np.atleast_1d(fig.subplots(panels, 1, sharex=True)))
    per_ms = 1000 / width_us
    ax = axes.pop(0)
    ax.bar(centers_ms, done_async * per_ms, width=width_us / 1000, color=_COLORS["async"], linewidth=0)
    ax.bar(
        centers_ms,
        done_backend * per_ms,
        width=width_us / 1000,
        bottom=done_async * per_ms,
        color=_COLORS["backend"],
        linewidth=0,
    )
    ax.set_ylabel("blocks read\nper ms", fontsize=9)
    ax.set_ylim(bottom=0)
    ax = axes.pop(0)
    ax.fill_between(centers_ms, in_flight, step="mid", color=_COLORS["single"], linewidth=0)
    ax.step(centers_ms, in_flight, where="mid", color=_COLORS["async"], linewidth=1)
    ax.set_ylabel("reads in flight\n(mean)", fontsize=9)
    ax.set_ylim(bottom=0)
    entries = [
        ("blocks read asynchronously", _COLORS["async"]),
        ("blocks read by the backend", _COLORS["backend"]),
    ]
    if waiting is not None:
        ax = axes.pop(0)
        ax.fill_between(centers_ms, waiting, step="mid", color=_COLORS["wait"], linewidth=0)
        ax.set_ylabel("consumer\nwaiting (%)", fontsize=9)
        ax.set_ylim(0, 105)
        entries.append(("consumer waiting", _COLORS["wait"]))
    if distance:
        ax = axes.pop(0)
        xs = [t / 1000 for t, _ in distance]
        ys = [d for _, d in distance]
        ax.step([*xs, end / 1000], [*ys, *ys[-1:]], where="post", color=_COLORS["distance"])
        ax.set_ylabel("look-ahead\ndistance", fontsize=9)
        ax.set_ylim(bottom=0)
        entries.append(("look-ahead distance", _COLORS["distance"]))
    ax.set_xlabel("simulated time (ms)")
    _legend(fig, entries)
    how = f"per {width_us / 1000:,.3g} ms bin"
    fig.suptitle(
        title or _trace_title(trace, reads, how), fontsize=10, y=1 - 0.05 / fig.get_figheight(), va="top"
    )
    return fig


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
        fig = _figure(11.0, 4.8)
        axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(len(figures), 1), max(len(derived), 1)]})
        _bars(axes[0], figures, log=True, ylabel="published unit (log scale)")
        axes[0].set_title("figures", fontsize=9)
        _bars(axes[1], derived, log=False, ylabel="× (speedup / reduction / ratio)")
        axes[1].set_title("speedups and ratios", fontsize=9)
        fig.suptitle(f"{thread}: {table}", fontsize=10, y=0.99)
        _legend(
            fig, [("published", "#bdbdbd"), ("simulated", "#3182bd"), ("simulated, check fails", "#de2d26")]
        )
        paths.append(_save(fig, out / f"seed-{_slug(key)}.png"))
    return paths


def _bars(ax: Any, rows: Sequence[dict[str, Any]], *, log: bool, ylabel: str) -> None:
    """Published (grey) beside simulated (blue; red where the check fails), values on the bars.

    Ratios spanning more than 20x (a 5x speedup beside a 2,000x one) are drawn on a log scale,
    where both stay visible; the printed values carry the exact figures either way.
    """
    if not rows:
        ax.set_axis_off()
        return
    xs = range(len(rows))
    pub = [float(r["published"]) for r in rows]
    sim = [float(r["simulated"]) for r in rows]
    positive = [v for v in (*pub, *sim) if v > 0]
    if not log and positive and max(positive) / min(positive) > 20:
        log = True
        ylabel = ylabel + " (log scale)"
    bars_pub = ax.bar([x - 0.2 for x in xs], pub, width=0.4, color="#bdbdbd", label="published")
    bars_sim = ax.bar(
        [x + 0.2 for x in xs],
        sim,
        width=0.4,
        color=["#de2d26" if r.get("ok") is False else "#3182bd" for r in rows],
        label="simulated",
    )
    for bars in (bars_pub, bars_sim):
        ax.bar_label(bars, labels=[_short(v) for v in bars.datavalues], fontsize=7, rotation=90, padding=2)
    if log:
        ax.set_yscale("log")
    ax.margins(y=0.25)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r['row']} ({r['unit']})" for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel, fontsize=8)


def _short(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


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
