"""``contrib/pg_visibility`` (``reference_impl.scans.pg_visibility``).

The streamed functions read exactly the pages the C chooses, in order, through a BULKREAD ring:
every block for ``pg_visibility_rel``, the VM's all-visible (all-frozen) blocks for
``pg_check_visible`` (``pg_check_frozen``); their answers do not depend on the variant. The map
functions read only VM pages; ``pg_visibility_map_summary`` reads the whole VM fork from 19
(``visibilitymap_count``) where 18 reads the pages covering the heap.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import Instance, Settings
from reference_impl.errors import ModelUsageError
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans._forkmaps import VM_HEAPBLOCKS_PER_PAGE
from reference_impl.storage.relation import ForkNumber
from reference_impl.versions import VERSIONS

_SPEC = RelationSpec(
    name="t",
    nblocks=3000,
    all_visible_fraction=0.6,
    all_frozen_fraction=0.3,
    vm_pattern="runs",
    vm_run_blocks=40,
    vacuumed=True,
    seed=7,
)


def _run(scan: str, variant: str = "streamed", version: str = "18", spec: RelationSpec = _SPEC) -> Any:
    inst = Instance(Settings(version=version, io_method="worker", shared_buffers=4096), device="nvme")
    srel = build_relation(inst, spec)
    res = run_scan(scan, inst.backend(), srel.heap, variant=variant)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return srel, res


def _main_reads(res: Any) -> list[tuple[int, int]]:
    return [(r.start, r.nblocks) for r in res.reads if r.fork == "main"]


def _covered(reads: list[tuple[int, int]]) -> list[int]:
    return [b for start, n in reads for b in range(start, start + n)]


@pytest.mark.parametrize("version", VERSIONS)
def test_pg_visibility_rel_reads_every_block_in_order_through_the_ring(version: str) -> None:
    srel, res = _run("pg_visibility_rel", version=version)
    reads = _main_reads(res)
    assert _covered(reads) == list(range(3000))
    assert max(n for _, n in reads) > 1
    assert {r.context for r in res.reads if r.fork == "main"} == {"bulkread"}
    assert [r.start for r in res.reads if r.fork == "vm"] == [0]
    assert res.blocks == list(range(3000))
    vis, frz = srel.content.vm_bits(0, 3000)
    assert res.result == {
        "blocks": 3000,
        "all_visible": int(vis.sum()),
        "all_frozen": int(frz.sum()),
        "pd_all_visible": int(vis.sum()),
    }


def test_pg_visibility_rel_unstreamed_reads_one_block_at_a_time() -> None:
    _, streamed = _run("pg_visibility_rel")
    _, plain = _run("pg_visibility_rel", "unstreamed")
    assert plain.result == streamed.result
    assert [n for _, n in _main_reads(plain)] == [1] * 3000
    assert plain.blocks == streamed.blocks
    assert len(_main_reads(streamed)) < len(_main_reads(plain))


@pytest.mark.parametrize(("scan", "bit"), [("pg_check_visible", 0), ("pg_check_frozen", 1)])
@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_pg_check_reads_exactly_the_blocks_the_vm_marks(scan: str, bit: int, variant: str) -> None:
    srel, res = _run(scan, variant)
    marked = [int(b) for b in range(3000) if srel.content.vm_bits(0, 3000)[bit][b]]
    assert _covered(_main_reads(res)) == marked
    assert res.blocks == marked
    assert res.result == {"corrupt_items": 0, "checked_pages": len(marked)}
    # The callback's VM page is read once; the consumer's recheck of it is a hit.
    assert [r.start for r in res.reads if r.fork == "vm"] == [0]
    assert res.io["normal"]["hits"] >= 1
    if variant == "streamed":
        assert max(n for _, n in _main_reads(res)) > 1


def test_pg_check_on_an_all_frozen_table_checks_every_page_and_dirties_none() -> None:
    """All-visible pages always carry their hint bits (``docs/relations.md``), so the visibility
    check's ``HeapTupleSatisfiesVacuum`` sets none and nothing is written."""
    spec = RelationSpec(
        name="t", nblocks=200, all_visible_fraction=1.0, all_frozen_fraction=1.0, vacuumed=True, seed=2
    )
    for scan in ("pg_check_visible", "pg_check_frozen"):
        srel, res = _run(scan, spec=spec)
        assert res.result == {"corrupt_items": 0, "checked_pages": 200}
        assert srel.heap.hinted_now == set()
        assert _covered(_main_reads(res)) == list(range(200))


def test_map_functions_read_only_the_visibility_map() -> None:
    spec = _SPEC.replace(nblocks=2 * VM_HEAPBLOCKS_PER_PAGE + 10)
    for scan in ("pg_visibility_map_rel", "pg_visibility_map_summary"):
        _, res = _run(scan, "unstreamed", spec=spec)
        assert [(r.fork, r.start) for r in res.reads] == [("vm", 0), ("vm", 1), ("vm", 2)]


def _summary_with_a_longer_vm(version: str) -> Any:
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, _SPEC.replace(nblocks=100))
    srel.heap.set_nblocks(ForkNumber.VM, 3)  # the VM fork holds pages past the heap's last block
    res = run_scan("pg_visibility_map_summary", inst.backend(), srel.heap, variant="unstreamed")
    assert res.error is None
    return srel, res


def test_map_summary_reads_the_vm_pages_covering_the_heap_in_18() -> None:
    srel, res = _summary_with_a_longer_vm("18")
    assert [r.start for r in res.reads] == [0]
    vis, frz = srel.content.vm_bits(0, 100)
    assert res.result == {"all_visible": int(vis.sum()), "all_frozen": int(frz.sum())}


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_map_summary_reads_the_whole_vm_fork_from_19(version: str) -> None:
    """``visibilitymap_count`` reads till it falls off the end of the map."""
    _, res = _summary_with_a_longer_vm(version)
    assert [r.start for r in res.reads] == [0, 1, 2]
    _, res18 = _summary_with_a_longer_vm("18")
    assert res.result == res18.result


def test_pg_visibility_refuses_an_index() -> None:
    inst = Instance(Settings())
    srel = build_relation(inst, RelationSpec(name="t", nblocks=10, indexes=(IndexSpec("btree"),)))
    with pytest.raises(ModelUsageError, match='relation "t_btree" is of wrong relation kind'):
        run_scan("pg_visibility_rel", inst.backend(), srel.index())
