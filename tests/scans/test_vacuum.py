"""VACUUM (``reference_impl.scans.vacuum``): streamed and unstreamed agree; the spec's read rules hold.

The property test runs VACUUM on random synthetic tables (indexes of every kind, dead tuples,
visibility-map layouts, never-vacuumed tables), random settings and random cache states, twice on
identical instances: PostgreSQL 18's streamed VACUUM and the one-block-at-a-time one must return
the same answer and consume the same pages, and the streamed one must not issue more reads.

The exact tests take their expectations from ``scans.md`` §3 and §6 (skipping threshold, last
block, aggressive and DISABLE_PAGE_SKIPPING, VM and FSM page reads and their positions, the
phase I ramp, phase III re-reads through the shared ring, bypass, truncation, eager scanning).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream import strategies as rs
from reference_impl import Instance, ModelUsageError, Settings
from reference_impl.relations import SHAPES, IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.vacuum import SKIP_PAGES_THRESHOLD
from reference_impl.storage.relation import ForkNumber

MAIN, FSM, VM = ForkNumber.MAIN, ForkNumber.FSM, ForkNumber.VM


def _vacuum(spec: RelationSpec, variant: str, cfg: Settings | None = None, warm: Any = None, **params: Any):
    inst = Instance(cfg if cfg is not None else Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, spec)
    if warm is not None:
        warm(inst, srel)
    be = inst.backend()
    res = run_scan("vacuum", be, srel.heap, variant=variant, **params)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return inst, srel, res


def _heap_reads(res: Any, fork: str = "main") -> list[tuple[int, int]]:
    return [(r.start, r.nblocks) for r in res.reads if r.relation == "t" and r.fork == fork]


# ------------------------------------------------------------------------------------ property
@st.composite
def _vacuum_cases(draw: Any) -> tuple[RelationSpec, Settings, dict[str, Any], int, float]:
    kinds = draw(st.lists(st.sampled_from(("btree", "hash", "gist")), unique=True, max_size=3))
    indexes = []
    for kind in kinds:
        if kind == "hash":
            indexes.append(
                IndexSpec(
                    "hash",
                    overflow=draw(st.sampled_from((0, 1, ("uniform", 0, 2)))),
                    overflow_layout=draw(st.sampled_from(("grouped", "interleaved"))),
                )
            )
        elif kind == "btree":
            indexes.append(IndexSpec("btree", correlation=draw(st.sampled_from((1.0, 0.5, 0.0)))))
        else:
            indexes.append(IndexSpec("gist", correlation=draw(st.sampled_from((1.0, 0.2)))))
    vacuumed = draw(st.booleans())
    avf = draw(st.sampled_from((0.0, 0.3, 0.7, 0.95, 1.0))) if vacuumed else 0.0
    spec = RelationSpec(
        name="t",
        nblocks=draw(st.integers(1, 140)),
        tuples_per_page=draw(st.sampled_from((None, 10, ("uniform", 0, 40)))),
        dead_fraction=draw(st.sampled_from((0.0, 0.02, 0.2, 1.0))),
        all_visible_fraction=avf,
        all_frozen_fraction=avf * draw(st.sampled_from((0.0, 0.5, 1.0))),
        vm_pattern=draw(st.sampled_from(("random", "prefix", "runs"))),
        vm_run_blocks=draw(st.sampled_from((8, 40))),
        vacuumed=vacuumed,
        hinted_fraction=draw(st.sampled_from((0.0, 1.0))),
        indexes=tuple(indexes),
        seed=draw(st.integers(0, 2**31)),
    )
    cfg = draw(rs.settings(io_methods=("sync", "worker"), max_shared_buffers=4096))
    cfg = cfg.replace(shared_buffers=max(cfg.shared_buffers, 2048))
    params = {
        "freeze": draw(st.booleans()),
        "disable_page_skipping": draw(st.booleans()),
        "index_cleanup": draw(st.sampled_from(("auto", "on", "off"))),
        "truncate": draw(st.booleans()),
        "buffer_usage_limit": draw(st.sampled_from((None, 0, 128, 256))),
        "dead_items_max": draw(st.sampled_from((None, None, 300))),
        "hash_stream": draw(st.booleans()),
        "hash_metapage_cached": draw(st.booleans()),
    }
    return spec, cfg, params, draw(st.integers(0, 2**31)), draw(st.sampled_from((0.0, 0.3, 0.9)))


def _warm(seed: int, fraction: float) -> Any:
    """A random cache state: that fraction of every fork of every relation made resident."""

    def warm(inst: Instance, srel: Any) -> None:
        rng = random.Random(seed)
        for rel in (srel.heap, *srel.indexes.values()):
            for fork in rel.forks():
                blocks = [b for b in range(rel.nblocks(fork)) if rng.random() < fraction]
                inst.prewarm(rel, blocks, fork)

    return warm


@settings(max_examples=12)
@given(case=_vacuum_cases())
def test_streamed_and_unstreamed_vacuum_agree(case: Any) -> None:
    spec, cfg, params, seed, fraction = case
    _, _, plain = _vacuum(spec, "unstreamed", cfg, _warm(seed, fraction), **params)
    _, _, stream = _vacuum(spec, "streamed", cfg, _warm(seed, fraction), **params)
    assert stream.result == plain.result
    assert stream.blocks == plain.blocks
    assert stream.read_count <= plain.read_count


# ------------------------------------------------------------------------------------ skipping
def _prefix(nblocks: int, visible: int, frozen: int = 0, **fields: Any) -> RelationSpec:
    return RelationSpec(
        name="t",
        nblocks=nblocks,
        all_visible_fraction=visible / nblocks,
        all_frozen_fraction=frozen / nblocks,
        vm_pattern="prefix",
        seed=5,
        **fields,
    )


@pytest.mark.parametrize(
    ("visible", "scanned"), [(SKIP_PAGES_THRESHOLD - 1, 100), (SKIP_PAGES_THRESHOLD, 68)]
)
def test_skip_pages_threshold(visible: int, scanned: int) -> None:
    # A run of skippable blocks is jumped over only when it is at least 32 blocks long.
    _, _, res = _vacuum(_prefix(100, visible), "streamed")
    assert res.result["scanned_pages"] == scanned
    first = _heap_reads(res)[0][0]
    assert first == (0 if scanned == 100 else visible)
    assert res.result["skipped_all_visible"] is (scanned < 100)


def test_last_block_is_always_read() -> None:
    _, _, res = _vacuum(_prefix(100, 100, 100), "streamed")
    assert res.result["scanned_pages"] == 1
    assert _heap_reads(res) == [(99, 1)]


@pytest.mark.parametrize(
    ("frozen", "params", "scanned"),
    [
        (0, {"freeze": True}, 100),  # aggressive: all-visible but not frozen is unskippable
        (100, {"freeze": True}, 1),  # all-frozen stays skippable
        (100, {"disable_page_skipping": True}, 100),  # nothing is skippable
    ],
)
def test_aggressive_and_disable_page_skipping(frozen: int, params: dict[str, Any], scanned: int) -> None:
    _, _, res = _vacuum(_prefix(100, 100, frozen), "streamed", **params)
    assert res.result["scanned_pages"] == scanned


# ------------------------------------------------------------------------------------ map pages
def test_vm_page_read_first_and_per_32672_blocks() -> None:
    # 40,000 all-frozen blocks: only the last is read, after both VM pages (one normal read each).
    _, _, res = _vacuum(_prefix(40_000, 40_000, 40_000), "streamed")
    reads = [(r.fork, r.start, r.context) for r in res.reads]
    assert reads[0] == ("vm", 0, "normal")
    assert [s for f, s, _ in reads if f == "vm"] == [0, 1]
    assert _heap_reads(res) == [(39_999, 1)]
    assert reads.index(("vm", 1, "normal")) < reads.index(("main", 39_999, "vacuum"))
    # FSM: the last block's leaf (logical 9, block 11), then FreeSpaceMapVacuumRange walks the
    # root, the level-1 page and leaves 0..9 (blocks 2..11), stopping at the end of the fork.
    fsm = [s for f, s, _ in reads if f == "fsm"]
    assert fsm == [11, 0, 1, *range(2, 11)]


def test_never_vacuumed_table_creates_the_vm_without_reading_it() -> None:
    spec = RelationSpec(name="t", nblocks=50, vacuumed=False, seed=2)
    _, srel, res = _vacuum(spec, "streamed")
    assert res.result["scanned_pages"] == 50
    assert not _heap_reads(res, "vm")
    assert res.io["normal"]["extends"] >= 1
    assert srel.heap.nblocks(VM) == 1 and srel.heap.nblocks(FSM) == 3


def test_creating_the_vm_is_no_block_read_of_the_relation() -> None:
    # pg_statio blocks read of a first VACUUM of a fresh 10,005-page table on 18.6: the heap's
    # 10,005 blocks and the FSM's 5; vm_extend (ExtendBufferedRelTo) adds an extension only.
    spec = RelationSpec(
        name="t", nblocks=10_005, tuples_per_page=3, tuple_width=2000, vacuumed=False, seed=43
    )
    inst = Instance(Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, spec)
    be = inst.backend()
    res = run_scan("vacuum", be, srel.heap)
    assert res.error is None and res.pinned_after == 0
    fsm_reads = sum(r.nblocks for r in res.reads if r.fork == "fsm")
    assert fsm_reads == 5 and not _heap_reads(res, "vm")
    assert be.stats.relation("t").blks_read == 10_005 + fsm_reads == res.read_blocks
    assert res.io["normal"]["extends"] == 1 and srel.heap.nblocks(VM) == 1


def test_extend_buffered_rel_to_counts_an_extension_not_a_read() -> None:
    inst = Instance(Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, RelationSpec(name="t", nblocks=10, vacuumed=False, seed=1))
    be = inst.backend()
    buf = be.extend_buffered_rel_to(srel.heap, VM, 2)
    assert srel.heap.nblocks(VM) == 2 and be.buffer_block(buf) == 1
    assert be.stats.relation("t").blks_fetched == 0 and be.stats.reads == 0
    assert be.stats.io["normal"].extends == 2
    be.release_buffer(buf)
    # Already long enough (another backend extended it): the page is read, and counted.
    buf = be.extend_buffered_rel_to(srel.heap, VM, 1)
    assert be.stats.relation("t").blks_read == 1 and be.stats.reads == 1
    be.release_buffer(buf)
    with pytest.raises(ModelUsageError, match="extend_to = 0 is invalid"):
        be.extend_buffered_rel_to(srel.heap, VM, 0)


@pytest.mark.parametrize("io_method", ["sync", "worker"])
def test_phase1_ramps_up_like_a_sequential_scan(io_method: str) -> None:
    spec = RelationSpec(name="t", nblocks=100, seed=1)
    _, _, res = _vacuum(spec, "streamed", Settings(io_method=io_method))
    assert [n for _, n in _heap_reads(res)] == [1, 2, 4, 8, 16, 16, 16, 16, 16, 5]
    order = [(r.fork, r.start) for r in res.reads]
    # VM page 0 before the first heap read; the FSM leaf after the first heap page processed.
    assert order[0] == ("vm", 0)
    if io_method == "sync":
        assert order[1:3] == [("main", 0), ("fsm", 2)]


# ------------------------------------------------------------------------------------ phases II/III
def test_phase3_rereads_every_dead_page_through_the_shared_ring() -> None:
    # 400 pages with dead tuples, a btree: the 256-buffer ring has moved on by phase III.
    spec = RelationSpec(name="t", nblocks=400, dead_fraction=0.1, indexes=(IndexSpec("btree"),), seed=3)
    _, _, res = _vacuum(spec, "streamed")
    assert res.result["lpdead_item_pages"] == 400 and res.result["phase3_pages"] == 400
    heap_blocks = sum(n for _, n in _heap_reads(res))
    assert heap_blocks == 800  # every page read in phase I and again in phase III
    assert res.result["num_index_scans"] == 1


def test_small_table_phase3_hits_the_ring() -> None:
    spec = RelationSpec(name="t", nblocks=100, dead_fraction=0.1, indexes=(IndexSpec("btree"),), seed=3)
    _, _, res = _vacuum(spec, "streamed")
    assert sum(n for _, n in _heap_reads(res)) == 100  # phase III pages are still in the ring


def test_bypass_below_two_percent_of_pages() -> None:
    # Only the last page is scanned (and has dead tuples): 1 % of the pages, so no index vacuuming.
    spec = _prefix(100, 99, 99, dead_fraction=0.5, indexes=(IndexSpec("btree"),))
    _, _, res = _vacuum(spec, "streamed")
    assert res.result["lpdead_item_pages"] == 1
    assert res.result["index_vacuum_bypassed"] is True and res.result["num_index_scans"] == 0
    index_reads = [(r.start, r.context) for r in res.reads if r.relation == "t_btree"]
    assert index_reads == [(0, "normal")]  # btvacuumcleanup's metapage, without strategy


def test_index_cleanup_on_forces_index_vacuuming() -> None:
    spec = _prefix(100, 99, 99, dead_fraction=0.5, indexes=(IndexSpec("btree"),))
    _, _, res = _vacuum(spec, "streamed", index_cleanup="on")
    assert res.result["num_index_scans"] == 1 and res.result["phase3_pages"] == 1


def test_dead_items_overflow_runs_several_rounds() -> None:
    spec = RelationSpec(name="t", nblocks=60, dead_fraction=0.2, indexes=(IndexSpec("hash"),), seed=9)
    _, _, one = _vacuum(spec, "streamed")
    _, _, many = _vacuum(spec, "streamed", dead_items_max=200)
    assert one.result["num_index_scans"] == 1
    assert many.result["num_index_scans"] > 1
    assert many.result["tuples_deleted"] == one.result["tuples_deleted"]
    assert many.result["indexes"]["t_hash"]["tuples_removed"] == one.result["lpdead_items"]


# ------------------------------------------------------------------------------------ truncation
def test_truncation_reads_backwards_and_shrinks_the_table() -> None:
    # 100 frozen pages with rows, then 100 pages whose rows are all dead (no index: one pass).
    spec = _prefix(200, 100, 100, dead_fraction=1.0)
    inst, srel, res = _vacuum(spec, "streamed")
    assert res.result["nonempty_pages"] == 0
    assert res.result["removed_pages"] == 100 and srel.heap.nblocks(MAIN) == 100
    trunc = [b for b, _ in _heap_reads(res)][-1:]
    # Pages 199..100 are still in the ring (hits); 99 was skipped in phase I and is read now.
    assert trunc == [99]
    assert res.result["pages_by_phase"]["truncate"] == 101
    assert all(inst.pool.mapping.get(srel.heap.tag(MAIN, b)) is None for b in range(100, 200))
    # Prefetch advice for the 32-block window of block 99 (blocks 96..99 were not in the pool).
    assert inst.storage.prefetch_calls == 4


def test_truncate_off_keeps_the_table() -> None:
    _, srel, res = _vacuum(_prefix(200, 100, 100, dead_fraction=1.0), "streamed", truncate=False)
    assert res.result["removed_pages"] == 0 and srel.heap.nblocks(MAIN) == 200


# ------------------------------------------------------------------------------------ eager scanning
def test_eager_scanning_stops_at_the_success_cap() -> None:
    # 9,000 all-visible, unfrozen pages: the cap is 20 % of them; every eager page freezes.
    spec = _prefix(9000, 9000)
    _, _, plain = _vacuum(spec, "unstreamed", eager_first_region_end=100)
    _, _, stream = _vacuum(spec, "streamed", eager_first_region_end=100)
    cap = 1800
    assert plain.result["eager_scanned_pages"] == cap
    assert plain.result["scanned_pages"] == cap + 1  # plus the last block
    # The stream's look-ahead had already returned more blocks when the cap was hit.
    extra = stream.result["scanned_pages"] - (cap + 1)
    assert 0 < extra <= 128
    assert stream.result["eager_scanned_pages"] == cap + extra
    # The success cap needs visibilitymap_count: the VM page is read before phase I.
    assert plain.reads[0].fork == "vm"


def test_aggressive_vacuum_does_not_eager_scan() -> None:
    _, _, res = _vacuum(_prefix(9000, 9000), "streamed", eager_first_region_end=100, freeze=True)
    assert res.result["eager_scanned_pages"] == 0 and res.result["scanned_pages"] == 9000


# ------------------------------------------------------------------------------------ the thread
def _hash_thread_spec() -> RelationSpec:
    """The streamify thread's ``hash_vacuum`` table with the index layout inferred in
    ``docs/scans/maintenance.md``: 3,258 buckets grown by splits, one overflow page on each of
    the 838 buckets not yet split in the current doubling (1210..2047)."""
    spec = SHAPES["hash-vacuum-thread"]
    (index,) = spec.indexes
    assert index.buckets == 3258 and sum(index.overflow) == 838
    return spec.replace(name="t", indexes=(dataclasses.replace(index, name="t_hash"),))


def test_hash_vacuum_thread_read_counts() -> None:
    spec = _hash_thread_spec()
    _, _, base = _vacuum(spec, "streamed", Settings())
    _, _, patch = _vacuum(spec, "streamed", Settings(), hash_stream=True)
    assert base.result == patch.result
    assert base.read_count == 4663  # the thread: 4,662 / 4,665
    assert patch.read_count == 1612  # the thread: 1,612 / 1,615
    writes = [sum(c["writes"] for c in r.io.values()) for r in (base, patch)]
    assert writes == [12690, 12690]  # the thread: 12,689 -> 12,651 (see the docs)


def test_answers_agree_with_a_tiny_pool_and_many_rounds() -> None:
    # One round of index and heap vacuuming per heap page, in a 96-buffer pool with a 12-buffer
    # ring: the answer and the pages are the same, although the reads are not (the stream's
    # look-ahead pins and escaped pages change what the clock sweep evicts; see the docs).
    spec = RelationSpec(
        name="t",
        nblocks=40,
        dead_fraction=1.0,
        vacuumed=False,
        indexes=(IndexSpec("hash", overflow=1, overflow_layout="interleaved"), IndexSpec("btree")),
        seed=13349,
    )
    cfg = Settings(shared_buffers=96, io_method="worker", maintenance_io_concurrency=3)
    params = {"index_cleanup": "on", "buffer_usage_limit": 256, "dead_items_max": 50, "truncate": False}
    _, _, plain = _vacuum(spec, "unstreamed", cfg, _warm(151, 0.9), **params)
    _, _, stream = _vacuum(spec, "streamed", cfg, _warm(151, 0.9), **params)
    assert plain.result["num_index_scans"] == 40
    assert stream.result == plain.result and stream.blocks == plain.blocks
