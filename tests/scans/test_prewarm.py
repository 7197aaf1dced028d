"""pg_prewarm in its three modes (reference_impl/scans/prewarm.py).

Oracles: scans.md §8 (the streamed 'buffer' mode reads full io_combine_limit chunks from the first
I/O in context normal whatever the size, cut at 1 GiB segment boundaries; 'read' and 'prefetch'
count no reads and leave nothing resident) and the property every scan shares: both variants
prewarm the same blocks and the streamed one issues no more reads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import RELSEG_SIZE, Instance, ModelUsageError, Settings
from reference_impl.scans import run_scan

_FIXED_SETTINGS = {"io_method": "sync"}


def _instance(nblocks: int, cfg: dict, cached: list[int] | None = None, **kw: object) -> tuple:
    inst = Instance(Settings(**cfg), **kw)
    rel = inst.create_relation("t", nblocks)
    if cached:
        inst.prewarm(rel, cached)
    return inst, rel, inst.backend()


@st.composite
def _cases(draw: st.DrawFn) -> tuple:
    nblocks = draw(st.integers(1, 400))
    cfg = {
        "io_method": draw(st.sampled_from(["sync", "worker", "io_uring"])),
        "io_combine_limit": draw(st.sampled_from([1, 4, 16, 32])),
        "io_max_combine_limit": 32,
        "maintenance_io_concurrency": draw(st.sampled_from([0, 1, 16, 64])),
        "shared_buffers": draw(st.sampled_from([2048, 16384])),
    }
    frac = draw(st.sampled_from([0.0, 0.1, 0.5, 0.9]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    cached = sorted(int(b) for b in rng.choice(nblocks, size=round(frac * nblocks), replace=False))
    first = draw(st.integers(0, nblocks - 1))
    last = draw(st.integers(first, nblocks - 1))
    return nblocks, cfg, cached, first, last


@settings(max_examples=25, deadline=None)
@given(_cases())
def test_buffer_mode_variants_agree_and_streamed_reads_no_more(case: tuple) -> None:
    nblocks, cfg, cached, first, last = case
    out = {}
    for variant in ("streamed", "unstreamed"):
        inst, rel, be = _instance(nblocks, cfg, cached)
        res = run_scan("pg_prewarm", be, rel, variant=variant, first_block=first, last_block=last)
        assert res.error is None
        assert res.pinned_after == 0
        resident = inst.pool.resident_blocks(rel)
        out[variant] = (res, resident)
    s, u = out["streamed"][0], out["unstreamed"][0]
    assert (
        s.result
        == u.result
        == {"blocks": last - first + 1, "fork": "main", "first_block": first, "last_block": last}
    )
    assert s.blocks == u.blocks == list(range(first, last + 1))
    assert s.read_count <= u.read_count
    # Every block of the range ends up resident (no ring), and nothing outside it is read.
    assert set(range(first, last + 1)) <= out["streamed"][1]
    assert out["streamed"][1] == out["unstreamed"][1]
    missing = len(set(range(first, last + 1)) - set(cached))
    assert u.read_count == missing and u.read_blocks == missing
    assert s.read_blocks == missing
    assert set(s.io) <= {"normal"} and set(u.io) <= {"normal"}


def test_buffer_mode_cold_reads_full_chunks_from_the_first_io() -> None:
    # scans.md §8: 100 blocks, defaults, cold: [0-15] ... [80-95] [96-99] = 7 reads.
    for io_method in ("sync", "worker"):
        _inst, rel, be = _instance(100, {"io_method": io_method})
        res = run_scan("pg_prewarm", be, rel)
        assert res.read_sizes == [16] * 6 + [4]
        assert [r.start for r in res.reads] == list(range(0, 100, 16))
        assert res.io["normal"]["reads"] == 7


def test_buffer_mode_uses_no_ring_even_above_nbuffers_quarter() -> None:
    # 4200 blocks > NBuffers/4 = 4096 with the default pool: still context normal, all resident.
    inst, rel, be = _instance(4200, {"io_method": "worker"})
    res = run_scan("pg_prewarm", be, rel)
    assert set(res.io) == {"normal"}
    assert inst.pool.resident_blocks(rel) == set(range(4200))
    assert res.read_count == math.ceil(4200 / 16)


def test_buffer_mode_cuts_reads_at_a_segment_boundary() -> None:
    _inst, rel, be = _instance(RELSEG_SIZE + 40, {"io_method": "sync"}, record_reads=True)
    res = run_scan("pg_prewarm", be, rel, first_block=RELSEG_SIZE - 12, last_block=RELSEG_SIZE + 18)
    assert [(r.start, r.nblocks) for r in res.reads] == [
        (RELSEG_SIZE - 12, 12),
        (RELSEG_SIZE, 16),
        (RELSEG_SIZE + 16, 3),
    ]


def test_buffer_mode_range_fixed_at_start_and_empty_fork() -> None:
    _inst, rel, be = _instance(0, _FIXED_SETTINGS)
    for variant in ("streamed", "unstreamed"):
        res = run_scan("pg_prewarm", be, rel, variant=variant)
        assert res.result["blocks"] == 0 and res.read_count == 0
    with pytest.raises(ModelUsageError, match="starting block number must be between 0 and -1"):
        run_scan("pg_prewarm", be, rel, first_block=0)


def test_argument_checks_name_the_bad_value() -> None:
    _inst, rel, be = _instance(10, _FIXED_SETTINGS)
    with pytest.raises(ModelUsageError, match="last_block 10 is invalid"):
        run_scan("pg_prewarm", be, rel, last_block=10)
    with pytest.raises(ModelUsageError, match='fork "vm" does not exist'):
        run_scan("pg_prewarm", be, rel, fork="vm")
    with pytest.raises(ModelUsageError, match="allowed main, fsm, vm, init"):
        run_scan("pg_prewarm", be, rel, fork="toast")
    with pytest.raises(ModelUsageError, match="has no 'streamed' variant"):
        run_scan("pg_prewarm_read", be, rel, variant="streamed")


def test_other_forks_can_be_prewarmed() -> None:
    inst = Instance(Settings(io_method="sync"))
    rel = inst.create_relation("t", forks={0: 100, 1: 5, 2: 2})
    be = inst.backend()
    res = run_scan("pg_prewarm", be, rel, fork="fsm")
    assert res.result["blocks"] == 5
    assert res.reads is not None and {r.fork for r in res.reads} == {"fsm"}
    assert inst.pool.resident_blocks(rel) == set()


def test_read_mode_bypasses_shared_buffers() -> None:
    inst, rel, be = _instance(50, {"io_method": "worker"})
    before = inst.storage.physical_reads
    res = run_scan("pg_prewarm_read", be, rel, variant="unstreamed", first_block=5, last_block=24)
    assert res.result["blocks"] == 20
    assert res.read_count == 0 and res.hits == 0 and res.io == {}
    assert inst.pool.resident_blocks(rel) == set()
    assert inst.storage.physical_reads - before == 20
    assert res.elapsed_us > 0


def test_read_mode_reports_an_io_error() -> None:
    from reference_impl import Fault, FaultPlan

    plan = FaultPlan([Fault("eio", relation="t", block=7)])
    _inst, rel, be = _instance(20, {"io_method": "sync"}, faults=plan)
    res = run_scan("pg_prewarm_read", be, rel, variant="unstreamed")
    assert res.error_type == "ReadIOError"
    assert res.blocks == list(range(7))


@pytest.mark.parametrize("direct", [False, True])
def test_prefetch_mode_advises_only_uncached_blocks(direct: bool) -> None:
    cfg = {"io_method": "sync", "debug_io_direct": "data" if direct else ""}
    inst, rel, be = _instance(30, cfg, cached=[0, 1, 2])
    res = run_scan("pg_prewarm_prefetch", be, rel, variant="unstreamed")
    assert res.result["blocks"] == 30
    assert res.result["advised"] == (0 if direct else 27)
    assert res.read_count == 0
    assert inst.pool.resident_blocks(rel) == {0, 1, 2}
