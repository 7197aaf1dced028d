"""Evaluating heuristic read-ahead for unstreamed paths (``reference_impl.readahead``).

The sample-scan thread proposes detecting sequential or strided access from the block numbers
``ReadBuffer`` sees, and reading ahead through asynchronous I/O; the reviewer warns that wrong
guesses "could waste I/O and CPU and cause cache pollution". This benchmark runs a set of
workloads twice on identical instances (direct I/O, ``io_method=worker``, an NVMe-like device),
once without and once with :class:`~reference_impl.readahead.HeuristicReadahead` installed, and
reports for each: elapsed simulated time, reads (I/Os), and the read-ahead's own counters
(speculative reads, blocks used, blocks wasted, buffers it evicted).

Workloads where a pattern exists (an unstreamed sequential scan, the strided SYSTEM_ROWS, the
sequential BERNOULLI, TID-range slices read by successive statements, a correlated index scan, a
hash index's bucket pages during VACUUM) should gain; workloads without one (SYSTEM's random
gaps) should be unaffected; streamed scans never reach the hook and must be unchanged; and
workloads whose short runs look like a pattern show what a misprediction costs: in an index scan
of correlation 0.5 a little; with 4-page runs mixed into random hits on a hot working set, a lot
(wasted reads, and hot pages evicted by speculative ones, then read again), worse on a device
that serves few requests at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reference_impl import DEVICE_PROFILES, Instance, Settings
from reference_impl.readahead import HeuristicReadahead, readahead_detectors
from reference_impl.scans import run_scan

__all__ = ["Workload", "WORKLOADS", "run_readahead_evaluation", "format_readahead"]


@dataclass(frozen=True)
class Workload:
    """One access pattern: builds its relations, then runs on a backend (see the module)."""

    name: str
    description: str
    run: Callable[[Instance, Any, float], dict[str, Any]]
    settings: tuple[tuple[str, Any], ...] = ()
    expect: str = "gain"  # "gain", "neutral" or "loss"
    device: str = "nvme"


def _settings(**changes: Any) -> Settings:
    base = {
        "version": "master",
        "io_method": "worker",
        "debug_io_direct": "data",
        "synchronize_seqscans": False,
    }
    base.update(changes)
    return Settings.from_mapping(base)


def _n(x: float, scale: float, lo: int = 200) -> int:
    return max(lo, round(x * scale))


def _shape(name: str, **changes: Any) -> Any:
    from reference_impl.relations import SHAPES

    return SHAPES[name].replace(**changes) if changes else SHAPES[name]


def _build(inst: Instance, spec: Any) -> Any:
    from reference_impl.relations import build_relation

    return build_relation(inst, spec)


def _seqscan(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
    rel = inst.create_relation("t", _n(20_000, scale))
    return {"pages": run_scan("seqscan", be, rel, variant="unstreamed", keep_blocks=False).result["rows"]}


def _seqscan_streamed(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
    rel = inst.create_relation("t", _n(20_000, scale))
    return {"pages": run_scan("seqscan", be, rel, variant="streamed", keep_blocks=False).result["rows"]}


def _tid_slices(inst: Instance, be: Any, scale: float, reset: bool = False) -> dict[str, Any]:
    rel = inst.create_relation("t", _n(8192, scale, 512))
    slice_blocks = 32
    rows = 0
    for start in range(0, rel.nblocks(), slice_blocks):
        if reset:
            readahead_detectors(inst).clear()
        res = run_scan(
            "tidrangescan",
            be,
            rel,
            variant="unstreamed",
            keep_blocks=False,
            start_block=start,
            end_block=start + slice_blocks - 1,
        )
        rows += res.result.get("rows", 0)
    return {"rows": rows}


def _tid_slices_reset(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
    return _tid_slices(inst, be, scale, reset=True)


def _sample(method: str, **params: Any) -> Callable[[Instance, Any, float], dict[str, Any]]:
    def run(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
        heap = _build(inst, _shape("sample-thread-64gib", nblocks=_n(200_000, scale, 4000))).heap
        prm = dict(params)
        for key in ("rows", "limit"):
            if key in prm:
                prm[key] = _n(prm[key], scale, 50)
        res = run_scan(f"tablesample_{method}", be, heap, variant="unstreamed", keep_blocks=False, **prm)
        return {"rows": res.result["rows"]}

    return run


def _indexscan(correlation: float) -> Callable[[Instance, Any, float], dict[str, Any]]:
    def run(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
        from reference_impl.relations import IndexSpec, RelationSpec

        spec = RelationSpec(
            name="t",
            nblocks=_n(20_000, scale, 1000),
            tuples_per_page=20,
            indexes=(IndexSpec("btree", correlation=correlation),),
            seed=11,
        )
        heap = _build(inst, spec).heap
        res = run_scan("indexscan", be, heap, variant="unstreamed", keep_blocks=False, selectivity=0.1)
        return {"rows": res.result["rows"], "heap_fetches": res.result.get("heap_fetches")}

    return run


def _hot_and_short_runs(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
    """Random fetches from a hot table that fits in the pool, mixed with 4-page runs elsewhere.

    The answer's ``measured_hot_misses`` (reads of hot pages that had been pushed out) is a
    measurement, not part of the answer the read-ahead must preserve.
    """
    nbuf = inst.settings.nbuffers
    hot = inst.create_relation("hot", nbuf * 3 // 4)
    cold = inst.create_relation("cold", 200_000)
    rng = np.random.default_rng(7)
    inst.prewarm(hot)
    n = _n(3000, scale, 100)
    hot_blocks = rng.integers(0, hot.nblocks(), size=n * 8)
    starts = rng.integers(0, cold.nblocks() - 4, size=n)
    k = 0
    for i in range(n):
        for _ in range(8):
            buf = be.read_buffer(hot, int(hot_blocks[k]))
            k += 1
            be.release_buffer(buf)
        for b in range(int(starts[i]), int(starts[i]) + 4):
            buf = be.read_buffer(cold, b)
            be.release_buffer(buf)
    return {"pages": n * 12, "measured_hot_misses": be.stats.relations["hot"].blks_read}


def _hash_vacuum(inst: Instance, be: Any, scale: float) -> dict[str, Any]:
    heap = _build(inst, _shape("hash-vacuum-thread")).heap
    res = run_scan("vacuum", be, heap, variant="streamed", keep_blocks=False, hash_stream=False)
    return {"tuples_deleted": res.result["tuples_deleted"]}


_DEVICES = {
    "nvme": DEVICE_PROFILES["nvme"],
    # A provisioned cloud volume: ~1 ms per request and only a few requests served at once, so a
    # wasted speculative read delays the reads somebody is waiting for.
    "cloud-4": DEVICE_PROFILES["cloud-1ms"].with_changes(name="cloud-1ms-4ch", channels=4),
}

WORKLOADS: tuple[Workload, ...] = (
    Workload("seqscan unstreamed", "sequential scan one ReadBuffer per page (PostgreSQL 16 path)", _seqscan),
    Workload(
        "TID-range slices",
        "successive statements each read the next 32 pages (tidrangescan): the pattern spans statements",
        _tid_slices,
    ),
    Workload(
        "TID-range slices, reset",
        "the same, with the detector forgotten between statements (a per-scan detector)",
        _tid_slices_reset,
        expect="gain",
    ),
    Workload(
        "SYSTEM_ROWS", "TABLESAMPLE SYSTEM_ROWS: a constant stride", _sample("system_rows", rows=5000, seed=3)
    ),
    Workload(
        "BERNOULLI LIMIT",
        "TABLESAMPLE BERNOULLI(100) LIMIT: sequential",
        _sample("bernoulli", sample_percent=100.0, limit=5000, repeatable_seed=3.0),
    ),
    Workload(
        "SYSTEM(1)",
        "TABLESAMPLE SYSTEM(1): ascending with random gaps, no stride to find",
        _sample("system", sample_percent=1.0, repeatable_seed=3.0),
        expect="neutral",
    ),
    Workload(
        "index scan, correlated",
        "heap fetches of an index scan whose order follows the heap",
        _indexscan(1.0),
    ),
    Workload(
        "index scan, correlation 0.5",
        "heap fetches in short ascending runs broken by jumps",
        _indexscan(0.5),
        expect="neutral",
    ),
    Workload(
        "hot set + 4-page runs",
        "random hits on a hot table filling 3/4 of the pool, mixed with 4-page runs on a cold one",
        _hot_and_short_runs,
        expect="loss",
    ),
    Workload(
        "hot set + 4-page runs, cloud",
        "the same on a cloud volume serving 4 requests at a time (1 ms each)",
        _hot_and_short_runs,
        expect="loss",
        device="cloud-4",
    ),
    Workload(
        "hash VACUUM (PG 18)",
        "VACUUM of a table with a hash index: bucket pages one ReadBuffer each",
        _hash_vacuum,
    ),
    Workload(
        "seqscan streamed",
        "PostgreSQL 18's streamed sequential scan: the hook is never called",
        _seqscan_streamed,
        expect="neutral",
    ),
    Workload(
        "seqscan unstreamed, sync buffered",
        "io_method=sync without direct I/O: the read-ahead can only give advice to the kernel",
        _seqscan,
        settings=(("io_method", "sync"), ("debug_io_direct", "")),
        expect="neutral",
    ),
)


def _one(w: Workload, scale: float, readahead: bool, seed: int) -> dict[str, Any]:
    inst = Instance(_settings(**dict(w.settings)), device=_DEVICES[w.device], seed=seed, record_reads=False)
    be = inst.backend()
    ra = HeuristicReadahead().install(be) if readahead else None
    t0 = inst.clock.now
    answer = w.run(inst, be, scale)
    out = {
        "elapsed_us": inst.clock.now - t0,
        "reads": be.stats.reads,
        "blocks_read": be.stats.shared_blks_read,
        "answer": answer,
    }
    if ra is not None:
        out["readahead"] = ra.finish().as_dict()
    return out


def run_readahead_evaluation(
    json_path: str | os.PathLike[str] | None = None,
    plot_path: str | os.PathLike[str] | None = None,
    *,
    scale: float = 1.0,
    seed: int = 0,
    workloads: tuple[Workload, ...] = WORKLOADS,
) -> list[dict[str, Any]]:
    """Run every workload without and with read-ahead; the rows (and optional JSON and plot)."""
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"scale = {scale!r} is out of range: allowed 0 < scale <= 1")
    rows = []
    for w in workloads:
        off = _one(w, scale, False, seed)
        on = _one(w, scale, True, seed)
        same = {k: v for k, v in on["answer"].items() if not k.startswith("measured_")}
        if same != {k: v for k, v in off["answer"].items() if not k.startswith("measured_")}:
            raise AssertionError(
                f"read-ahead changed the answer of {w.name!r}: {off['answer']} vs {on['answer']}"
            )
        ra = on["readahead"]
        rows.append(
            {
                "workload": w.name,
                "description": w.description,
                "expect": w.expect,
                "elapsed_without_ms": round(off["elapsed_us"] / 1000, 2),
                "elapsed_with_ms": round(on["elapsed_us"] / 1000, 2),
                "time_saved_ms": round((off["elapsed_us"] - on["elapsed_us"]) / 1000, 2),
                "reads_without": off["reads"],
                "reads_with": on["reads"],
                "reads_saved": off["reads"] - on["reads"],
                "blocks_read_without": off["blocks_read"],
                "blocks_read_with": on["blocks_read"],
                "speculative_ios": ra["speculative_ios"],
                "speculative_blocks": ra["speculative_blocks"],
                "used_blocks": ra["used_blocks"],
                "wasted_blocks": ra["wasted_blocks"],
                "unused_resident_blocks": ra["unused_resident_blocks"],
                "evicted_by_readahead": ra["evicted_by_readahead"],
                "advice_calls": ra["advice_calls"],
                "estimated_time_saved_ms": round(ra["time_saved_us"] / 1000, 2),
                "device": w.device,
                **{
                    f"{k[len('measured_') :]}_{side}": v[k]
                    for side, v in (("without", off["answer"]), ("with", on["answer"]))
                    for k in v
                    if k.startswith("measured_")
                },
            }
        )
    if json_path is not None:
        Path(json_path).write_text(json.dumps(rows, indent=2) + "\n")
    if plot_path is not None:
        from .plots import plot_readahead

        plot_readahead(rows, plot_path)
    return rows


def format_readahead(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of the evaluation."""
    head = (
        f"{'workload':<34} {'time off→on (ms)':>22} {'reads off→on':>17} {'spec. blocks':>12} "
        f"{'used':>7} {'wasted':>7} {'evicted':>7}"
    )
    lines = [head]
    for r in rows:
        t = f"{r['elapsed_without_ms']:.1f}→{r['elapsed_with_ms']:.1f}"
        rd = f"{r['reads_without']}→{r['reads_with']}"
        lines.append(
            f"{r['workload']:<34} {t:>22} {rd:>17} {r['speculative_blocks']:>12} "
            f"{r['used_blocks']:>7} {r['wasted_blocks'] + r['unused_resident_blocks']:>7} "
            f"{r['evicted_by_readahead']:>7}"
        )
    return "\n".join(lines)
