"""Online data-checksum enabling (reference_impl/scans/checksums.py).

Oracles: datachecksum_state.c as scans.md §10 describes it (every existing fork, blocks
0..numblocks-1 fixed at the fork's start, VACUUM ring, one block per read, mark dirty + FPI for
WAL-logged relations and init forks, abort check after each block, vacuum_delay_point), the seed
thread's claims about the v2 stream (numblocks still bounds the reads, end() drains read-ahead
blocks and can surface their I/O error, one stream per empty fork), and arithmetic done here
independently of the model (ceil(n/16) reads per cold fork with READ_STREAM_FULL).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    Fault,
    FaultPlan,
    ForkNumber,
    Instance,
    ModelUsageError,
    ReadIOError,
    Settings,
)
from reference_impl.relations import SHAPES, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.base import ScanContext
from reference_impl.scans.checksums import (
    CLUSTER_DATABASES,
    checksums_stream_flags,
    enable_data_checksums,
    fresh_cluster,
)


def _fork_sizes(rels: list) -> list[int]:
    return [r.nblocks(f) for r in rels for f in r.forks()]


def _database(inst: Instance, specs: list[RelationSpec]) -> list:
    return [build_relation(inst, s).heap for s in specs]


@st.composite
def _databases(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 3))
    specs = []
    for i in range(n):
        nblocks = draw(st.integers(0, 160))
        vacuumed = draw(st.booleans())
        specs.append(
            RelationSpec(
                name=f"r{i}",
                nblocks=nblocks,
                vacuumed=vacuumed,
                unlogged=draw(st.booleans()),
                # Empty VM and FSM forks exist only where VACUUM made them (RelationSpec checks).
                empty=nblocks == 0 and vacuumed and draw(st.booleans()),
                seed=draw(st.integers(0, 1000)),
                payload=False,
            )
        )
    cfg = {
        "io_method": draw(st.sampled_from(["sync", "worker", "io_uring"])),
        "io_combine_limit": draw(st.sampled_from([1, 8, 16])),
        "maintenance_io_concurrency": draw(st.sampled_from([0, 4, 16])),
        "shared_buffers": draw(st.sampled_from([4096, 16384])),
        "version": draw(st.sampled_from(["18", "master"])),
    }
    cached_fraction = draw(st.sampled_from([0.0, 0.3, 0.8]))
    return specs, cfg, cached_fraction, draw(st.integers(0, 2**16)), draw(st.booleans())


def _prepare(specs: list[RelationSpec], cfg: dict, cached_fraction: float, seed: int) -> tuple:
    inst = Instance(Settings(**cfg))
    rels = _database(inst, specs)
    rng = np.random.default_rng(seed)
    for rel in rels:
        for fork in rel.forks():
            n = rel.nblocks(fork)
            k = round(cached_fraction * n)
            if k:
                inst.prewarm(rel, sorted(int(b) for b in rng.choice(n, size=k, replace=False)), fork)
    return inst, rels


@settings(max_examples=20, deadline=None)
@given(_databases())
def test_variants_checksum_the_same_pages_and_streamed_reads_no_more(case: tuple) -> None:
    specs, cfg, cached_fraction, seed, full = case
    out = {}
    for variant in ("streamed", "unstreamed"):
        inst, rels = _prepare(specs, cfg, cached_fraction, seed)
        be = inst.backend()
        others = ",".join(r.name for r in rels[1:])
        res = run_scan("data_checksums", be, rels[0], variant=variant, others=others, full=full)
        assert res.error is None and res.pinned_after == 0
        out[variant] = (res, rels)
    s, u = out["streamed"][0], out["unstreamed"][0]
    rels = out["unstreamed"][1]
    assert s.result == u.result
    assert s.blocks == u.blocks
    sizes = _fork_sizes(rels)
    assert u.result["pages_checksummed"] == sum(sizes) == u.result["blocks_total"]
    assert u.result["forks"] == len(sizes) and u.result["empty_forks"] == sizes.count(0)
    logged = sum(
        r.nblocks(f) for r in rels for f in r.forks() if r.persistence == "p" or f == ForkNumber.INIT
    )
    assert u.result["pages_wal_logged"] == logged
    assert s.read_count <= u.read_count
    # Unstreamed: one block per read, all of them through the VACUUM ring.
    assert set(u.io) <= {"vacuum"} and u.read_count == u.read_blocks
    assert s.read_blocks == u.read_blocks
    # v2 skips nothing but empty forks: one stream per non-empty fork.
    assert len(s.stream_stats) == sum(1 for n in sizes if n)


def test_cold_reads_are_one_per_block_or_one_per_16_blocks() -> None:
    for io_method in ("sync", "worker"):
        reads = {}
        for variant in ("streamed", "unstreamed"):
            inst = Instance(Settings(io_method=io_method))
            sr = build_relation(inst, RelationSpec(nblocks=5000, payload=False))
            res = run_scan("data_checksums", inst.backend(), sr.heap, variant=variant)
            reads[variant] = res
        sizes = _fork_sizes([sr.heap])
        assert sizes == [5000, 4, 1]  # main, FSM (root, level 1, two leaves), VM
        assert reads["unstreamed"].read_count == sum(sizes) == 5005
        assert reads["streamed"].read_count == sum(math.ceil(n / 16) for n in sizes)
        assert set(reads["streamed"].io) == {"vacuum"}
        assert reads["streamed"].result == reads["unstreamed"].result


def test_ramp_up_without_full_costs_a_few_reads_per_fork() -> None:
    res = {}
    for full in (True, False):
        inst = Instance(Settings(io_method="sync"))
        rel = inst.create_relation("t", forks={ForkNumber.MAIN: 200, ForkNumber.FSM: 3})
        res[full] = run_scan("data_checksums", inst.backend(), rel, variant="streamed", full=full)
    assert res[True].read_count == math.ceil(200 / 16) + 1
    assert res[False].read_count > res[True].read_count
    assert res[False].reads is not None and res[False].reads[0].nblocks == 1  # distance starts at 1
    assert res[True].result == res[False].result
    assert checksums_stream_flags(False) != checksums_stream_flags(True)


@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_abort_after_n_blocks_unstreamed_stops_streamed_drains(io_method: str) -> None:
    runs = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method=io_method))
        rel = inst.create_relation("t", 400)
        be = inst.backend()
        ctx = ScanContext(be)
        run = enable_data_checksums(ctx, [rel], streamed=variant == "streamed", abort_after_blocks=25)
        assert be.refs.distinct() == 0
        runs[variant] = (run, be, list(ctx.blocks or []))
    s, u = runs["streamed"], runs["unstreamed"]
    assert s[0].answer == u[0].answer
    assert u[0].answer["pages_checksummed"] == 25 and u[0].answer["aborted"] is True
    assert s[2] == u[2] == list(range(25))
    assert u[1].stats.shared_blks_read == 25  # returns right after the current buffer
    assert s[0].aborted_at == u[0].aborted_at == ("t", "main", 24)
    # The stream's queue is drained by end(): blocks past 25 were read, none at or past 400.
    assert s[1].stats.shared_blks_read > 25 and s[0].drained_buffers > 0
    log = s[1].stats.read_log
    assert log is not None and max(r.start + r.nblocks for r in log) <= 400
    assert s[0].progress[-1].blocks_done == 25


@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_abort_drain_can_raise_an_io_error_of_a_read_ahead_block(io_method: str) -> None:
    def run(variant: str) -> tuple:
        plan = FaultPlan([Fault("eio", relation="t", block=40)])
        inst = Instance(Settings(io_method=io_method), faults=plan)
        rel = inst.create_relation("t", 400)
        res = run_scan("data_checksums", inst.backend(), rel, variant=variant, abort_after_blocks=20)
        return res, plan

    u, uplan = run("unstreamed")
    assert u.error is None and u.result["aborted"] is True and uplan.ledger == []
    s, splan = run("streamed")
    assert s.error_type == "ReadIOError" and "32..47" in (s.error or "")
    assert s.pinned_after == 0
    assert [e["read_start"] for e in splan.ledger] == [32]
    # Without the abort both variants fail on block 40 while processing it.
    inst = Instance(Settings(io_method=io_method), faults=FaultPlan([Fault("eio", relation="t", block=40)]))
    full = run_scan("data_checksums", inst.backend(), inst.create_relation("t", 400), variant="unstreamed")
    assert full.error_type == "ReadIOError" and full.blocks == list(range(40))


def test_abort_drain_error_is_raised_from_end_after_the_abort_was_requested() -> None:
    inst = Instance(Settings(io_method="worker"), faults=FaultPlan([Fault("eio", relation="t", block=40)]))
    rel = inst.create_relation("t", 400)
    ctx = ScanContext(inst.backend())
    with pytest.raises(ReadIOError):
        enable_data_checksums(ctx, [rel], streamed=True, abort_after_blocks=20)
    assert ctx.pages == 20  # the worker had processed 20 blocks and was returning


@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_numblocks_is_fixed_when_the_fork_starts(variant: str) -> None:
    inst = Instance(Settings(io_method="worker"))
    sr = build_relation(inst, RelationSpec(nblocks=300, vacuumed=False, payload=False))
    fsm = sr.heap.nblocks(ForkNumber.FSM)  # INSERT-loaded: an FSM, no VM
    res = run_scan("data_checksums", inst.backend(), sr.heap, variant=variant, grow_during=200)
    assert sr.heap.nblocks() == 500
    assert res.result["pages_checksummed"] == 300 + fsm and res.blocks[:300] == list(range(300))
    assert res.reads is not None and max(r.start + r.nblocks for r in res.reads if r.fork == "main") <= 300


def test_growth_with_abort_never_reads_past_the_start_size() -> None:
    inst = Instance(Settings(io_method="sync"))
    rel = inst.create_relation("t", 64)
    res = run_scan("data_checksums", inst.backend(), rel, grow_during=1000, abort_after_blocks=60)
    assert res.reads is not None and max(r.start + r.nblocks for r in res.reads) == 64
    assert res.result["pages_checksummed"] == 60


def test_empty_forks_need_no_stream_and_v2_pays_one_each() -> None:
    def run(empty_fork_stream: bool) -> tuple:
        inst = Instance(Settings(io_method="worker"))
        rels = [inst.create_relation(f"e{i}", 0) for i in range(50)]
        rels.append(
            inst.create_relation("x", forks={ForkNumber.MAIN: 0, ForkNumber.FSM: 0, ForkNumber.VM: 0})
        )
        ctx = ScanContext(inst.backend())
        run = enable_data_checksums(
            ctx, rels, streamed=True, empty_fork_stream=empty_fork_stream, stream_begin_us=2.5
        )
        return run, inst.clock.now, inst.backend().stats.reads

    fast, t_fast, _ = run(False)
    v2, t_v2, reads = run(True)
    assert fast.streams_created == 0 and v2.streams_created == 53
    assert fast.answer == v2.answer and fast.answer["empty_forks"] == 53
    assert reads == 0
    assert t_v2 - t_fast == round(53 * 2.5) and v2.stream_cpu_us == 53 * 2.5


def test_cost_based_delay_sleeps_when_the_balance_reaches_the_limit() -> None:
    inst = Instance(Settings(io_method="sync"))
    rel = inst.create_relation("t", 100)
    ctx = ScanContext(inst.backend())
    run = enable_data_checksums(ctx, [rel], streamed=False, cost_delay=2, cost_limit=100)
    # Each cold block costs page_miss 2 + page_dirty 20 = 22: the 5th block brings the balance to
    # 110 >= 100, so the worker naps 2 ms * 110 / 100 = 2.2 ms and starts again from 0.
    assert run.sleeps == 20 and run.slept_us == 20 * 2200
    capped = enable_data_checksums(
        ScanContext(Instance(Settings(io_method="sync")).backend()),
        [Instance(Settings()).create_relation("u", 10)],
        streamed=False,
        cost_delay=1,
        cost_limit=1,
    )
    # A balance of 22 against a limit of 1 would ask for 22 ms; the nap is capped at 4 x cost_delay.
    assert capped.sleeps == 10 and capped.slept_us == 10 * 4000
    assert not inst.backend().vacuum_cost_active


def test_cost_delay_throttles_both_variants_alike() -> None:
    slept = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="worker"), device="cloud-1ms")
        rel = inst.create_relation("t", 400)
        ctx = ScanContext(inst.backend())
        run = enable_data_checksums(ctx, [rel], streamed=variant == "streamed", cost_delay=5, cost_limit=200)
        slept[variant] = run.slept_us
        assert inst.clock.now >= run.slept_us
    # Same pages, same cost per page: the same total nap time (the stream only moves the misses'
    # cost to look-ahead time).
    assert abs(slept["streamed"] - slept["unstreamed"]) <= 5 * 4 * 1000


def test_progress_timeline_like_pg_stat_progress_data_checksums() -> None:
    inst = Instance(Settings(io_method="sync"))
    sr = build_relation(inst, RelationSpec(nblocks=2500, payload=False))
    ctx = ScanContext(inst.backend())
    run = enable_data_checksums(ctx, [sr.heap], streamed=True, progress_every=1000)
    rows = [(p.fork, p.blocks_total, p.blocks_done) for p in run.progress]
    assert rows == [
        ("main", 2500, 0),
        ("main", 2500, 1000),
        ("main", 2500, 2000),
        ("main", 2500, 2500),
        ("fsm", 3, 0),
        ("fsm", 3, 3),
        ("vm", 1, 0),
        ("vm", 1, 1),
    ]
    times = [p.time_us for p in run.progress]
    assert times == sorted(times) and times[-1] > times[0]
    assert all(p.relations_total == 1 for p in run.progress)


def test_abort_at_a_virtual_time() -> None:
    pages = {}
    for variant in ("streamed", "unstreamed"):
        # Direct I/O: no kernel read-ahead hides the 1 ms latency of one-block reads.
        inst = Instance(Settings(io_method="worker", debug_io_direct="data"), device="cloud-1ms")
        rel = inst.create_relation("t", 2000)
        res = run_scan("data_checksums", inst.backend(), rel, variant=variant, abort_at_us=50_000)
        assert res.result["aborted"] is True
        pages[variant] = res.result["pages_checksummed"]
    # One synchronous 1 ms read per block versus combined reads started ahead.
    assert 0 < pages["unstreamed"] <= 50 < pages["streamed"]


def test_unlogged_relations_log_only_their_init_fork() -> None:
    inst = Instance(Settings(io_method="sync"))
    sr = build_relation(inst, RelationSpec(nblocks=40, unlogged=True, payload=False))
    sr.heap.set_nblocks(ForkNumber.INIT, 1)
    res = run_scan("data_checksums", inst.backend(), sr.heap)
    assert res.result["pages_checksummed"] == 40 + 3 + 1 + 1
    assert res.result["pages_wal_logged"] == 1


def test_fresh_cluster_matches_the_measured_catalogs() -> None:
    inst = Instance()
    rels = fresh_cluster(inst)
    sizes = _fork_sizes(rels)
    assert CLUSTER_DATABASES == ("template1", "template0", "postgres")
    assert len(rels) == 46 + 3 * 224
    assert len(sizes) == 56 + 3 * 298 and sizes.count(0) == 13 + 3 * 52
    assert sum(sizes) == 64 + 3 * 908 == 2788
    assert sum(math.ceil(n / 16) for n in sizes) == 835
    assert rels[0].name.startswith("template1/") and all(r.is_catalog for r in rels)
    again = fresh_cluster(inst)
    assert [r.relid for r in again] == [r.relid for r in rels]
    warm = Instance()
    fresh_cluster(warm, resident=True)
    assert sum(len(warm.pool.resident_blocks(r)) for r in warm.storage.relations()) == 14 + 3 * 156
    with pytest.raises(ModelUsageError, match="repeat"):
        fresh_cluster(inst, databases=("a", "a"))


@pytest.mark.parametrize("resident", [False, True])
def test_cluster_catalogs_streamed_and_unstreamed(resident: bool) -> None:
    res = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="sync", debug_io_direct="data"))
        rel = inst.create_relation("t", 0)
        res[variant] = run_scan(
            "data_checksums", inst.backend(), rel, variant=variant, cluster=True, cluster_resident=resident
        )
    u, s = res["unstreamed"], res["streamed"]
    assert u.result == s.result and u.result["pages_checksummed"] == 2788
    assert u.read_count == (2788 - 482 if resident else 2788)
    assert u.hits == (482 if resident else 0)
    if not resident:
        assert s.read_count == 835
    assert s.read_count < u.read_count / 2.5


def test_thread_table_scaled_down() -> None:
    # The thread's table at 1/100 scale, vacuumed: main + FSM + VM forks.
    n = 9568
    for variant, expect in (("unstreamed", None), ("streamed", None)):
        inst = Instance(Settings(io_method="worker", debug_io_direct="data"), record_reads=False)
        sr = build_relation(inst, SHAPES["checksums-thread"].replace(nblocks=n))
        sizes = _fork_sizes([sr.heap])
        res = run_scan("data_checksums", inst.backend(), sr.heap, variant=variant, keep_blocks=False)
        want = sum(sizes) if variant == "unstreamed" else sum(math.ceil(x / 16) for x in sizes)
        assert res.read_count == want, (variant, sizes)
        assert res.blocks is None and res.reads is None
        del expect


def test_bad_arguments() -> None:
    inst = Instance()
    rel = inst.create_relation("t", 3)
    be = inst.backend()
    with pytest.raises(ModelUsageError, match="cost limit must be greater than zero"):
        enable_data_checksums(be, [rel], streamed=True, cost_limit=0)
    with pytest.raises(ModelUsageError, match="cluster_resident needs cluster=True"):
        run_scan("data_checksums", be, rel, cluster_resident=True)
    with pytest.raises(ModelUsageError, match="below 0"):
        run_scan("data_checksums", be, rel, cost_delay=-1)
    tmp = inst.storage.create_relation("tmp", 2, persistence="t", temp_owner=be.id)
    with pytest.raises(ModelUsageError, match="temporary"):
        enable_data_checksums(be, [tmp], streamed=False)


def test_cancel_aborts_without_leaking_pins() -> None:
    inst = Instance(Settings(io_method="worker"))
    rel = inst.create_relation("t", 300)
    res = run_scan("data_checksums", inst.backend(), rel, cancel_after=50)
    assert res.error_type == "QueryCanceled" and res.pinned_after == 0


@pytest.mark.slow
def test_thread_figures_full_size() -> None:
    spec = SHAPES["checksums-thread"]
    reads = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="sync", debug_io_direct="data"), record_reads=False)
        sr = build_relation(inst, spec)
        res = run_scan("data_checksums", inst.backend(), sr.heap, variant=variant, keep_blocks=False)
        reads[variant] = res.read_count
    assert reads == {"streamed": 59801 + 15 + 2, "unstreamed": 956815 + 238 + 30}
