"""On-access pruning of PostgreSQL 19 and later (``heap_page_prune_opt``, ``reference_impl.scans._prune``).

Measured on a master (20devel) server with the oracle's tables (not all-visible, hinted, no dead
tuples): every read-only scan reads the VM page (one ``normal`` read more than 18.6), and a
sequential scan through a BULKREAD ring keeps all 5,000 blocks of its table resident (18.6: the
ring's last 48), because clearing each page's prune hint dirties it (a WAL-logged hint with data
checksums) and the ring refuses such buffers. Each test fails on the model before on-access pruning was modelled.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import ForkNumber, Instance, Settings
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan

NEWER = ("19", "20devel")


def _run(version: str, spec: RelationSpec, scan: str = "seqscan", **params: Any) -> tuple[Instance, Any, Any]:
    inst = Instance(Settings(version=version, io_method="sync"), device="nvme", seed=1)
    srel = build_relation(inst, spec)
    target = srel.heap
    if scan in ("pgstatindex",):
        target = next(iter(srel.indexes.values()))
    res = run_scan(scan, inst.backend(), target, **params)
    return inst, srel.heap, res


def _vm_reads(res: Any) -> int:
    return sum(1 for r in res.reads if r.fork == "vm")


_HINTED = RelationSpec(name="h", nblocks=300, tuples_per_page=3, tuple_width=2000, seed=1)
_UNHINTED = RelationSpec(
    name="u", nblocks=300, tuples_per_page=10, tuple_width=500, hinted_fraction=0.0, seed=2
)


@pytest.mark.parametrize("version", NEWER)
def test_a_read_only_scan_reads_the_vm_page_and_clears_the_prune_hints(version: str) -> None:
    inst, rel, res = _run(version, _HINTED)
    _, _, res18 = _run("18", _HINTED)
    assert _vm_reads(res) == 1
    assert res.io["normal"]["reads"] == res18.io["normal"]["reads"] + 1
    assert rel.prune_cleared_now == set(range(300))
    # A clean, hinted page is not set all-visible: that would newly dirty it (heap_page_will_set_vm).
    assert not rel.all_visible_now
    assert inst.pool.resident_blocks(rel, ForkNumber.VM) == {0}


def test_18_prunes_nothing_on_access() -> None:
    inst, rel, res = _run("18", _HINTED)
    assert _vm_reads(res) == 0 and sum(r.nblocks for r in res.reads) == 300
    assert not rel.prune_cleared_now and not inst.pool.resident_blocks(rel, ForkNumber.VM)


@pytest.mark.parametrize("version", NEWER)
def test_the_ring_refuses_the_pages_whose_prune_hint_was_cleared(version: str) -> None:
    """A BULKREAD scan (above NBuffers / 4): each page is dirtied with a full-page image not yet
    flushed, so StrategyRejectBuffer gives the ring's buffers up and the blocks stay resident."""
    spec = RelationSpec(name="b", nblocks=5000, tuples_per_page=3, tuple_width=2000, seed=2)
    inst19, rel19, _ = _run(version, spec)
    inst18, rel18, _ = _run("18", spec)
    assert len(inst18.pool.resident_blocks(rel18, ForkNumber.MAIN)) < 100
    # Measured on master (io_combine_limit 1): all 5,000 blocks resident; 18.6 the ring's last 48.
    assert sorted(inst19.pool.resident_blocks(rel19, ForkNumber.MAIN)) == list(range(5000))


@pytest.mark.parametrize("version", NEWER)
def test_an_unhinted_page_is_set_all_visible_by_a_read_only_scan(version: str) -> None:
    """The prune's visibility tests set the hint bits (the page is dirty, its image logged), so
    heap_page_will_set_vm sets the VM: PD_ALL_VISIBLE, visibilitymap_set; master also records the
    page's free space (RecordPageWithFreeSpace reads the FSM leaf)."""
    inst, rel, res = _run(version, _UNHINTED)
    assert rel.all_visible_now == set(range(300))
    fsm_reads = sum(1 for r in res.reads if r.fork == "fsm")
    assert fsm_reads == (1 if version == "20devel" else 0)
    from reference_impl.scans._pageview import HeapView

    view = HeapView(rel)
    assert view.vm_flags(5) & 1 and view.page(5).all_visible
    assert view.vm_counts(300)[0] == 300
    # A second scan finds no prune hint left: no more dirtying, and no hint bits to set.
    res2 = run_scan("seqscan", inst.backend(), rel)
    assert _vm_reads(res2) == 0


@pytest.mark.parametrize("version", NEWER)
def test_a_scan_that_may_modify_the_relation_sets_no_vm_bit(version: str) -> None:
    """pgstattuple's heap scan runs without page mode (SnapshotAny): no pruning at all; the heap
    scan of bt_index_check(heapallindexed) prunes but is not read-only: hints, no VM bits."""
    _, rel, res = _run(version, _UNHINTED, "pgstattuple")
    assert _vm_reads(res) == 0 and not rel.prune_cleared_now
    spec = RelationSpec(
        name="i", nblocks=200, tuple_width=100, hinted_fraction=0.0, indexes=(IndexSpec("btree"),), seed=3
    )
    inst = Instance(Settings(version=version, io_method="sync"), device="nvme", seed=1)
    srel = build_relation(inst, spec)
    res = run_scan(
        "bt_index_check",
        inst.backend(),
        next(iter(srel.indexes.values())),
        variant="unstreamed",
        heapallindexed=True,
    )
    assert _vm_reads(res) == 1
    assert srel.heap.prune_cleared_now == set(range(200)) and not srel.heap.all_visible_now


@pytest.mark.parametrize("version", NEWER)
def test_no_prune_where_the_hints_are_not_removable_or_absent(version: str) -> None:
    """Dead tuples hold every prune hint back (an older snapshot is open); VACUUM cleared the
    hint of an all-visible page."""
    dead = RelationSpec(
        name="d", nblocks=200, tuples_per_page=10, tuple_width=500, dead_fraction=0.05, seed=4
    )
    _, rel, res = _run(version, dead)
    assert _vm_reads(res) == 0 and not rel.prune_cleared_now
    visible = RelationSpec(
        name="v", nblocks=200, tuples_per_page=10, tuple_width=500, all_visible_fraction=1.0, seed=5
    )
    _, rel, res = _run(version, visible)
    assert _vm_reads(res) == 0 and not rel.prune_cleared_now


@pytest.mark.parametrize("version", NEWER)
@pytest.mark.parametrize("scan", ["indexscan", "bitmapscan", "tidrangescan", "tablesample_system"])
def test_executor_scans_prune_each_heap_page(version: str, scan: str) -> None:
    spec = RelationSpec(name="x", nblocks=400, tuple_width=100, indexes=(IndexSpec("btree"),), seed=6)
    params: dict[str, Any] = {"tablesample_system": {"sample_percent": 5.0, "repeatable_seed": 1.0}}.get(
        scan, {}
    )
    inst = Instance(Settings(version=version, io_method="sync"), device="nvme", seed=1)
    srel = build_relation(inst, spec)
    res = run_scan(scan, inst.backend(), srel.heap, **params)
    assert _vm_reads(res) == 1
    assert srel.heap.prune_cleared_now == set(res.blocks or [])
    inst18 = Instance(Settings(io_method="sync"), device="nvme", seed=1)
    srel18 = build_relation(inst18, spec)
    assert _vm_reads(run_scan(scan, inst18.backend(), srel18.heap, **params)) == 0
