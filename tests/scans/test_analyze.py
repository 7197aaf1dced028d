"""ANALYZE's block sampling (``reference_impl.scans.analyze``), scans.md §5 and sampling.md §7.

Oracles: the block sampler of ``reference_impl.sampling`` (verified against a server) for which
blocks; scans.md §5 for how they are read (VACUUM ring, context ``vacuum``; grouping by the
stream's rules; the all-blocks case is the sequential pattern; every VM page read afterwards
without strategy); rows recounted from the heap content; the unstreamed (PostgreSQL 16) variant.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, SettingError, Settings
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.sampling import analyze_sample_blocks
from reference_impl.scans import run_scan
from reference_impl.storage.relation import ForkNumber

SPECS = st.builds(
    RelationSpec,
    nblocks=st.integers(0, 1200),
    tuples_per_page=st.one_of(st.integers(0, 10), st.tuples(st.just("poisson"), st.floats(0, 8))),
    dead_fraction=st.sampled_from([0.0, 0.25]),
    all_visible_fraction=st.sampled_from([0.0, 0.5]),
    vacuumed=st.just(True),
    seed=st.integers(0, 2**32),
)
SETTINGS = st.builds(
    Settings,
    io_method=st.sampled_from(["sync", "worker", "io_uring"]),
    maintenance_io_concurrency=st.sampled_from([0, 1, 16, 64]),
    io_combine_limit=st.sampled_from([1, 4, 16]),
    shared_buffers=st.sampled_from([2048, 4096]),
    debug_io_direct=st.sampled_from(["", "data"]),
    vacuum_buffer_usage_limit=st.sampled_from([0, 256, 2048]),
)


def _run(spec, settings_, cached, variant, **params):
    inst = Instance(settings_)
    rel = build_relation(inst, spec)
    if cached:
        inst.prewarm(rel.heap, cached)
    return run_scan("analyze", inst.backend(), rel.heap, variant=variant, **params), rel


@settings(max_examples=20, deadline=None)
@given(spec=SPECS, settings_=SETTINGS, data=st.data())
def test_streamed_and_unstreamed_agree(spec, settings_, data) -> None:
    params = {
        "statistics_target": data.draw(st.sampled_from([1, 2, 5]), label="statistics_target"),
        "sampler_seed": data.draw(st.integers(0, 2**32 - 1), label="sampler_seed"),
        "reservoir_seed": data.draw(st.integers(0, 2**32 - 1), label="reservoir_seed"),
    }
    n = spec.nblocks
    cached = (
        sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n), label="cached")) if n else []
    )
    s, rel = _run(spec, settings_, cached, "streamed", **params)
    u, _ = _run(spec, settings_, cached, "unstreamed", **params)
    assert s.error is None and u.error is None
    assert s.result == u.result
    assert s.blocks == u.blocks
    assert s.read_count <= u.read_count
    assert s.pinned_after == u.pinned_after == 0
    expected = analyze_sample_blocks(n, 300 * params["statistics_target"], params["sampler_seed"]).tolist()
    assert s.blocks == expected
    pages = [rel.content.page(ForkNumber.MAIN, b) for b in expected]
    assert s.result["liverows"] == sum(p.nlive for p in pages)
    assert s.result["deadrows"] == sum(p.ndead for p in pages)
    assert s.result["numrows"] == min(s.result["liverows"], s.result["targrows"])
    assert s.result["vm_pages"] == rel.heap.nblocks(ForkNumber.VM)


def test_all_blocks_sample_reads_like_a_sequential_scan() -> None:
    spec = RelationSpec(nblocks=100, tuples_per_page=5)
    s, _ = _run(spec, Settings(io_method="sync"), [], "streamed")
    main = [r for r in s.reads if r.fork == "main"]
    vm = [r for r in s.reads if r.fork == "vm"]
    assert [(r.start, r.nblocks) for r in main] == [
        (0, 1), (1, 2), (3, 4), (7, 8), (15, 16), (31, 16), (47, 16), (63, 16), (79, 16), (95, 5)
    ]  # fmt: skip
    assert all(r.context == "vacuum" for r in main)
    # visibilitymap_count afterwards: the VM page, no strategy, after every heap page.
    assert [(r.start, r.nblocks, r.context) for r in vm] == [(0, 1, "normal")]
    assert s.reads[-1] == vm[0]
    u, _ = _run(spec, Settings(io_method="sync"), [], "unstreamed")
    assert [(r.start, r.nblocks) for r in u.reads if r.fork == "main"] == [(b, 1) for b in range(100)]


def test_sampled_runs_share_reads_and_gaps_split_them() -> None:
    spec = RelationSpec(nblocks=3000, tuples_per_page=2)
    s, _ = _run(spec, Settings(), [], "streamed", statistics_target=2, sampler_seed=11)
    sample = analyze_sample_blocks(3000, 600, 11).tolist()
    main = [r for r in s.reads if r.fork == "main"]
    assert main[0].nblocks == 1  # the distance starts at 1
    covered = [b for r in main for b in range(r.start, r.start + r.nblocks)]
    assert covered == sample
    assert len(main) < len(sample)


@pytest.mark.parametrize(
    ("limit_kb", "context", "ring"), [(0, "normal", None), (256, "vacuum", 32), (2048, "vacuum", 256)]
)
def test_ring_from_buffer_usage_limit(limit_kb, context, ring) -> None:
    spec = RelationSpec(nblocks=2000, tuples_per_page=1)
    s, _ = _run(spec, Settings(), [], "streamed", statistics_target=2, buffer_usage_limit_kb=limit_kb)
    assert s.io[context]["reads"] > 0
    if ring is not None:
        assert s.io["vacuum"]["reuses"] == 600 - ring
    with pytest.raises(SettingError, match="BUFFER_USAGE_LIMIT"):
        _run(spec, Settings(), [], "streamed", buffer_usage_limit_kb=64)


def test_never_vacuumed_table_reads_no_vm() -> None:
    spec = RelationSpec(nblocks=70_000, tuples_per_page=1, vacuumed=False)
    s, _ = _run(spec, Settings(), [], "streamed", statistics_target=1)
    assert not [r for r in s.reads if r.fork != "main"]
    big = RelationSpec(nblocks=70_000, tuples_per_page=1, all_visible_fraction=0.5, all_frozen_fraction=0.1)
    v, rel = _run(big, Settings(), [], "streamed", statistics_target=1)
    assert [(r.start, r.context) for r in v.reads if r.fork == "vm"] == [
        (0, "normal"),
        (1, "normal"),
        (2, "normal"),
    ]
    assert (v.result["relallvisible"], v.result["relallfrozen"]) == rel.content.vm_counts()


def test_estimates() -> None:
    spec = RelationSpec(nblocks=9000, tuples_per_page=10, dead_fraction=0.2, seed=3)
    s, _rel = _run(spec, Settings(), [], "streamed", statistics_target=1, sampler_seed=5)
    res = s.result
    assert res["sampled_blocks"] == 300
    assert res["totalrows"] == int(res["liverows"] / 300 * 9000 + 0.5)
    assert abs(res["totalrows"] - 72_000) < 3000
    assert res["numrows"] == 300
