"""The read-path observer interface: events, several observers, detaching, no effect on results."""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import (
    BlockRangeReadStreamPrivate,
    Instance,
    ModelUsageError,
    ReadPathObserver,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.scans import run_scan
from reference_impl.storage.faults import Fault, FaultPlan


class _Log(ReadPathObserver):
    def __init__(self, tag: str, out: list[Any]) -> None:
        self.tag = tag
        self.out = out

    def stream_begun(self, backend: Any, stream: Any) -> None:
        self.out.append((self.tag, "begun"))

    def read_buffers_starting(
        self, backend: Any, op: Any, buffers: Any, index: int, blocknum: int, *a: Any
    ) -> None:
        self.out.append((self.tag, "starting", blocknum))

    def read_buffers_started(
        self, backend: Any, op: Any, buffers: Any, index: int, blocknum: int, *a: Any
    ) -> None:
        self.out.append((self.tag, "started", blocknum, a[-3]))

    def io_issued(self, backend: Any, ioh: Any) -> None:
        self.out.append((self.tag, "issued", ioh.start, ioh.nblocks))

    def io_completed(self, backend: Any, ioh: Any) -> None:
        self.out.append((self.tag, "completed", ioh.start, type(ioh.error).__name__ if ioh.error else None))

    def read_buffers_waiting(self, backend: Any, op: Any) -> None:
        self.out.append((self.tag, "waiting"))

    def read_buffers_waited(self, backend: Any, op: Any, t0: int, t1: int, needed: bool, error: Any) -> None:
        self.out.append((self.tag, "waited", t1 >= t0, type(error).__name__ if error else None))

    def buffer_released(self, backend: Any, buf: int) -> None:
        self.out.append((self.tag, "released", buf))

    def buffer_flushed(self, backend: Any, buf: int, context: str, t0: int, t1: int) -> None:
        self.out.append((self.tag, "flushed", context, t1 >= t0))


def _scan(observe: bool, **settings: Any) -> tuple[Any, list[Any]]:
    inst = Instance(Settings(debug_io_direct="data", **settings), debug=True)
    rel = inst.create_relation("t", 200)
    be = inst.backend()
    out: list[Any] = []
    if observe:
        be.add_observer(_Log("a", out))
        be.add_observer(_Log("b", out))
    stream = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 200))
    for buf in stream:
        be.release_buffer(buf)
    stream.end()
    return (be.stats.io_dict(), [r.as_dict() for r in be.stats.read_log or []], inst.clock.now), out


@pytest.mark.parametrize("method", ["sync", "worker", "io_uring"])
def test_events_in_order_to_every_observer_and_results_unchanged(method: str) -> None:
    plain, none = _scan(False, io_method=method)
    observed, out = _scan(True, io_method=method)
    assert plain == observed and none == []
    a = [e[1:] for e in out if e[0] == "a"]
    b = [e[1:] for e in out if e[0] == "b"]
    assert a == b and out[0] == ("a", "begun") and out[1] == ("b", "begun")
    kinds = [e[0] for e in a]
    assert kinds.count("released") == 200
    assert kinds.count("issued") == kinds.count("completed") == len(observed[1])
    # Every start is bracketed, every wait too; an I/O completes after it was issued.
    assert kinds.count("starting") == kinds.count("started") and kinds.count("waiting") == kinds.count(
        "waited"
    )
    first_issue = kinds.index("issued")
    assert kinds.index("starting") < first_issue < kinds.index("completed")


def test_a_failed_read_is_reported_to_the_waited_event_and_detaching_stops_events() -> None:
    inst = Instance(
        Settings(debug_io_direct="data"), faults=FaultPlan([Fault("eio", relation="t", block=20)]), debug=True
    )
    rel = inst.create_relation("t", 100)
    be = inst.backend()
    out: list[Any] = []
    log = _Log("a", out)
    be.add_observer(log)
    be.add_observer(log)  # once only
    assert be.observers == (log,)
    res = run_scan("seqscan", be, rel)
    assert res.error_type == "ReadIOError"
    assert ("a", "waited", True, "ReadIOError") in out
    assert any(e[1] == "completed" and e[3] == "ReadIOError" for e in out)
    be.remove_observer(log)
    be.remove_observer(log)  # nothing happens
    n = len(out)
    be.release_buffer(be.read_buffer(rel, 99))
    assert len(out) == n and be.observers == ()


def test_flushes_of_dirty_victims_are_observed() -> None:
    inst = Instance(Settings(shared_buffers=16), debug=True)
    rel = inst.create_relation("t", 40)
    be = inst.backend()
    out: list[Any] = []
    be.add_observer(_Log("a", out))
    for b in range(40):
        buf = be.read_buffer(rel, b)
        be.mark_buffer_dirty(buf)
        be.release_buffer(buf)
    flushed = [e for e in out if e[1] == "flushed"]
    assert len(flushed) == be.stats.shared_blks_written > 0 and all(e[3] for e in flushed)


def test_only_observers_can_be_attached() -> None:
    be = Instance().backend()
    with pytest.raises(ModelUsageError, match="not a ReadPathObserver"):
        be.add_observer(object())  # type: ignore[arg-type]


def test_release_events_go_only_to_observers_that_listen_to_them() -> None:
    be = Instance().backend()
    waits = _Log("w", [])
    out: list[Any] = []

    class Waits(ReadPathObserver):
        def read_buffers_waited(self, *args: Any) -> None:
            out.append("waited")

    only_waits = Waits()
    be.add_observer(only_waits)
    assert be._release_observer is None and be._wait_observer is only_waits
    assert be._start_observer is be._io_observer is be._flush_observer is None
    be.add_observer(waits)
    assert be._release_observer is waits
    be.remove_observer(waits)
    assert be._release_observer is None
