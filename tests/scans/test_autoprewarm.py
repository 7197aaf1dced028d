"""autoprewarm (``reference_impl.scans.autoprewarm``): a dump's blocks reloaded, per version.

The records are read fork by fork in ``apw_compare_blockinfo`` order (main, FSM, VM), one
stream per fork with no strategy, skipping blocks past the fork's end. PostgreSQL 18 stops when
the free list runs dry; 19 and 20devel, which have no free list, cap the records at
``NBuffers`` and read all of those.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import Instance, Settings
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.storage.relation import ForkNumber
from reference_impl.versions import VERSIONS

_SPEC = RelationSpec(name="t", nblocks=1000, vacuumed=True, seed=1)


def _run(
    version: str, variant: str = "streamed", occupied: int = 0, nbuffers: int = 2048, **params: Any
) -> Any:
    inst = Instance(Settings(version=version, io_method="worker", shared_buffers=nbuffers), device="nvme")
    srel = build_relation(inst, _SPEC)
    if occupied:
        other = inst.create_relation("other", occupied)
        inst.prewarm(other, list(range(occupied)))
    res = run_scan("autoprewarm", inst.backend(), srel.heap, variant=variant, **params)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return inst, srel, res


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_a_dump_that_fits_is_read_fork_by_fork_in_record_order(version: str, variant: str) -> None:
    _, srel, res = _run(version, variant, maps=True)
    nfsm, nvm = srel.heap.nblocks(ForkNumber.FSM), srel.heap.nblocks(ForkNumber.VM)
    assert res.result == {"prewarmed_blocks": 1000 + nfsm + nvm, "records": 1000 + nfsm + nvm}
    forks = [r.fork for r in res.reads]
    assert forks == sorted(forks, key=["main", "fsm", "vm"].index)
    main = [b for r in res.reads if r.fork == "main" for b in range(r.start, r.start + r.nblocks)]
    assert main == list(range(1000))
    assert {r.context for r in res.reads} == {"normal"}  # no strategy
    if variant == "streamed":
        assert len(res.stream_stats) == 3 and max(r.nblocks for r in res.reads) > 1
    else:
        assert {r.nblocks for r in res.reads} == {1}


def test_records_past_the_end_are_skipped() -> None:
    _, _, res = _run("19", first_block=900, last_block=1199, stride=3)
    assert res.result == {"prewarmed_blocks": 34, "records": 100}
    assert res.blocks == list(range(900, 1000, 3))


def test_18_stops_when_the_free_list_is_empty() -> None:
    """1,500 of 2,048 buffers hold another relation: 548 are free, so 18 loads about that many
    (and the few blocks its stream had already asked for), leaving the rest of the dump."""
    inst, _, res = _run("18", occupied=1500)
    loaded = res.result["prewarmed_blocks"]
    assert 548 <= loaded < 560
    assert not inst.pool.freelist
    _, _, plain = _run("18", "unstreamed", occupied=1500)
    assert plain.result["prewarmed_blocks"] == 548


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_19_reads_every_record_evicting_by_clock_sweep(version: str) -> None:
    _, _, res = _run(version, occupied=1500)
    assert res.result == {"prewarmed_blocks": 1000, "records": 1000}
    assert "autoprewarm_capped" not in res.notes


@pytest.mark.parametrize("version", ["19", "20devel"])
def test_19_caps_the_records_at_nbuffers(version: str) -> None:
    _, _, res = _run(version, nbuffers=600)
    assert res.result == {"prewarmed_blocks": 600, "records": 1000}
    assert res.notes["autoprewarm_capped"] == 600
    assert res.blocks == list(range(600))
