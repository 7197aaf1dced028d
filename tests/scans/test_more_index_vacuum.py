"""SP-GiST, GIN, BRIN and bloom at VACUUM time, and the bloom index scan.

Each scan reads the pages its C reads, in that order, with the strategy it uses; streamed and
unstreamed give the same answer. Versions: SP-GiST's bulk delete is streamed from 18; GIN's and
BRIN's cleanup and both bloom passes from 19; 20devel empties GIN's pending list at every bulk
delete (18 and 19 at the first).
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import Instance, Settings
from reference_impl.observer import ReadPathObserver
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import native_variant, run_scan
from reference_impl.storage.relation import ForkNumber, InvalidBlockNumber
from reference_impl.versions import VERSIONS

_SCANS = {"spgist": "spgvacuumscan", "gin": "ginvacuum", "brin": "brinvacuumcleanup", "bloom": "blbulkdelete"}


def _spec(kind: str, nblocks: int = 1500, **ispec: Any) -> RelationSpec:
    return RelationSpec(
        name="t",
        nblocks=nblocks,
        tuples_per_page=30,
        dead_fraction=0.05,
        indexes=(IndexSpec(kind, **ispec),),
        seed=9,
    )


def _run(
    scan: str,
    kind: str,
    variant: str | None = None,
    version: str = "19",
    spec: RelationSpec | None = None,
    **params: Any,
) -> tuple[Any, Any]:
    """Run ``scan`` on the index; ``variant`` None: the one ``version``'s own source runs."""
    inst = Instance(Settings(version=version, io_method="worker", shared_buffers=4096), device="nvme")
    srel = build_relation(inst, spec if spec is not None else _spec(kind))
    if variant is None:
        variant = native_variant(scan, version)
    res = run_scan(scan, inst.backend(), srel.index(), variant=variant, **params)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return srel, res


def _main(res: Any) -> list[tuple[int, int, str]]:
    return [(r.start, r.nblocks, r.context) for r in res.reads if r.fork == "main"]


def _blocks(reads: list[tuple[int, int, str]]) -> list[int]:
    return [b for start, n, _ in reads for b in range(start, start + n)]


def _dead_entries(srel: Any) -> int:
    heap = srel.content
    return sum(heap.heap_page(b).ndead for b in range(srel.spec.nblocks))


@pytest.mark.parametrize("kind", sorted(_SCANS))
@pytest.mark.parametrize("version", VERSIONS)
def test_streamed_and_unstreamed_give_the_same_answer(kind: str, version: str) -> None:
    srel, streamed = _run(_SCANS[kind], kind, "streamed", version)
    _, plain = _run(_SCANS[kind], kind, "unstreamed", version)
    assert streamed.result == plain.result
    assert streamed.blocks == plain.blocks
    assert len(_main(streamed)) < len(_main(plain))
    assert {n for _, n, _ in _main(plain)} == {1}
    if kind != "brin":
        assert streamed.result["tuples_removed"] == _dead_entries(srel)


def test_spgist_bulk_delete_reads_every_block_after_the_metapage_through_the_ring() -> None:
    srel, res = _run("spgvacuumscan", "spgist")
    reads = _main(res)
    n = srel.index().nblocks()
    assert reads[0] == (0, 1, "normal")  # initSpGistState: the metapage, no strategy
    assert _blocks(reads[1:]) == list(range(1, n))
    assert {c for _, _, c in reads[1:]} == {"vacuum"}
    assert res.blocks == list(range(1, n))  # cleanup after a bulk delete reads nothing more
    cached = _run("spgvacuumscan", "spgist", metapage_cached=True)[1]
    assert _main(cached)[0][0] == 1


def test_spgist_leaf_that_loses_every_entry_goes_to_the_fsm() -> None:
    spec = RelationSpec(
        name="t", nblocks=200, tuples_per_page=20, dead_fraction=1.0, indexes=(IndexSpec("spgist"),)
    )
    srel, res = _run("spgvacuumscan", "spgist", spec=spec)
    leaves = srel.index().nblocks() - 3
    assert res.result["pages_deleted"] == leaves and res.result["num_index_tuples"] == 0
    assert srel.index().nblocks(ForkNumber.FSM) > 0  # RecordFreeIndexPage created the index's FSM


def test_gin_bulk_delete_walks_the_leaves_in_key_order_then_cleanup_reads_every_page() -> None:
    for version, cleanup_streamed in (("18", False), ("19", True), ("20devel", True)):
        srel, res = _run("ginvacuum", "gin", version=version)
        content = srel.index_content()
        leaves = [1]
        page = content.page(0, 1)
        while not page.is_leaf:
            leaves.append(int(page.children[0]))
            page = content.page(0, leaves[-1])
        b = page.right
        while b != InvalidBlockNumber:
            leaves.append(b)
            b = content.page(0, b).right
        n = srel.index().nblocks()
        # The metapage (ginInsertCleanup), the descent and the leaf walk, then 1 .. n - 1.
        assert (
            res.blocks[: len(leaves) - len(content.level_blocks) + 1]
            == leaves[len(content.level_blocks) - 1 :]
        )
        reads = _main(res)
        assert reads[0] == (0, 1, "normal")
        walk = reads[1 : 1 + len(leaves)]
        assert [s for s, _, _ in walk] == leaves and {c for _, _, c in walk} == {"vacuum"}
        assert res.blocks[-(n - 1) :] == list(range(1, n))
        assert (max(nb for _, nb, _ in reads) > 1) is cleanup_streamed, version


def _metapage_starts(version: str, kind: str) -> int:
    class Starts(ReadPathObserver):
        count = 0

        def read_buffers_starting(
            self, backend, op, buffers, index, blocknum, nblocks, flags, allow_forwarding
        ):
            if op.rel.name == f"t_{kind}" and blocknum == 0:
                Starts.count += 1

    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, _spec(kind))
    be = inst.backend()
    be.add_observer(Starts())
    res = run_scan("vacuum", be, srel.heap, dead_items_max=2000)
    assert res.error is None and res.result["num_index_scans"] >= 2
    return Starts.count


def test_gin_pending_list_is_emptied_at_every_bulk_delete_only_in_20devel() -> None:
    """Two or more rounds of index vacuuming: 18 and 19 read the metapage for
    ``ginInsertCleanup`` once, 20devel once per round (plus ``ginUpdateStats`` in all)."""
    c18, c19, c20 = (_metapage_starts(v, "gin") for v in VERSIONS)
    assert c18 == c19 == 2
    assert c20 > c19


def test_brin_bulk_delete_reads_nothing_and_cleanup_reads_all_then_summarizes() -> None:
    srel, res = _run("brinvacuumcleanup", "brin", spec=_spec("brin", nblocks=128 * 500 + 7))
    n = srel.index().nblocks()
    reads = _main(res)
    assert _blocks(reads) == list(range(n))  # from the metapage on, streamed in 19
    assert max(nb for _, nb, _ in reads) == n
    assert {r.fork for r in res.reads} == {"main", "fsm"}
    assert res.result["num_index_tuples"] == 500  # the full ranges brinsummarize found
    assert res.result["tuples_removed"] == 0
    assert res.blocks == list(range(n))
    _, old = _run("brinvacuumcleanup", "brin", version="18", spec=_spec("brin", nblocks=128 * 500 + 7))
    assert {nb for _, nb, _ in _main(old)} == {1}


def test_bloom_bulk_delete_reads_every_page_twice_and_the_metapage() -> None:
    srel, res = _run("blbulkdelete", "bloom")
    n = srel.index().nblocks()
    assert res.blocks == list(range(1, n)) * 2
    reads = _main(res)
    assert reads[0] == (0, 1, "normal")  # initBloomState
    assert _blocks(reads[1:]) == list(range(1, n))  # the second pass hits (a 4096-buffer pool)
    assert res.result["num_index_tuples"] == srel.content.total_entries() - res.result["tuples_removed"]


def test_bloom_scan_reads_the_whole_index_through_a_bulkread_ring() -> None:
    for version, combined in (("18", False), ("19", True)):
        srel, res = _run("blgetbitmap", "bloom", version=version)
        n = srel.index().nblocks()
        reads = _main(res)
        assert reads[0] == (0, 1, "normal")
        assert _blocks(reads[1:]) == list(range(1, n)) and {c for _, _, c in reads[1:]} == {"bulkread"}
        assert (max(nb for _, nb, _ in reads) > 1) is combined
        assert res.result == {"pages": n - 1, "signatures": srel.content.total_entries()}


@pytest.mark.parametrize("kind", ["gin", "brin", "bloom"])
def test_vacuum_streams_these_indexes_from_19(kind: str) -> None:
    def reads(version: str) -> list[int]:
        inst = Instance(Settings(version=version, io_method="worker", shared_buffers=4096), device="nvme")
        srel = build_relation(inst, _spec(kind, nblocks=128 * 40))
        res = run_scan("vacuum", inst.backend(), srel.heap)
        assert res.error is None
        return [r.nblocks for r in res.reads if r.relation == f"t_{kind}" and r.fork == "main"]

    assert max(reads("18")) == 1
    assert max(reads("19")) > 1
