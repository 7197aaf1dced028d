"""log_newpage_range and CREATE DATABASE ... STRATEGY WAL_LOG (reference_impl/scans/utility.py).

Oracles: scans.md §9 (log_newpage_range: ReadBufferExtended per block without a strategy, batches
of up to 32 logged pages, new pages not logged) and bufmgr.c's RelationCopyStorageUsingBuffer as
read in the PostgreSQL 18.4 source (FULL|USE_BATCHING stream with a BULKREAD ring over the source,
RBM_ZERO_AND_LOCK destination buffers from a BULKWRITE ring, per fork), with counts computed here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import ForkNumber, Instance, ModelUsageError, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan


# ---------------------------------------------------------------------------------- log_newpage_range
@st.composite
def _range_cases(draw: st.DrawFn) -> tuple:
    nblocks = draw(st.integers(0, 300))
    start = draw(st.integers(0, nblocks))
    end = draw(st.integers(start, nblocks))
    zero_from = draw(st.one_of(st.none(), st.integers(0, nblocks)))
    cfg = {
        "io_method": draw(st.sampled_from(["sync", "worker"])),
        "io_combine_limit": draw(st.sampled_from([2, 16])),
        "maintenance_io_concurrency": draw(st.sampled_from([0, 16])),
        # 2048 buffers: a pin limit of 11, below the 32 pins a batch holds.
        "shared_buffers": draw(st.sampled_from([2048, 16384])),
    }
    cached = draw(st.sampled_from([0.0, 0.5]))
    return nblocks, start, end, zero_from, cfg, cached, draw(st.integers(0, 1000))


@settings(max_examples=20, deadline=None)
@given(_range_cases())
def test_log_newpage_range_variants_agree(case: tuple) -> None:
    nblocks, start, end, zero_from, cfg, cached, seed = case
    out = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(**cfg))
        rel = inst.create_relation("t", nblocks)
        if cached and nblocks:
            rng = np.random.default_rng(seed)
            inst.prewarm(
                rel, sorted(int(b) for b in rng.choice(nblocks, size=round(cached * nblocks), replace=False))
            )
        res = run_scan(
            "log_newpage_range",
            inst.backend(),
            rel,
            variant=variant,
            start_block=start,
            end_block=end,
            zero_from=zero_from,
        )
        assert res.error is None and res.pinned_after == 0
        out[variant] = (res, inst, rel)
    s, u = out["streamed"][0], out["unstreamed"][0]
    assert s.result == u.result and s.blocks == u.blocks == list(range(start, end))
    assert s.read_count <= u.read_count
    logged = sum(1 for b in range(start, end) if zero_from is None or b < zero_from)
    assert u.result["pages_logged"] == logged
    assert u.result["new_pages"] == (end - start) - logged
    assert u.result["wal_records"] == math.ceil(logged / 32)
    assert set(u.io) <= {"normal"} and u.read_count == u.read_blocks
    inst, rel = out["streamed"][1], out["streamed"][2]
    assert set(range(start, end)) <= inst.pool.resident_blocks(rel)


def test_log_newpage_range_cold_counts() -> None:
    for variant, reads in (("unstreamed", 100), ("streamed", math.ceil(100 / 16))):
        inst = Instance(Settings(io_method="sync"))
        rel = inst.create_relation("t", 100)
        res = run_scan("log_newpage_range", inst.backend(), rel, variant=variant)
        assert res.read_count == reads
        assert res.result == {"pages_logged": 100, "wal_records": 4, "new_pages": 0, "fork": "main"}


def test_log_newpage_range_other_fork_and_bad_ranges() -> None:
    inst = Instance()
    rel = inst.create_relation("t", forks={ForkNumber.MAIN: 10, ForkNumber.INIT: 1})
    res = run_scan("log_newpage_range", inst.backend(), rel, fork="init")
    assert res.result["pages_logged"] == 1
    with pytest.raises(ModelUsageError, match=r"range \[5, 11\) is invalid"):
        run_scan("log_newpage_range", inst.backend(), rel, start_block=5, end_block=11)
    with pytest.raises(ModelUsageError, match="does not exist"):
        run_scan("log_newpage_range", inst.backend(), rel, fork="vm")


# ---------------------------------------------------------------------------------- CREATE DATABASE
@st.composite
def _copy_cases(draw: st.DrawFn) -> tuple:
    spec = RelationSpec(
        nblocks=draw(st.integers(0, 250)),
        vacuumed=draw(st.booleans()),
        unlogged=draw(st.booleans()),
        indexes=draw(st.sampled_from([(), (IndexSpec("btree"),), (IndexSpec("hash"),)])),
        seed=draw(st.integers(0, 100)),
        payload=False,
    )
    cfg = {
        "io_method": draw(st.sampled_from(["sync", "worker"])),
        "io_combine_limit": draw(st.sampled_from([4, 16])),
        "effective_io_concurrency": draw(st.sampled_from([0, 16])),
    }
    return spec, cfg, draw(st.sampled_from([0.0, 0.5])), draw(st.integers(0, 1000))


@settings(max_examples=15, deadline=None)
@given(_copy_cases())
def test_createdb_wal_log_variants_agree(case: tuple) -> None:
    spec, cfg, cached, seed = case
    out = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(**cfg))
        sr = build_relation(inst, spec)
        srcs = [sr.heap, *sr.indexes.values()]
        if cached:
            rng = np.random.default_rng(seed)
            for r in srcs:
                n = r.nblocks()
                if n:
                    inst.prewarm(
                        r, sorted(int(b) for b in rng.choice(n, size=round(cached * n), replace=False))
                    )
        others = ",".join(r.name for r in srcs[1:])
        res = run_scan(
            "createdb_wal_log", inst.backend(), sr.heap, variant=variant, others=others, dest="db2"
        )
        assert res.error is None and res.pinned_after == 0
        out[variant] = (res, inst, srcs)
    s, u = out["streamed"][0], out["unstreamed"][0]
    assert s.result == u.result and s.blocks == u.blocks
    assert s.read_count <= u.read_count
    inst, srcs = out["unstreamed"][1], out["unstreamed"][2]
    total = sum(r.nblocks(f) for r in srcs for f in r.forks())
    assert u.result["pages_copied"] == total and u.result["forks_mismatched"] == 0
    logged = sum(
        r.nblocks(f) for r in srcs for f in r.forks() if r.persistence == "p" or f == ForkNumber.INIT
    )
    assert u.result["pages_wal_logged"] == logged
    for src in srcs:
        dst = inst.storage.relation(f"db2/{src.name}")
        assert dst.forks() == src.forks() and dst.persistence == src.persistence
        assert all(dst.nblocks(f) == src.nblocks(f) for f in src.forks())
    # The source is read through BULKREAD rings; destination pages are never read.
    assert set(u.io) <= {"bulkread", "bulkwrite"}
    assert all(r.relation in {x.name for x in srcs} for r in (u.reads or []))
    assert s.read_blocks == u.read_blocks == u.read_count


def test_createdb_wal_log_cold_counts_and_bulkwrite_ring() -> None:
    res = {}
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="worker"))
        rel = inst.create_relation("t", forks={ForkNumber.MAIN: 3000, ForkNumber.FSM: 3, ForkNumber.VM: 1})
        res[variant] = run_scan("createdb_wal_log", inst.backend(), rel, variant=variant)
    u, s = res["unstreamed"], res["streamed"]
    assert u.read_count == 3004
    assert s.read_count == math.ceil(3000 / 16) + 1 + 1
    # A 16 MB BULKWRITE ring holds 2048 buffers: past that, dirty copies are written to make room.
    assert s.io["bulkwrite"]["writes"] == u.io["bulkwrite"]["writes"] == 3000 - 2048
    assert s.io["bulkread"]["reads"] == s.read_count


def test_createdb_wal_log_from_a_fresh_template1() -> None:
    for variant in ("streamed", "unstreamed"):
        inst = Instance(Settings(io_method="sync"))
        rel = inst.create_relation("t", 0)
        res = run_scan("createdb_wal_log", inst.backend(), rel, variant=variant, cluster=True)
        assert res.result["relations"] == 225  # template1's 224 local catalogs and t
        assert res.result["pg_class_blocks_scanned"] == 14
        assert res.result["pages_copied"] == 908
        reads = res.reads or []
        pg_class_reads = [r for r in reads if r.relation == "template1/pg_class"]
        # ScanSourceDatabasePgClass: one block per read (both versions), then the copy.
        assert [r.nblocks for r in pg_class_reads[:14]] == [1] * 14
        assert inst.storage.relation("newdb1/template1/pg_class").nblocks() == 14


def test_createdb_wal_log_refuses_an_existing_destination() -> None:
    inst = Instance()
    rel = inst.create_relation("t", 3)
    run_scan("createdb_wal_log", inst.backend(), rel, dest="x")
    with pytest.raises(ModelUsageError, match="already exists"):
        run_scan("createdb_wal_log", inst.backend(), rel, dest="x")
    second = run_scan("createdb_wal_log", inst.backend(), rel)
    assert second.error is None and inst.storage.relation("newdb1/t").nblocks() == 3
