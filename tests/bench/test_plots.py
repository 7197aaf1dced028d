"""Plots: I/O timelines, distance, seed tables, read-ahead evaluation; a clear error without matplotlib."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream.bench import plots
from pytest_readstream.bench.runs import Run, trace_run
from reference_impl import DEVICE_PROFILES

PNG = b"\x89PNG\r\n\x1a\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 200)), max_size=40))
def test_lanes_never_overlap_and_are_as_few_as_the_overlap(spans) -> None:
    intervals = [(a, a + d) for a, d in spans]
    lanes = plots.assign_lanes(intervals)
    for i, (a, b) in enumerate(intervals):
        for j, (c, d) in enumerate(intervals):
            if i < j and lanes[i] == lanes[j]:
                assert b <= c or d <= a
    points = {a for a, _ in intervals}
    depth = max((sum(1 for a, b in intervals if a <= t < b) for t in points), default=0)
    assert (max(lanes) + 1 if lanes else 0) == depth


def test_trace_plot_of_a_real_run(tmp_path) -> None:
    run = Run(
        settings=(("debug_io_direct", "data"), ("io_method", "worker")),
        device=DEVICE_PROFILES["nvme"],
        scan="seqscan",
        nblocks=400,
    )
    trace = trace_run(run, max_pages=200)
    assert trace["reads"] and trace["distance_history"]
    path = plots.plot_trace(trace, tmp_path / "t.png")
    assert path.read_bytes().startswith(PNG)
    path = plots.plot_distance(trace["distance_history"], tmp_path / "d.png")
    assert path.read_bytes().startswith(PNG)


def test_trace_plot_with_waits_and_without_distance(tmp_path) -> None:
    trace = {
        "scan": "x",
        "reads": [{"submit_us": i * 10, "complete_us": i * 10 + 90, "nblocks": 1 + i % 2} for i in range(30)],
        "waits": [(95, 120), (300, 310)],
    }
    assert plots.plot_trace(trace, tmp_path / "w.png", max_reads=10).read_bytes().startswith(PNG)


def test_seed_table_and_readahead_plots(tmp_path) -> None:
    rows = [
        {
            "key": "k1",
            "thread": "t",
            "table": "T",
            "row": "a base",
            "published": 10.0,
            "simulated": 9.0,
            "unit": "ms",
        },
        {
            "key": "k1",
            "thread": "t",
            "table": "T",
            "row": "a speedup",
            "published": 2.0,
            "simulated": 2.5,
            "unit": "×",
            "role": "derived",
            "ok": True,
        },
    ]
    paths = plots.plot_seed_tables(rows, tmp_path)
    assert [p.name for p in paths] == ["seed-k1.png"]
    ev = [
        {
            "workload": "w1",
            "elapsed_without_ms": 10.0,
            "elapsed_with_ms": 5.0,
            "reads_without": 10,
            "reads_with": 4,
        },
        {
            "workload": "w2",
            "elapsed_without_ms": 10.0,
            "elapsed_with_ms": 12.0,
            "reads_without": 10,
            "reads_with": 15,
        },
    ]
    assert plots.plot_readahead(ev, tmp_path / "ra.png").read_bytes().startswith(PNG)


def test_missing_directory_is_an_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.plot_seed_tables([], tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.plot_distance([(0, 1)], tmp_path / "nope" / "d.png")


def test_without_matplotlib_the_error_names_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(plots.PlotUnavailable, match=r"pytest-readstream\[plot\]"):
        plots.plot_distance([(0, 1)], tmp_path / "d.png")
