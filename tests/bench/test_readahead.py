"""Heuristic read-ahead (``reference_impl.readahead``): what it reads, what it counts, what it spares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_impl import Instance, ModelUsageError, SettingError, Settings
from reference_impl.readahead import HeuristicReadahead, readahead_detectors
from reference_impl.scans import run_scan


def _inst(**changes: object) -> Instance:
    base = {"io_method": "worker", "debug_io_direct": "data", "synchronize_seqscans": False}
    base.update(changes)
    return Instance(Settings.from_mapping(base), device="nvme", record_reads=False)


def _read(be, rel, blocks, strategy=None) -> None:
    for b in blocks:
        be.release_buffer(be.read_buffer(rel, int(b), strategy=strategy))


@pytest.mark.parametrize("method", ["worker", "io_uring"])
def test_sequential_unstreamed_scan_is_read_ahead(method: str) -> None:
    results = {}
    for ra_on in (False, True):
        inst = _inst(io_method=method)
        rel = inst.create_relation("t", 3000)
        be = inst.backend()
        ra = HeuristicReadahead().install(be) if ra_on else None
        res = run_scan("seqscan", be, rel, variant="unstreamed", keep_blocks=False)
        be.check_for_buffer_leaks()
        results[ra_on] = (res, ra.finish() if ra else None)
    (off, _), (on, stats) = results[False], results[True]
    assert on.result == off.result
    assert on.read_count * 4 < off.read_count
    assert on.elapsed_us * 3 < off.elapsed_us
    assert stats.used_blocks == stats.speculative_blocks
    assert stats.wasted_blocks == 0 and stats.unused_resident_blocks == 0
    assert stats.reads_saved == off.read_count - on.read_count
    assert stats.time_saved_us > 0


def test_pattern_survives_statements() -> None:
    """Slices read by successive statements: an instance-wide detector beats one per statement."""

    def run(reset: bool) -> int:
        inst = _inst()
        rel = inst.create_relation("t", 1024)
        be = inst.backend()
        HeuristicReadahead().install(be)
        for start in range(0, 1024, 32):
            if reset:
                readahead_detectors(inst).clear()
            run_scan("tidrangescan", be, rel, variant="unstreamed", start_block=start, end_block=start + 31)
        return be.stats.reads

    assert run(reset=False) < run(reset=True) < 1024


@pytest.mark.parametrize(("scope", "detectors"), [("backend", 2), ("shared", 1)])
def test_scope_keys_the_detector_table(scope: str, detectors: int) -> None:
    inst = _inst()
    rel = inst.create_relation("t", 200)
    ra = HeuristicReadahead(scope=scope)
    a, b = inst.backend(), inst.backend()
    ra.install(a)
    ra.install(b)
    for blk in range(0, 40, 2):
        _read(a, rel, [blk])
        _read(b, rel, [blk + 1])
    assert len(readahead_detectors(inst)) == detectors


def test_stride_taken_modulo_the_relation_size() -> None:
    """SYSTEM_ROWS-like order first + k·step (mod n): one pattern, predictions wrap around."""
    n, step, first = 10_007, 3_001, 17
    inst = _inst()
    rel = inst.create_relation("t", n)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    blocks = [(first + k * step) % n for k in range(2000)]
    _read(be, rel, blocks)
    stats = ra.finish()
    assert stats.mispredictions == 0
    assert stats.used_blocks > 0.95 * len(blocks)
    assert be.stats.reads < len(blocks) + 16


def test_backward_scan_is_read_ahead() -> None:
    inst = _inst()
    rel = inst.create_relation("t", 2000)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, range(1999, -1, -1))
    stats = ra.finish()
    assert stats.used_blocks > 1900
    assert be.stats.reads < 300


def test_random_access_does_not_trigger() -> None:
    inst = _inst()
    rel = inst.create_relation("t", 1_000_000)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, np.random.default_rng(5).integers(0, 1_000_000, size=3000))
    stats = ra.finish()
    assert stats.triggers == 0 and stats.speculative_ios == 0


def test_short_runs_waste_and_evict() -> None:
    """4-page runs look sequential after 3 pages: the guesses past each run are wasted."""
    inst = _inst(shared_buffers=256)
    rel = inst.create_relation("t", 100_000)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    rng = np.random.default_rng(3)
    for start in rng.integers(0, 99_000, size=400):
        _read(be, rel, range(int(start), int(start) + 4))
    stats = ra.finish()
    assert stats.wasted_blocks + stats.unused_resident_blocks > 2 * stats.used_blocks
    assert stats.evicted_by_readahead > 0
    assert be.stats.shared_blks_read > 1.5 * 1600  # blocks read, not I/Os: those stay level


def test_ring_strategy_keeps_prefetched_pages() -> None:
    inst = _inst()
    rel = inst.create_relation("t", 5000)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, range(5000), strategy=inst.strategy("bulkread"))
    stats = ra.finish()
    assert stats.wasted_blocks == 0
    assert stats.used_blocks >= 4990


def test_sync_direct_io_cannot_read_ahead_and_buffered_gives_advice() -> None:
    inst = _inst(io_method="sync")
    rel = inst.create_relation("t", 500)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, range(500))
    assert ra.finish().unavailable > 0 and ra.stats.speculative_ios == 0
    inst = _inst(io_method="sync", debug_io_direct="")
    rel = inst.create_relation("t", 500)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, range(500))
    stats = ra.finish()
    assert stats.advice_calls > 0 and stats.advised_used > 400
    assert be.stats.reads == 500  # advice saves no read, only waiting


def test_effective_io_concurrency_zero_turns_it_off() -> None:
    inst = _inst(effective_io_concurrency=0)
    rel = inst.create_relation("t", 500)
    be = inst.backend()
    ra = HeuristicReadahead().install(be)
    _read(be, rel, range(500))
    assert ra.finish().speculative_ios == 0 and be.stats.reads == 500


def test_streamed_scans_never_reach_the_hook() -> None:
    out = []
    for ra_on in (False, True):
        inst = _inst()
        rel = inst.create_relation("t", 3000)
        be = inst.backend()
        ra = HeuristicReadahead().install(be) if ra_on else None
        res = run_scan("seqscan", be, rel, variant="streamed", keep_blocks=False)
        out.append((res.read_count, res.elapsed_us, ra.stats.accesses if ra else 0))
    assert out[0] == out[1]


def test_bad_parameters_are_named() -> None:
    with pytest.raises(SettingError, match=r"confirm = 0 .*1\.\.16"):
        HeuristicReadahead(confirm=0)
    with pytest.raises(SettingError, match="scope = 'everyone'"):
        HeuristicReadahead(scope="everyone")
    with pytest.raises(SettingError, match="max_window = 2 is below initial_window = 4"):
        HeuristicReadahead(max_window=2)
    ra = HeuristicReadahead()
    ra.install(_inst().backend())
    with pytest.raises(ModelUsageError, match="one instance"):
        ra.install(_inst().backend())


_segments = st.lists(
    st.tuples(st.integers(0, 4999), st.integers(1, 40), st.sampled_from([1, 1, 2, 3, -1, 7])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segments=_segments,
    method=st.sampled_from(["worker", "io_uring"]),
    pool=st.sampled_from([64, 256, 4096]),
    confirm=st.integers(1, 3),
)
def test_read_ahead_changes_no_page_and_accounts_for_every_block(segments, method, pool, confirm) -> None:
    """Whatever the pattern: the same pages come back, no pin is left, every guess is accounted."""
    pages: dict[bool, list[int]] = {}
    for ra_on in (False, True):
        inst = _inst(io_method=method, shared_buffers=pool)
        rel = inst.create_relation("t", 5000)
        be = inst.backend()
        ra = HeuristicReadahead(confirm=confirm).install(be) if ra_on else None
        seen = []
        for start, length, stride in segments:
            for k in range(length):
                blk = start + k * stride
                if 0 <= blk < 5000:
                    buf = be.read_buffer(rel, blk)
                    seen.append(be.buffer_block(buf))
                    be.release_buffer(buf)
        be.check_for_buffer_leaks()
        pages[ra_on] = seen
        if ra is not None:
            stats = ra.finish()
            assert stats.speculative_blocks == (
                stats.used_blocks + stats.wasted_blocks + stats.unused_resident_blocks
            )
            assert stats.evicted_by_readahead + stats.ring_reuses_by_readahead <= stats.speculative_blocks
    assert pages[True] == pages[False]
