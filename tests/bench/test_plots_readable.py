"""Issue 15 item 8: plots stay readable for long traces, every I/O method, and wide ratios.

A plot cannot be looked at by a test, so what made the old ones unreadable is checked instead:
reads narrower than a pixel (a trace of thousands of reads is binned, and the bins account for
every block), a legend over the data (it must not overlap any axes), and a linear scale on which
5x vanishes beside 2,000x (the ratios panel switches to a log scale and prints the values).
"""

from __future__ import annotations

import pytest

from pytest_readstream.bench import plots
from reference_impl import Settings
from reference_impl.trace import trace_scan

pytest.importorskip("matplotlib", reason="the plots need the 'plot' extra (matplotlib)")


def _legend_clear_of_axes(fig) -> None:
    plots._layout(fig)
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer)), ax.get_ylabel()
    assert box.height < fig.bbox.height * 0.1  # a strip, not a block over the plot
    assert all(t.get_fontsize() >= 9 for t in legend.get_texts())


@pytest.mark.parametrize("io_method", ["sync", "worker", "io_uring"])
def test_a_whole_10000_block_scan_is_binned_and_accounts_for_every_block(io_method: str) -> None:
    trace = trace_scan("seqscan", nblocks=10_000, settings=Settings(io_method=io_method), device="cloud-1ms")
    assert len(trace["reads"]) > plots.LANE_LIMIT  # 629 reads: lanes would fuse into bars
    fig = plots.trace_figure(trace)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels[:2] == ["blocks read\nper ms", "reads in flight\n(mean)"]
    assert labels[-1] == "look-ahead\ndistance"
    top = fig.axes[0]
    width_ms = 1.0 * (top.patches[1].get_x() - top.patches[0].get_x())
    drawn = sum(p.get_height() for p in top.patches) * width_ms  # blocks per ms x ms
    assert drawn == pytest.approx(10_000, rel=1e-6)
    _legend_clear_of_axes(fig)


def test_a_short_trace_keeps_one_bar_per_read_and_a_clear_legend() -> None:
    trace = {
        "scan": "x",
        "reads": [{"submit_us": i * 10, "complete_us": i * 10 + 90, "nblocks": 1 + i % 2} for i in range(30)],
        "waits": [(95, 120), (300, 310)],
        "distance": [(0, 1), (100, 4)],
    }
    fig = plots.trace_figure(trace)
    paths = [len(c.get_paths()) for c in fig.axes[0].collections]
    assert paths == [1] * 30 + [2]  # one bar per read, then the two waits
    _legend_clear_of_axes(fig)


def test_speedups_spanning_orders_of_magnitude_use_a_log_scale_with_values() -> None:
    rows = [
        {
            "key": "t",
            "thread": "t",
            "table": "t",
            "row": r,
            "unit": "×",
            "published": p,
            "simulated": v,
            "role": "derived",
        }
        for r, p, v in (("sync", 5.0, 4.6), ("cached", 2000.0, 1800.0))
    ]
    fig = plots._figure(6, 4)
    ax = fig.subplots(1, 1)
    plots._bars(ax, rows, log=False, ylabel="×")
    assert ax.get_yscale() == "log"
    labels = {t.get_text() for t in ax.texts}
    assert {"5", "4.6", "2,000", "1,800"} <= labels
    narrow = plots._figure(6, 4).subplots(1, 1)
    plots._bars(narrow, rows[:1], log=False, ylabel="×")
    assert narrow.get_yscale() == "linear"  # 5 beside 4.6 reads well on a linear scale
