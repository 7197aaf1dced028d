"""The scans per version: each follows its version's source (``reference_impl.versions``).

Each test pins down one difference between the C of PostgreSQL 18.6, 19beta1 and the
development branch (20devel) in a caller of the read stream:

* which variant each version runs (``native_variant``): 19 streams ``pgstatindex``,
  ``pgstathashindex``, ``pgstattuple_approx`` and hash bulk delete, 18 reads them one block at
  a time;
* ``heap_rescan`` keeps the stream's first strategy in every version (the seed thread's fix
  landed nowhere);
* VACUUM streams hash buckets from 19; 20devel begins that stream before reading the metapage;
* VACUUM's wraparound failsafe: 18 and 20devel clear the phase I stream's ring, 19beta1 keeps it;
* ``EXPLAIN (IO)``: sequential, TID range and bitmap heap scans turn the stream's ``IOStats``
  on (19 on), nothing else does, and 18 refuses the option.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_readstream.protocol import ScanRequest
from pytest_readstream.reference import ReferenceImplementation
from reference_impl import Instance, Settings
from reference_impl.errors import ModelUsageError
from reference_impl.observer import ReadPathObserver
from reference_impl.relations import IndexSpec, RelationSpec, build_relation
from reference_impl.scans import SCANS, native_variant, run_scan
from reference_impl.versions import VERSIONS

NEWER = ("19", "20devel")


# ------------------------------------------------------------------------------ native variants
_STREAMED_FROM_19 = ("pgstatindex", "pgstathashindex", "pgstattuple_approx", "hashbulkdelete")
_STREAMED_IN_ALL = (
    "seqscan",
    "tidrangescan",
    "bitmapscan",
    "analyze",
    "vacuum",
    "btvacuumscan",
    "gistvacuumscan",
    "pg_prewarm",
    "verify_heapam",
    "pgstattuple",
    "cursor",
    "createdb_wal_log",
)
_UNSTREAMED_IN_ALL = (
    "indexscan",
    "tablesample_system",
    "tablesample_bernoulli",
    "tablesample_system_rows",
    "tablesample_system_time",
    "bt_index_check",
    "pg_prewarm_read",
    "pg_prewarm_prefetch",
    "log_newpage_range",
    "data_checksums",
)


@pytest.mark.parametrize("scan", _STREAMED_FROM_19)
def test_nineteen_streams_what_eighteen_reads_block_by_block(scan: str) -> None:
    assert native_variant(scan, "18") == "unstreamed"
    for version in (*NEWER, "master"):
        assert native_variant(scan, version) == "streamed", (scan, version)


def test_every_scan_has_the_variant_of_each_version_declared() -> None:
    for scan in _STREAMED_IN_ALL:
        assert [native_variant(scan, v) for v in VERSIONS] == ["streamed"] * 3, scan
    for scan in _UNSTREAMED_IN_ALL:
        assert [native_variant(scan, v) for v in VERSIONS] == ["unstreamed"] * 3, scan
    classified = set(_STREAMED_FROM_19) | set(_STREAMED_IN_ALL) | set(_UNSTREAMED_IN_ALL)
    assert set(SCANS) == classified, "a scan whose versions this file does not state"


def test_native_variant_refuses_an_unknown_scan_or_version() -> None:
    with pytest.raises(ModelUsageError, match="unknown scan 'nosuch'"):
        native_variant("nosuch", "18")
    with pytest.raises(Exception, match="version = '17' has no model"):
        native_variant("seqscan", "17")


# ------------------------------------------------------------------------------ heap_rescan
@pytest.mark.parametrize("version", VERSIONS)
def test_rescan_keeps_the_stale_strategy_in_every_version(version: str) -> None:
    """A table grown past ``NBuffers / 4`` before the rescan: ``initscan`` makes a BULKREAD ring
    but the stream keeps the no-strategy it began with, so the second pass reads in context
    ``normal`` too (measured on 18.6; 19's and 20devel's ``heap_rescan`` are the same code)."""
    inst = Instance(Settings(version=version, shared_buffers=1024, io_method="sync"))
    rel = inst.create_relation("t", 200)
    res = run_scan("seqscan", inst.backend(), rel, passes=2, rescan_nblocks=900)
    assert res.error is None
    assert res.result["rows_per_pass"] == [200, 900]
    assert res.io.get("bulkread", {}).get("reads", 0) == 0, res.io
    assert res.io["normal"]["reads"] >= 900


# ------------------------------------------------------------------------------ hash bulk delete
def _hash_table(nblocks: int = 120) -> RelationSpec:
    return RelationSpec(
        name="t",
        nblocks=nblocks,
        tuples_per_page=40,
        dead_fraction=0.1,
        indexes=(IndexSpec("hash", overflow=1),),
        seed=5,
    )


class _Order(ReadPathObserver):
    def __init__(self, relation: str) -> None:
        self.relation = relation
        self.events: list[tuple[str, int]] = []

    def stream_begun(self, backend: Any, stream: Any) -> None:
        if stream.rel.name == self.relation:
            self.events.append(("begun", -1))

    def read_buffers_starting(
        self,
        backend: Any,
        op: Any,
        buffers: Any,
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        allow_forwarding: bool,
    ) -> None:
        if op.rel.name == self.relation:
            self.events.append(("start", blocknum))


@pytest.mark.parametrize(("version", "first"), [("19", ("start", 0)), ("20devel", ("begun", -1))])
def test_hash_bulk_delete_begins_its_stream_before_the_metapage_only_in_20devel(
    version: str, first: tuple[str, int]
) -> None:
    """19 reads the metapage (``_hash_getcachedmetap``) and then begins the bucket stream;
    20devel begins the stream first (stream set-up may process invalidations)."""
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, _hash_table())
    be = inst.backend()
    index = srel.index()
    obs = _Order(index.name)
    be.add_observer(obs)
    res = run_scan("hashbulkdelete", be, index)
    assert res.error is None
    assert obs.events[0] == first
    assert ("start", 0) in obs.events[:2] and ("begun", -1) in obs.events[:2]


# ------------------------------------------------------------------------------ EXPLAIN (IO)
_INSTRUMENTED = {
    "seqscan": {},
    "tidrangescan": {"start_block": 10, "end_block": 300},
    "bitmapscan": {"selectivity": 0.2},
}


def _instrumented(version: str, scan: str, variant: str = "streamed") -> Any:
    inst = Instance(Settings(version=version, io_method="worker", shared_buffers=4096), device="nvme")
    spec = RelationSpec(name="t", nblocks=600, tuples_per_page=30, indexes=(IndexSpec("btree"),), seed=1)
    srel = build_relation(inst, spec)
    return run_scan(scan, inst.backend(), srel.heap, variant=variant, explain_io=True, **_INSTRUMENTED[scan])


@pytest.mark.parametrize("version", NEWER)
@pytest.mark.parametrize("scan", sorted(_INSTRUMENTED))
def test_explain_io_turns_the_scans_stream_statistics_on(version: str, scan: str) -> None:
    res = _instrumented(version, scan)
    assert res.error is None, res.error
    io = res.io_stats
    assert io is not None
    heap_pages = len(res.blocks)
    assert io["prefetch_count"] == heap_pages  # every buffer the stream returned
    assert io["io_count"] > 0 and io["io_nblocks"] >= io["io_count"]
    assert 0 < io["distance_capacity"]
    assert io["distance_max"] <= io["distance_capacity"]


@pytest.mark.parametrize("scan", sorted(_INSTRUMENTED))
def test_explain_io_has_no_stream_to_instrument_unstreamed(scan: str) -> None:
    """``heap_beginscan`` enables the statistics only when the scan has a stream."""
    res = _instrumented("19", scan, "unstreamed")
    assert res.error is None and res.io_stats is None


@pytest.mark.parametrize("scan", sorted(_INSTRUMENTED))
def test_explain_io_does_not_exist_in_18(scan: str) -> None:
    with pytest.raises(ModelUsageError, match="explain_io = True is invalid with version 18"):
        _instrumented("18", scan)


def test_only_executor_heap_scans_take_explain_io() -> None:
    takes = sorted(n for n, s in SCANS.items() if any(p.name == "explain_io" for p in s.params))
    assert takes == sorted(_INSTRUMENTED)


def test_scan_outcome_carries_the_io_stats() -> None:
    impl = ReferenceImplementation()
    spec = RelationSpec(name="t", nblocks=300, seed=4)
    out = impl.run_scan(
        ScanRequest("seqscan", relation=spec, settings=Settings(version="19"), params={"explain_io": True})
    )
    assert out.error is None
    assert out.extra["io_stats"]["prefetch_count"] == 300
    plain = impl.run_scan(ScanRequest("seqscan", relation=spec, settings=Settings(version="19")))
    assert plain.extra["io_stats"] is None
