"""The identity proof of the model's read path: full event traces of a sample of scans.

Each case runs one scan (or one stream driven by hand) on a fresh instance and records, in
order, every call the scan made into the backend's read path:

* ``["start", block, nblocks asked, flags, nblocks started, wait needed, buffers]`` for each
  ``StartReadBuffers`` (streams, the fast path and ``ReadBuffer`` alike);
* ``["wait", t_before, t_after, needed]`` for each ``WaitReadBuffers``;
* ``["release", buffer, t]`` for each ``ReleaseBuffer``;

then every physical read (``["read", ...]`` with its submit and completion times), the stream's
distance history and waits, every statistic (``pg_stat_io`` by context, per relation, buffer
usage, stream statistics), the scan's result, and the whole shared pool at the end (tag, flags,
usage and pin count of every buffer, the clock hand, the free list). The events are taken from
the model's observer interface (``reference_impl.observer``); the stored traces were
recorded by wrapping the backend's methods before that interface existed, so the test also
proves that the observer sees exactly what the wrappers saw.

``tests/model/identity/*.json.gz`` hold the traces the model produced before its read path was
restructured; ``tests/model/test_identity_traces.py`` regenerates each and compares it event by
event. To store them again (only when a change of simulated behaviour is intended and
explained)::

    python -m tests.model._identity --write
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reference_impl import (
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Instance,
    ReadPathObserver,
    Settings,
    begin_stream,
    block_range_read_stream_cb,
)
from reference_impl.relations import SHAPES, build_relation
from reference_impl.scans import run_scan
from reference_impl.storage.faults import Fault, FaultPlan, ForeignIO

STORE = Path(__file__).resolve().parent / "identity"


@dataclass(frozen=True)
class Case:
    """One scan on one instance; ``drive`` replaces ``run_scan`` for hand-driven streams."""

    name: str
    scan: str = "seqscan"
    nblocks: int | None = 2000
    shape: str | None = None
    shape_changes: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    device: str = "nvme"
    cached_fraction: float = 0.0
    seed: int = 0
    streamed: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    faults: tuple[Fault, ...] = ()
    foreign: tuple[ForeignIO, ...] = ()
    drive: str | None = None


_DIO = {"debug_io_direct": "data"}


def _cases() -> list[Case]:
    out: list[Case] = []
    # Sequential scans: every io_method x eic 1 / 16 / 256, some blocks cached (hits inside runs).
    for method in ("sync", "worker", "io_uring"):
        for eic in (1, 16, 256):
            out.append(
                Case(
                    f"seqscan-{method}-eic{eic}",
                    settings={**_DIO, "io_method": method, "effective_io_concurrency": eic},
                    cached_fraction=0.1 if eic == 16 else 0.0,
                    seed=eic,
                )
            )
    # Buffered I/O under sync: read-ahead advice and the page cache.
    out.append(Case("seqscan-sync-buffered", settings={"io_method": "sync"}, nblocks=1500))
    out.append(Case("seqscan-eic0", settings={**_DIO, "effective_io_concurrency": 0}, nblocks=400))
    # Combine limits.
    for icl in (1, 4, 32):
        out.append(
            Case(
                f"seqscan-icl{icl}",
                settings={**_DIO, "io_combine_limit": icl, "io_max_combine_limit": max(icl, 16)},
                cached_fraction=0.05,
                seed=icl,
            )
        )
    # A BULKREAD ring that cycles many times, in a pool much smaller than the table, with rescans
    # of a resized table (the ring's buffers are reused and evicted).
    out.append(
        Case(
            "seqscan-ring-small-pool-rescan",
            nblocks=1500,
            settings={**_DIO, "shared_buffers": 128},
            cached_fraction=0.2,
            params={"passes": 3, "rescan_nblocks": 1200},
            seed=7,
        )
    )
    out.append(
        Case(
            "seqscan-ring-worker",
            nblocks=3000,
            settings={**_DIO, "shared_buffers": 2048},
            cached_fraction=0.1,
            seed=9,
        )
    )
    out.append(
        Case(
            "seqscan-ring-uring-master",
            nblocks=1500,
            settings={**_DIO, "shared_buffers": 256, "io_method": "io_uring", "version": "master"},
            cached_fraction=0.15,
            params={"passes": 2},
            seed=8,
        )
    )
    out.append(Case("seqscan-unstreamed", nblocks=600, streamed=False, settings=_DIO, cached_fraction=0.2))
    out.append(Case("seqscan-master-worker", settings={**_DIO, "version": "master"}, cached_fraction=0.1))
    out.append(
        Case("seqscan-cloud", settings={**_DIO, "io_method": "worker"}, device="cloud-1ms", nblocks=800)
    )
    # TABLESAMPLE SYSTEM, PostgreSQL 18 and master, streamed and not.
    for version in ("18", "master"):
        for streamed in (True, False):
            out.append(
                Case(
                    f"system-{version}-{'streamed' if streamed else 'unstreamed'}",
                    scan="tablesample_system",
                    nblocks=20000,
                    settings={**_DIO, "version": version},
                    params={"sample_percent": 3.0, "repeatable_seed": 5.0},
                    streamed=streamed,
                )
            )
    # VACUUM of a table with dead rows and a btree: dirty pages, the VACUUM ring rejecting and
    # writing dirty buffers, index vacuuming; once without a ring in a 16-buffer pool (dirty
    # victims of the clock sweep).
    vac_shape = {"dead_fraction": 0.1, "vacuumed": False}
    out.append(Case("vacuum-btree", scan="vacuum", nblocks=None, shape="small", shape_changes=vac_shape))
    out.append(
        Case(
            "vacuum-btree-noring-tiny-pool",
            scan="vacuum",
            nblocks=None,
            shape="small",
            shape_changes=vac_shape,
            settings={"shared_buffers": 16},
            params={"buffer_usage_limit": 0},
        )
    )
    out.append(
        Case(
            "vacuum-btree-sync-unstreamed",
            scan="vacuum",
            nblocks=None,
            shape="small",
            shape_changes=vac_shape,
            settings={"io_method": "sync", "shared_buffers": 64},
            streamed=False,
        )
    )
    out.append(
        Case(
            "data-checksums-small-pool",
            scan="data_checksums",
            nblocks=700,
            settings={**_DIO, "shared_buffers": 48},
            cached_fraction=0.3,
        )
    )
    # Bitmap heap scans through the btree.
    for streamed in (True, False):
        out.append(
            Case(
                f"bitmapscan-{'streamed' if streamed else 'unstreamed'}",
                scan="bitmapscan",
                nblocks=None,
                shape="small",
                params={"selectivity": 0.3, "key_start": 0.1},
                cached_fraction=0.25,
                streamed=streamed,
                settings={"io_method": "worker"},
            )
        )
    # Faults: EIO, short reads, checksum failures zeroed, a latency spike, a foreign I/O.
    out.append(
        Case(
            "fault-eio",
            nblocks=600,
            settings=_DIO,
            faults=(Fault("eio", relation="t", block=300),),
        )
    )
    for method in ("worker", "sync", "io_uring"):
        out.append(
            Case(
                f"fault-short-read-{method}",
                nblocks=600,
                settings={**_DIO, "io_method": method},
                faults=(
                    Fault("short_read", relation="t", block=100, short_blocks=3),
                    Fault("short_read", relation="t", nth_read=30, short_blocks=1, times=2),
                    Fault("latency", relation="t", block=400, extra_us=5000),
                ),
            )
        )
    out.append(
        Case(
            "fault-checksum-zeroed",
            nblocks=600,
            settings={**_DIO, "zero_damaged_pages": True},
            faults=(Fault("checksum", relation="t", block=250, times=None),),
        )
    )
    out.append(
        Case(
            "foreign-io",
            nblocks=600,
            settings=_DIO,
            foreign=(
                ForeignIO(relation="t", block=40, nblocks=4, duration_us=3000),
                ForeignIO(relation="t", block=90, nblocks=2, duration_us=500, fails=True),
            ),
            params={},
        )
    )
    # Hand-driven streams: reset mid-scan, set_strategy between scans, per-buffer data, master.
    for version in ("18", "master"):
        for method in ("worker", "sync"):
            out.append(
                Case(
                    f"set-strategy-{version}-{method}",
                    scan="stream",
                    nblocks=900,
                    settings={**_DIO, "version": version, "io_method": method, "shared_buffers": 512},
                    cached_fraction=0.1,
                    drive="set_strategy",
                )
            )
    # The benchmark's own scan (readstream bench model): block_range_read_stream_cb consumed by a
    # bare next/release loop, all misses, in the default pool and past its end (the free list
    # runs out, then the clock sweep), under each io_method; then with a BULKREAD ring, with a
    # consumer that spends CPU per buffer (reads complete before they are waited for), with
    # cached blocks inside runs, and in a pool small enough that the pin limit cuts reads.
    for method in ("worker", "sync", "io_uring"):
        out.append(
            Case(
                f"range-{method}-past-pool",
                scan="stream",
                nblocks=20000,
                settings={**_DIO, "io_method": method},
                drive="range",
            )
        )
    out.append(
        Case(
            "range-bulkread-ring",
            scan="stream",
            nblocks=6000,
            settings=_DIO,
            drive="range",
            params={"ring": True},
        )
    )
    out.append(
        Case(
            "range-worker-consumer-cpu",
            scan="stream",
            nblocks=5000,
            settings={**_DIO, "shared_buffers": 2048},
            cached_fraction=0.05,
            seed=3,
            drive="range",
            params={"cpu_us": 4},
        )
    )
    out.append(
        Case(
            "range-uring-tiny-pool",
            scan="stream",
            nblocks=3000,
            settings={**_DIO, "io_method": "io_uring", "shared_buffers": 200},
            cached_fraction=0.1,
            seed=4,
            drive="range",
        )
    )
    out.append(
        Case(
            "range-master-worker",
            scan="stream",
            nblocks=5000,
            settings={**_DIO, "version": "master", "shared_buffers": 1024},
            cached_fraction=0.02,
            seed=5,
            drive="range",
            params={"cpu_us": 1},
        )
    )
    return out


CASES: list[Case] = _cases()


# --------------------------------------------------------------------------------------- recording
class _Recorder(ReadPathObserver):
    """Turns the model's observer events into the identity trace's event lists."""

    def __init__(self) -> None:
        self.events: list[list[Any]] = []

    def read_buffers_started(
        self,
        backend: Any,
        op: Any,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks_asked: int,
        flags: int,
        nblocks: int,
        need_wait: bool,
        start_us: int,
    ) -> None:
        self.events.append(
            [
                "start",
                blocknum,
                nblocks_asked,
                flags,
                nblocks,
                bool(need_wait),
                buffers[index : index + nblocks],
            ]
        )

    def read_buffers_waited(
        self, backend: Any, op: Any, start_us: int, end_us: int, needed_wait: bool, error: Any
    ) -> None:
        self.events.append(["wait", start_us, end_us, bool(needed_wait)])

    def buffer_released(self, backend: Any, buf: int) -> None:
        self.events.append(["release", buf, backend.clock.now])


def _make_relation(inst: Instance, case: Case) -> Any:
    if case.shape is None:
        assert case.nblocks is not None
        return inst.create_relation("t", case.nblocks)
    spec = SHAPES[case.shape]
    changes = dict(case.shape_changes)
    if case.nblocks is not None:
        changes["nblocks"] = case.nblocks
    if changes:
        spec = spec.replace(**changes)
    return build_relation(inst, spec).heap


def _drive_set_strategy(inst: Instance, be: Any, rel: Any) -> dict[str, Any]:
    """A stream consumed part-way, reset, switched to a BULKREAD ring, read to the end, reset,
    switched back to no strategy and read again; then ended."""
    n = rel.nblocks()
    priv = BlockRangeReadStreamPrivate(0, n)
    stream = begin_stream(be, rel, block_range_read_stream_cb, priv)
    got: list[int] = []

    def consume(limit: int | None) -> None:
        k = 0
        while limit is None or k < limit:
            buf = stream.next_buffer()
            if buf == INVALID_BUFFER:
                return
            got.append(be.buffer_block(buf))
            be.cpu(3)
            be.release_buffer(buf)
            k += 1

    consume(n // 3)
    stream.reset()
    ring = inst.strategy("bulkread")
    stream.set_strategy(ring)
    priv.current_blocknum = n // 4
    consume(None)
    stream.reset()
    stream.set_strategy(None)
    priv.current_blocknum, priv.last_exclusive = 0, n // 2
    consume(None)
    stats = stream.stats.as_dict()
    history = stream.stats.distance_history
    stream.end()
    return {"blocks": got, "stream_stats": stats, "distance": [list(x) for x in history or []]}


def _drive_range(inst: Instance, be: Any, rel: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``readstream bench model``'s loop: a block-range stream, each buffer released at once
    (``cpu_us`` of CPU before each release; ``ring``: a BULKREAD strategy)."""
    n = rel.nblocks()
    strategy = inst.strategy("bulkread") if params.get("ring") else None
    priv = BlockRangeReadStreamPrivate(0, n)
    stream = begin_stream(be, rel, block_range_read_stream_cb, priv, strategy=strategy)
    cpu_us = params.get("cpu_us", 0)
    count = 0
    last = -1
    while True:
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        count += 1
        last = be.buffer_block(buf)
        if cpu_us:
            be.cpu(cpu_us)
        be.release_buffer(buf)
    stats = stream.stats.as_dict()
    history = stream.stats.distance_history
    stream.end()
    return {"count": count, "last": last, "stream_stats": stats, "distance": [list(x) for x in history or []]}


def _ranges(values: list[int]) -> list[list[int]]:
    """``[first, last]`` runs of consecutive integers (the free list is mostly one run)."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][1] + 1 == v:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


def _pool_state(inst: Instance) -> dict[str, Any]:
    """Every buffer that is not in its start-up state: [buffer, tag, flags, usage, pins, lsn]."""
    pool = inst.pool
    used = [
        [i, pool.tag[i], pool.flags[i], pool.usage[i], pool.refcount[i], pool.page_lsn[i]]
        for i in range(pool.nbuffers)
        if pool.tag[i] != -1 or pool.flags[i] or pool.usage[i] or pool.refcount[i] or pool.page_lsn[i]
    ]
    return {
        "buffers": used,
        "in_flight": [i for i, x in enumerate(pool.buf_io) if x is not None],
        "freelist": _ranges(list(pool.freelist)),
        "next_victim": pool.next_victim,
        "complete_passes": pool.complete_passes,
        "num_allocs": pool.num_allocs,
        "wal": [pool.wal_insert_lsn, pool.wal_flushed_lsn],
        "foreign_reads": pool.foreign_reads,
    }


def _backend_stats(be: Any) -> dict[str, Any]:
    st = be.stats
    return {
        "io": st.io_dict(),
        "relations": {k: [v.blks_fetched, v.blks_hit] for k, v in sorted(st.relations.items())},
        "shared_blks": [st.shared_blks_hit, st.shared_blks_read, st.shared_blks_written],
        "waits": [st.waits, st.wait_us],
        "vacuum_cost_balance": st.vacuum_cost_balance,
        "pins": {str(k): v for k, v in sorted(be.refs.pinned().items())},
        "cpu_debt": be._cpu_debt,
        "warnings": list(be.warnings),
    }


def run_case(case: Case, *, observe: bool = True) -> dict[str, Any]:
    """Run ``case`` and return its full trace (events first; see the module docstring).

    ``observe=False`` runs it with no observer attached (the read path's unobserved code, the
    one every benchmark and most scans take) and leaves ``events`` empty; everything else must
    still equal the stored trace.
    """
    settings = Settings.from_mapping(case.settings) if case.settings else Settings()
    plan = (
        FaultPlan(list(case.faults), foreign_ios=list(case.foreign)) if case.faults or case.foreign else None
    )
    inst = Instance(settings, device=case.device, seed=case.seed, faults=plan)
    rel = _make_relation(inst, case)
    n = rel.nblocks()
    if case.cached_fraction > 0 and n:
        rng = np.random.default_rng(case.seed)
        k = round(case.cached_fraction * n)
        cached = np.sort(rng.choice(n, size=k, replace=False))
        inst.prewarm(rel, [int(b) for b in cached])
    for fio in case.foreign:
        inst.start_foreign_io(fio)
    be = inst.backend()
    rec = _Recorder()
    if observe:
        be.add_observer(rec)
    out: dict[str, Any] = {"case": case.name, "scan": case.scan, "settings": dict(case.settings)}
    if case.drive == "set_strategy":
        out["result"] = _drive_set_strategy(inst, be, rel)
    elif case.drive == "range":
        out["result"] = _drive_range(inst, be, rel, case.params)
    else:
        res = run_scan(
            case.scan, be, rel, variant="streamed" if case.streamed else "unstreamed", **case.params
        )
        out["result"] = {
            "result": res.result,
            "blocks": res.blocks,
            "read_count": res.read_count,
            "read_blocks": res.read_blocks,
            "hits": res.hits,
            "elapsed_us": res.elapsed_us,
            "pinned_after": res.pinned_after,
            "error": res.error,
            "error_type": res.error_type,
            "stream_stats": res.stream_stats,
            "io": res.io,
            "distance": [list(x) for x in res.distance_history or []],
            "notes": res.notes,
        }
    out["events"] = rec.events
    out["reads"] = [
        [
            *(r.relation, r.fork, r.start, r.nblocks, r.submit_us, r.complete_us, r.context),
            *(r.backend, r.synchronous, r.error, r.ok_blocks),
        ]
        for r in be.stats.read_log or []
    ]
    out["stats"] = _backend_stats(be)
    out["pool"] = _pool_state(inst)
    out["now"] = inst.clock.now
    out["ledger"] = inst.storage.faults.ledger if plan is not None else []
    # Round-trip through JSON so that the stored and the fresh trace compare alike (tuples, keys).
    return json.loads(json.dumps(out, default=repr))


# --------------------------------------------------------------------------------------- compare
def flatten(trace: dict[str, Any]) -> list[tuple[str, Any]]:
    """The trace as one list of (where, value): events, reads, then every other section."""
    items: list[tuple[str, Any]] = []
    for i, ev in enumerate(trace["events"]):
        items.append((f"event {i}", ev))
    for i, r in enumerate(trace["reads"]):
        items.append((f"read {i}", r))
    for key in sorted(k for k in trace if k not in ("events", "reads")):
        value = trace[key]
        if isinstance(value, dict):
            for sub in sorted(value):
                items.append((f"{key}.{sub}", value[sub]))
        else:
            items.append((key, value))
    items.append(("number of events", len(trace["events"])))
    items.append(("number of reads", len(trace["reads"])))
    return items


def without_events(trace: dict[str, Any]) -> dict[str, Any]:
    """``trace`` with its event list emptied (what an unobserved run is compared on)."""
    return {**trace, "events": []}


def first_difference(expected: dict[str, Any], got: dict[str, Any]) -> str | None:
    """None if identical, else one paragraph naming the first difference."""
    if expected == got:
        return None
    a, b = flatten(expected), flatten(got)
    for (wa, va), (wb, vb) in zip(a, b, strict=False):
        if wa != wb or va != vb:
            return (
                f"case {expected['case']} (scan {expected['scan']}, settings {expected['settings']}): "
                f"first difference at {wa if wa == wb else wa + ' / ' + wb}:\n"
                f"  expected {json.dumps(va)[:600]}\n  got      {json.dumps(vb)[:600]}"
            )
    return f"case {expected['case']}: traces differ in length ({len(a)} vs {len(b)} items)"


def stored_path(case: Case) -> Path:
    return STORE / f"{case.name}.json.gz"


def load(case: Case) -> dict[str, Any]:
    with gzip.open(stored_path(case), "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def write(case: Case, trace: dict[str, Any]) -> int:
    STORE.mkdir(exist_ok=True)
    raw = json.dumps(trace, separators=(",", ":"), sort_keys=True).encode()
    path = stored_path(case)
    # mtime=0: the same trace gives the same bytes.
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="store the traces (replacing them)")
    parser.add_argument("--only", default=None, help="only cases whose name contains this")
    parser.add_argument(
        "--unobserved", action="store_true", help="compare a run with no observer attached (events left out)"
    )
    args = parser.parse_args(argv)
    total = 0
    failed = 0

    def run(case: Case) -> dict[str, Any]:
        return run_case(case, observe=not args.unobserved)

    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        trace = run(case)
        if args.write:
            size = write(case, trace)
            total += size
            print(f"{case.name}: {len(trace['events'])} events, {len(trace['reads'])} reads, {size} bytes")
        else:
            expected = without_events(load(case)) if args.unobserved else load(case)
            diff = first_difference(expected, trace)
            if diff:
                failed += 1
                print(diff)
            else:
                print(f"{case.name}: identical")
    if args.write:
        print(f"total {total} bytes")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
