"""Heap scans set hint bits on pages not hinted yet (``heap_prepare_pagescan``), and a BULKREAD
ring refuses those WAL-logged dirty buffers, so the pages stay in shared buffers.

Measured on PostgreSQL 18.6 (``tests/fidelity/test_live.py``): a cold seq scan of a 5,000-page
table nobody has read since it was loaded leaves all 5,000 pages in the pool, dirty, where a
hinted one leaves the ring's 94.
"""

from __future__ import annotations

import pytest

from reference_impl import Instance, Settings
from reference_impl.buffers.pool import BM_DIRTY
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.storage.relation import ForkNumber

MAIN = ForkNumber.MAIN


def _scan(spec: RelationSpec, scan: str = "seqscan", times: int = 1, **params: object):  # type: ignore[no-untyped-def]
    inst = Instance(Settings(io_method="worker"), device="nvme")
    srel = build_relation(inst, spec)
    be = inst.backend()
    results = []
    for _ in range(times):
        res = run_scan(scan, be, srel.heap, variant="streamed", **params)
        assert res.error is None and res.pinned_after == 0
        results.append(res)
    pool = inst.pool
    resident = {b for b in range(spec.nblocks) if srel.heap.tag(MAIN, b) in pool.mapping}
    dirty = {b for b in resident if pool.flags[pool.mapping[srel.heap.tag(MAIN, b)]] & BM_DIRTY}
    return inst, srel, results, resident, dirty


@pytest.mark.parametrize(
    ("scan", "params"),
    [
        ("seqscan", {}),
        ("tablesample_bernoulli", {"sample_percent": 50.0, "repeatable_seed": 3}),
        ("tidrangescan", {"start_block": 0}),
    ],
)
def test_unhinted_pages_stay_in_the_pool_dirty(scan: str, params: dict[str, object]) -> None:
    spec = RelationSpec(
        name="u", nblocks=5000, tuples_per_page=10, tuple_width=100, hinted_fraction=0.0, seed=1
    )
    inst, srel, _, resident, dirty = _scan(spec, scan, **params)
    assert resident == dirty == set(range(5000))
    assert srel.heap.hinted_now == set(range(5000))
    # One WAL-logged hint (a full-page image) per page.
    assert inst.pool.wal_insert_lsn >= 5000


def test_hinted_and_all_visible_pages_are_not_dirtied() -> None:
    spec = RelationSpec(
        name="h",
        nblocks=5000,
        tuples_per_page=10,
        tuple_width=100,
        hinted_fraction=0.0,
        all_visible_fraction=0.5,
        vm_pattern="prefix",
        seed=2,
    )
    _, srel, _, _, dirty = _scan(spec)
    # The all-visible half needs no visibility test; the other half is hinted by the scan.
    assert dirty == set(range(2500, 5000)) == srel.heap.hinted_now
    hinted = RelationSpec(name="k", nblocks=5000, tuples_per_page=10, tuple_width=100, seed=2)
    _, hsrel, _, resident, dirty = _scan(hinted)
    assert dirty == set() and hsrel.heap.hinted_now == set() and len(resident) == 94


def test_a_page_is_hinted_once() -> None:
    """The second scan finds the hints set: nothing more to dirty or WAL-log."""
    spec = RelationSpec(
        name="t", nblocks=300, tuples_per_page=10, tuple_width=100, hinted_fraction=0.0, seed=3
    )
    inst, _, _, _, dirty = _scan(spec, times=2)
    assert dirty == set(range(300)) and inst.pool.wal_insert_lsn == 300


def test_scans_that_test_visibility_share_the_hints() -> None:
    """pgstattuple tests visibility tuple by tuple (its own ``_hint``) and VACUUM page by page,
    not through ``HeapScan``; all of them record the pages they hint, so whichever runs second
    finds the hints set and logs no second full-page image."""
    spec = RelationSpec(
        name="p", nblocks=300, tuples_per_page=10, tuple_width=100, hinted_fraction=0.0, seed=4
    )
    for first, second in (("pgstattuple", "seqscan"), ("seqscan", "pgstattuple"), ("vacuum", "seqscan")):
        inst = Instance(Settings(io_method="worker"), device="nvme")
        srel = build_relation(inst, spec)
        be = inst.backend()
        run_scan(first, be, srel.heap, variant="streamed")
        assert srel.heap.hinted_now == set(range(300)), first
        lsn = inst.pool.wal_insert_lsn
        run_scan(second, be, srel.heap, variant="streamed")
        assert inst.pool.wal_insert_lsn == lsn, (first, second)
