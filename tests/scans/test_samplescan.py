"""TABLESAMPLE scans (``reference_impl.scans.samplescan``): streamed vs unstreamed, sampling.md, the thread.

Oracles: the live-server vectors of sampling.md (SYSTEM and BERNOULLI regression tables, the
3000-block runs, the SYSTEM_ROWS stride vectors), scans.md §4 (one read per sampled block
unstreamed, strategy contexts, BERNOULLI's sync start), the unstreamed variant (the same answer
and pages, never fewer reads except for the look-ahead of early stops), and, for SYSTEM_TIME,
the documentation sentence proposed in the sample-scan thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, Settings
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.sampling import hashfloat8, stride_visit_order, system_sample_blocks
from reference_impl.scans import run_scan
from reference_impl.scans._heapfetch import TidDigest
from reference_impl.scans.samplescan import system_time_deadline

SPECS = st.builds(
    RelationSpec,
    nblocks=st.integers(0, 400),
    tuples_per_page=st.one_of(st.integers(0, 20), st.tuples(st.just("poisson"), st.floats(0, 10))),
    dead_fraction=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**32),
)
SETTINGS = st.builds(
    Settings,
    io_method=st.sampled_from(["sync", "worker", "io_uring"]),
    effective_io_concurrency=st.sampled_from([0, 1, 16, 64]),
    io_combine_limit=st.sampled_from([1, 4, 16]),
    shared_buffers=st.sampled_from([1024, 4096]),
    debug_io_direct=st.sampled_from(["", "data"]),
    synchronize_seqscans=st.booleans(),
)
METHODS = {
    "tablesample_system": lambda d: {
        "sample_percent": d.draw(st.sampled_from([0.0, 0.5, 1.0, 10.0, 50.0, 100.0])),
        "repeatable_seed": d.draw(st.one_of(st.none(), st.floats(-1e6, 1e6))),
        "seed": d.draw(st.integers(0, 2**32 - 1)),
    },
    "tablesample_bernoulli": lambda d: {
        "sample_percent": d.draw(st.sampled_from([0.0, 3.7, 24.0, 25.0, 100.0])),
        "repeatable_seed": d.draw(st.one_of(st.none(), st.floats(-1e6, 1e6))),
        "seed": d.draw(st.integers(0, 2**32 - 1)),
    },
    "tablesample_system_rows": lambda d: {
        "rows": d.draw(st.integers(0, 300)),
        "seed": d.draw(st.integers(0, 2**32 - 1)),
    },
}


def _run(scan, spec, settings_, cached, variant, inst_kw=None, **params):
    inst = Instance(settings_, **(inst_kw or {}))
    rel = build_relation(inst, spec)
    if cached:
        inst.prewarm(rel.heap, cached)
    return run_scan(scan, inst.backend(), rel.heap, variant=variant, **params)


def _window(result) -> int:
    return max((s["capacity"] for s in result.stream_stats), default=0)


@settings(max_examples=25, deadline=None)
@given(scan=st.sampled_from(sorted(METHODS)), spec=SPECS, settings_=SETTINGS, data=st.data())
def test_streamed_and_unstreamed_agree(scan, spec, settings_, data) -> None:
    params = METHODS[scan](data)
    params["limit"] = data.draw(st.one_of(st.none(), st.integers(0, 200)), label="limit")
    n = spec.nblocks
    cached = (
        sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n), label="cached")) if n else []
    )
    s = _run(scan, spec, settings_, cached, "streamed", **params)
    u = _run(scan, spec, settings_, cached, "unstreamed", **params)
    assert s.error is None and u.error is None
    assert s.result == u.result
    assert s.pinned_after == u.pinned_after == 0
    assert u.blocks == u.result["blocks"]
    if scan == "tablesample_system_rows":
        # Blocks queued before the row count was reached are consumed, returning nothing.
        answer = s.result["blocks"]
        assert s.blocks[: len(answer)] == answer == u.blocks
        speculative = len(s.blocks) - len(answer)
        assert speculative <= _window(s) + 1
        assert s.read_count <= u.read_count + speculative + (_window(s) if params["limit"] is not None else 0)
    else:
        assert s.blocks == u.blocks
        if params["limit"] is None:
            assert s.read_count <= u.read_count
        else:
            assert s.read_count <= u.read_count + _window(s)


# ------------------------------------------------------------------------------- sampling.md vectors
class _FixedPages:
    """A content model with given line-pointer counts per page (all live)."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def page(self, fork, block):
        n = self.counts[block]
        return SimpleNamespace(
            max_offset=n, nlive=n, ndead=0, live_offsets=np.arange(1, n + 1, dtype=np.uint16)
        )


def _regression_table(inst):
    return inst.create_relation("reg", 4, content=_FixedPages([3, 3, 3, 1]))


def _digest(tids) -> int:
    d = TidDigest()
    for b, o in tids:
        d.add(b, [o])
    return d.value


@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_regression_tables(variant: str) -> None:
    inst = Instance()
    rel = _regression_table(inst)
    be = inst.backend()
    r = run_scan("tablesample_system", be, rel, variant=variant, sample_percent=50, repeatable_seed=0)
    assert r.result["blocks"] == [1, 2]
    r = run_scan("tablesample_system", be, rel, variant=variant, sample_percent=100.0 / 11, repeatable_seed=0)
    assert r.result["blocks"] == [] and r.read_count == 0
    r = run_scan("tablesample_bernoulli", be, rel, variant=variant, sample_percent=50, repeatable_seed=0)
    assert (r.result["rows"], r.result["tid_digest"]) == (
        5,
        _digest([(1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]),
    )
    r = run_scan("tablesample_bernoulli", be, rel, variant=variant, sample_percent=5.5, repeatable_seed=0)
    assert (r.result["rows"], r.result["tid_digest"]) == (1, _digest([(2, 2)]))


def test_live_runs_on_3000_blocks() -> None:
    spec = RelationSpec(nblocks=3000, tuples_per_page=1)
    u = _run(
        "tablesample_system", spec, Settings(), [], "unstreamed", sample_percent=7.3, repeatable_seed=42.25
    )
    assert len(u.result["blocks"]) == 218
    assert u.result["blocks"][:7] == [29, 76, 92, 104, 105, 112, 124]
    # PostgreSQL 18: one read per sampled block, ascending.
    assert [(r.start, r.nblocks) for r in u.reads] == [(b, 1) for b in u.result["blocks"]]
    s = _run(
        "tablesample_system", spec, Settings(), [], "streamed", sample_percent=7.3, repeatable_seed=42.25
    )
    assert s.read_count < 218 and sum(r.nblocks for r in s.reads) == 218
    # Adjacent sampled blocks share a read once the distance allows (104, 105 come early: single reads).
    starts = {r.start for r in s.reads}
    assert set(u.result["blocks"]) - starts <= {b for b in u.result["blocks"] if b - 1 in u.result["blocks"]}
    b = _run(
        "tablesample_bernoulli", spec, Settings(), [], "unstreamed", sample_percent=3.7, repeatable_seed=-17
    )
    assert b.result["rows"] == 112
    assert [(r.start, r.nblocks) for r in b.reads] == [(k, 1) for k in range(3000)]


def test_system_rows_stride_vectors() -> None:
    spec = RelationSpec(nblocks=3000, tuples_per_page=1)
    u = _run("tablesample_system_rows", spec, Settings(), [], "unstreamed", rows=6, seed=0)
    assert (u.result["firstblock"], u.result["step"]) == (2610, 1279)
    assert u.result["blocks"] == [889, 2168, 447, 1726, 5, 1284]
    assert [(r.start, r.nblocks) for r in u.reads] == [(b, 1) for b in u.result["blocks"]]
    order = stride_visit_order(12345, 3000)
    r = _run("tablesample_system_rows", spec, Settings(), [], "streamed", rows=500, seed=12345)
    assert r.result["blocks"] == order[:500].tolist()
    assert r.result["rows"] == 500


def test_seed_from_repeatable_is_hashfloat8() -> None:
    spec = RelationSpec(nblocks=500, tuples_per_page=2)
    r = _run("tablesample_system", spec, Settings(), [], "streamed", sample_percent=20, repeatable_seed=123.5)
    assert r.result["seed"] == hashfloat8(123.5) == 1777334152
    assert r.result["blocks"] == system_sample_blocks(500, 20, 1777334152).tolist()


# ------------------------------------------------------------------------------- strategy and sync scan
@pytest.mark.parametrize(
    ("scan", "params", "nblocks", "context"),
    [
        ("tablesample_system", {"sample_percent": 0.5}, 1200, "normal"),
        ("tablesample_system", {"sample_percent": 1.0}, 1200, "bulkread"),
        ("tablesample_system", {"sample_percent": 50.0}, 256, "normal"),
        ("tablesample_bernoulli", {"sample_percent": 1.0}, 257, "bulkread"),
        ("tablesample_bernoulli", {"sample_percent": 1.0}, 256, "normal"),
        ("tablesample_system_rows", {"rows": 100}, 1200, "bulkread"),
        ("tablesample_system_time", {"time_ms": 1.0}, 1200, "bulkread"),
    ],
)
@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_strategy_follows_the_method_and_the_large_table_rule(
    scan, params, nblocks, context, variant
) -> None:
    # shared_buffers = 1024: the large-table threshold NBuffers / 4 is 256 blocks.
    spec = RelationSpec(nblocks=nblocks, tuples_per_page=1)
    r = _run(scan, spec, Settings(shared_buffers=1024, synchronize_seqscans=False), [], variant, **params)
    assert set(r.io) == {context}


def test_bernoulli_starts_at_the_sync_location_and_wraps() -> None:
    spec = RelationSpec(nblocks=700, tuples_per_page=3)
    cfg = Settings(shared_buffers=1024)  # 700 blocks > NBuffers / 4: synchronized scanning
    base = _run(
        "tablesample_bernoulli",
        spec,
        cfg,
        [],
        "unstreamed",
        sample_percent=30,
        repeatable_seed=1,
        sync_location=0,
    )
    assert base.result["start_block"] == 0
    for variant in ("streamed", "unstreamed"):
        r = _run(
            "tablesample_bernoulli",
            spec,
            cfg,
            [],
            variant,
            sample_percent=30,
            repeatable_seed=1,
            sync_location=160,
        )
        assert r.result["start_block"] == 160
        assert r.blocks == [*range(160, 700), *range(160)]
        assert (r.result["rows"], r.result["tid_digest"]) == (base.result["rows"], base.result["tid_digest"])


# ------------------------------------------------------------------------------- SYSTEM_TIME
@settings(max_examples=20, deadline=None)
@given(
    settings_=SETTINGS,
    nblocks=st.integers(1, 3000),
    time_ms=st.sampled_from([0.0, 0.5, 2.0, 5.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_system_time_visits_a_prefix_of_the_stride_order(settings_, nblocks, time_ms, seed) -> None:
    spec = RelationSpec(nblocks=nblocks, tuples_per_page=1)
    order = stride_visit_order(seed, nblocks).tolist()
    runs = {
        v: _run("tablesample_system_time", spec, settings_, [], v, time_ms=time_ms, seed=seed)
        for v in ("streamed", "unstreamed")
    }
    for v, r in runs.items():
        res = r.result
        assert r.error is None and r.pinned_after == 0
        assert r.blocks == res["blocks"] == order[: len(r.blocks)]
        assert res["selected"] == len(r.blocks)  # every selected block is processed
        assert res["pages_after_deadline"] >= res["queued_at_expiry"]
        if v == "unstreamed":
            assert res["pages_after_deadline"] <= 1 and res["queued_at_expiry"] == 0
        else:
            assert res["pages_after_deadline"] <= _window(r) + 1
    a, b = runs["streamed"].blocks, runs["unstreamed"].blocks
    shorter, longer = sorted((a, b), key=len)
    assert longer[: len(shorter)] == shorter


def test_system_time_documentation_sentence_holds() -> None:
    """ "The time limit is checked while selecting blocks. As blocks can be selected and read ahead,
    any blocks already queued when the limit expires are still processed. The query can therefore
    exceed the requested duration by an amount that depends on the look-ahead distance and how
    long those blocks take to read and process." (the sample-scan thread)"""
    spec = RelationSpec(nblocks=20_000, tuples_per_page=1)
    out = {}
    for eic in (16, 256):
        cfg = Settings(
            io_method="sync", debug_io_direct="data", shared_buffers=262144, effective_io_concurrency=eic
        )
        for v in ("streamed", "unstreamed"):
            r = _run("tablesample_system_time", spec, cfg, [], v, time_ms=20.0, seed=7)
            res = r.result
            assert res["expired"]
            # Checked while selecting: the selection that found the limit expired came at or after
            # the deadline, and nothing was selected after it.
            assert res["expired_at_us"] >= res["deadline_us"]
            assert res["selected"] == len(r.blocks)
            out[eic, v] = res
    for eic in (16, 256):
        s, u = out[eic, "streamed"], out[eic, "unstreamed"]
        # Queued blocks are still processed after the deadline...
        assert s["queued_at_expiry"] > 1 and s["pages_after_deadline"] >= s["queued_at_expiry"]
        assert u["pages_after_deadline"] <= 1
        # ...so the query exceeds the limit by more than the one-block-at-a-time scan does.
        assert s["overshoot_us"] > u["overshoot_us"]
    # The overshoot grows with the look-ahead distance (eic bounds it for single-block reads).
    assert out[256, "streamed"]["queued_at_expiry"] > out[16, "streamed"]["queued_at_expiry"]
    assert out[256, "streamed"]["overshoot_us"] > out[16, "streamed"]["overshoot_us"]


def test_system_time_deadline_arithmetic() -> None:
    assert system_time_deadline(1000, 0.0) == 1000
    assert system_time_deadline(0, 100.0) == 100_000
    assert system_time_deadline(0, 0.0015) == 2  # 1 µs = 0.001 ms < 0.0015 ms
    for ms in (0.1, 0.3, 2.7, 33.3333):
        d = system_time_deadline(0, ms)
        assert d / 1000.0 >= ms and (d - 1) / 1000.0 < ms


# ------------------------------------------------------------------------------- memory (slow)
_MEMORY_PROBE = """
import json, resource
from reference_impl import Instance, Settings
from reference_impl.relations import SHAPES, build_relation
from reference_impl.scans import run_scan
inst = Instance(Settings(io_method="worker", debug_io_direct="data"), record_reads=False)
rel = build_relation(inst, SHAPES["sample-thread-64gib"])
res = run_scan("tablesample_system", inst.backend(), rel.heap, variant="streamed", keep_blocks=False,
               sample_percent=1.0, repeatable_seed=1.0)
hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "hwm_kb": hwm[0] if hwm else None,
                  "reads": res.read_count, "rows": res.result["rows"], "nblocks": res.result["nblocks"]}))
"""


@pytest.mark.slow
def test_system_1_percent_of_64gib_stays_under_300_mb() -> None:
    out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    # On Linux a child's ru_maxrss starts from the parent's RSS at fork (the kernel keeps the
    # larger high-water mark across exec), so it over-states the scan when pytest is big;
    # VmHWM is the peak of the child's own address space.
    print(
        f"SYSTEM(1) streamed over 8,388,608 blocks: ru_maxrss {figures['rss_kb'] / 1024:.1f} MB, "
        f"VmHWM {(figures['hwm_kb'] or 0) / 1024:.1f} MB, {figures}"
    )
    assert figures["nblocks"] == 8_388_608
    assert 0.009 * 8_388_608 < figures["rows"] < 0.011 * 8_388_608
    assert figures["rss_kb"] < 300 * 1024
    if figures["hwm_kb"] is not None:
        assert figures["hwm_kb"] < 300 * 1024


# ------------------------------------------------------------------------------- the thread's tables (slow)
_THREAD_CASES = {
    "SYSTEM(0.1)": ("tablesample_system", {"sample_percent": 0.1, "repeatable_seed": 1.0}),
    "SYSTEM(1)": ("tablesample_system", {"sample_percent": 1.0, "repeatable_seed": 1.0}),
    "SYSTEM(10)": ("tablesample_system", {"sample_percent": 10.0, "repeatable_seed": 1.0}),
    "SYSTEM_ROWS(100000)": ("tablesample_system_rows", {"rows": 100_000, "seed": 20260826}),
    "BERNOULLI(100) LIMIT 100000": (
        "tablesample_bernoulli",
        {"sample_percent": 100.0, "repeatable_seed": 1.0, "limit": 100_000},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_THREAD_CASES))
def test_sample_thread_read_counts(case: str) -> None:
    """docs/scans/heap.md's 64 GiB table: debug_io_direct=data, worker, 128 MB, eic 16."""
    from reference_impl.relations import SHAPES

    scan, params = _THREAD_CASES[case]
    cfg = Settings(
        io_method="worker", debug_io_direct="data", shared_buffers=16384, effective_io_concurrency=16
    )
    out = {}
    for v in ("unstreamed", "streamed"):
        out[v] = _run(
            scan,
            SHAPES["sample-thread-64gib"],
            cfg,
            [],
            v,
            inst_kw={"record_reads": False},
            keep_blocks=False,
            **params,
        )
    u, s = out["unstreamed"], out["streamed"]
    print(f"{case}: reads {u.read_count} -> {s.read_count}, blocks {u.read_blocks} -> {s.read_blocks}")
    assert u.result == s.result
    assert u.read_count == u.read_blocks == len(u.result["blocks"])  # one block per read
    window = _window(s)
    if scan == "tablesample_system":
        assert s.read_blocks == u.read_blocks and s.read_count <= u.read_count
    else:
        assert u.read_blocks < s.read_blocks <= u.read_blocks + window + 1


@pytest.mark.slow
def test_system_time_thread_table() -> None:
    """docs/scans/heap.md's SYSTEM_TIME(100) table on a 1 GiB table (131,072 pages, one row each)."""
    spec = RelationSpec(name="wide", nblocks=131_072, tuples_per_page=1, tuple_width=5000)
    over = {}
    for method in ("worker", "sync", "io_uring"):
        for eic in (16, 256):
            cfg = Settings(
                io_method=method,
                io_workers=2,
                debug_io_direct="data",
                shared_buffers=262144,
                io_combine_limit=16,
                effective_io_concurrency=eic,
            )
            for v in ("unstreamed", "streamed"):
                r = _run("tablesample_system_time", spec, cfg, [], v, inst_kw={"record_reads": False},
                         keep_blocks=False, time_ms=100.0, seed=20260826)  # fmt: skip
                res = r.result
                over[method, eic, v] = res["overshoot_us"]
                print(
                    method,
                    eic,
                    v,
                    f"{r.elapsed_us / 1000:.2f} ms",
                    res["overshoot_us"],
                    res["pages_after_deadline"],
                )
                if v == "unstreamed":
                    assert res["pages_after_deadline"] <= 1
                else:
                    assert res["queued_at_expiry"] == eic  # single-block reads: max_ios bounds the queue
    for method in ("worker", "sync", "io_uring"):
        assert over[method, 256, "streamed"] > over[method, 16, "streamed"] > over[method, 16, "unstreamed"]
    assert over["sync", 256, "streamed"] == max(over.values())
