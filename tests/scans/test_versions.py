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
_STREAMED_FROM_19 = (
    "pgstatindex",
    "pgstathashindex",
    "pgstattuple_approx",
    "hashbulkdelete",
    "ginvacuum",
    "brinvacuumcleanup",
    "blbulkdelete",
    "blgetbitmap",
)
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
    "pg_visibility_rel",
    "pg_check_visible",
    "pg_check_frozen",
    "autoprewarm",
    "spgvacuumscan",
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
    "pg_visibility_map_rel",
    "pg_visibility_map_summary",
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


def _vacuum_reads(version: str, **params: Any) -> tuple[Any, Any]:
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, _hash_table())
    res = run_scan("vacuum", inst.backend(), srel.heap, **params)
    assert res.error is None, res.error
    index = srel.index()
    return res, [r for r in res.reads if r.relation == index.name]


def test_vacuum_reads_hash_buckets_one_by_one_in_18_and_streams_them_from_19() -> None:
    res18, hash18 = _vacuum_reads("18")
    assert hash18 and max(r.nblocks for r in hash18) == 1
    for version in NEWER:
        res, hashr = _vacuum_reads(version)
        assert max(r.nblocks for r in hashr) > 1, version  # primary bucket pages combined
        assert len(hashr) < len(hash18)
        assert res.result["indexes"] == res18.result["indexes"]
        assert len(res.stream_stats) == len(res18.stream_stats) + 1
    # hash_stream chooses explicitly: off runs 18's hash code in 19, on runs 19's in 18.
    _, off19 = _vacuum_reads("19", hash_stream=False)
    assert max(r.nblocks for r in off19) == 1
    _, on18 = _vacuum_reads("18", hash_stream=True)
    assert max(r.nblocks for r in on18) > 1


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


# ------------------------------------------------------------------------------ failsafe
def _failsafe_vacuum(version: str, variant: str = "streamed") -> Any:
    """A VACUUM whose dead-TID store fills after a few pages; the failsafe engages at the
    precheck of that first round of index vacuuming (check 2; check 1 is before phase I)."""
    spec = RelationSpec(
        name="t",
        nblocks=400,
        tuples_per_page=40,
        dead_fraction=0.2,
        indexes=(IndexSpec("btree"),),
        seed=11,
    )
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, spec)
    res = run_scan(
        "vacuum",
        inst.backend(),
        srel.heap,
        variant=variant,
        dead_items_max=200,
        failsafe_at_check=2,
        buffer_usage_limit=256,
    )
    assert res.error is None, res.error
    return res


def _heap_contexts(res: Any) -> list[str]:
    return [r.context for r in res.reads if r.relation == "t" and r.fork == "main"]


def _eighteen_clears() -> bool:
    inst = Instance(Settings(version="18"))
    from reference_impl import begin_stream

    stream = begin_stream(inst.backend(), inst.create_relation("x", 1), lambda s, p: -1)
    has = hasattr(stream, "clear_strategy")
    stream.end()
    return has


@pytest.mark.parametrize("version", ["18", "20devel"])
def test_failsafe_clears_the_phase_one_stream_ring_in_18_and_20devel(version: str) -> None:
    if version == "18" and not _eighteen_clears():
        pytest.skip("the 18 stream model has no clear_strategy yet (the per-version stream models add it)")
    res = _failsafe_vacuum(version)
    assert res.result["failsafe"] is True
    assert res.result["num_index_scans"] == 0 and res.result["phase3_pages"] == 0
    assert res.result["indexes"] == {}  # no bulk delete started, no cleanup
    ctxs = _heap_contexts(res)
    first_normal = ctxs.index("normal")
    assert set(ctxs[:first_normal]) == {"vacuum"}
    assert set(ctxs[first_normal:]) == {"normal"}, "after the failsafe phase I reads without the ring"


def test_failsafe_leaves_the_phase_one_stream_its_ring_in_19beta1() -> None:
    res = _failsafe_vacuum("19")
    assert res.result["failsafe"] is True
    assert res.result["num_index_scans"] == 0 and res.result["phase3_pages"] == 0
    assert set(_heap_contexts(res)) == {"vacuum"}, "19beta1 only sets vacrel->bstrategy = NULL"


@pytest.mark.parametrize("version", VERSIONS)
def test_unstreamed_phase_one_drops_the_ring_with_the_failsafe(version: str) -> None:
    res = _failsafe_vacuum(version, "unstreamed")
    ctxs = _heap_contexts(res)
    assert ctxs[0] == "vacuum" and ctxs[-1] == "normal"


@pytest.mark.parametrize("version", VERSIONS)
def test_failsafe_from_the_precheck_starts_phase_one_without_a_ring(version: str) -> None:
    """Engaged before phase I, the stream begins with ``vacrel->bstrategy = NULL`` in every
    version; truncation and index work are off, so the answer is the same in all three."""
    if version == "18" and not _eighteen_clears():
        pytest.skip("the 18 stream model has no clear_strategy yet (the per-version stream models add it)")
    spec = RelationSpec(name="t", nblocks=200, dead_fraction=0.3, indexes=(IndexSpec("btree"),), seed=2)
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, spec)
    res = run_scan("vacuum", inst.backend(), srel.heap, failsafe_at_check=1)
    assert res.error is None
    assert set(_heap_contexts(res)) == {"normal"}
    assert res.result["failsafe"] and res.result["num_index_scans"] == 0
    assert res.result["removed_pages"] == 0


def test_no_failsafe_by_default() -> None:
    for version in VERSIONS:
        res = _failsafe_vacuum_plain(version)
        assert "failsafe" not in res.result
        assert set(_heap_contexts(res)) == {"vacuum"}
        late = _failsafe_vacuum_plain(version, failsafe_at_check=10_000)
        assert late.result["failsafe"] is False
        assert _heap_contexts(late) == _heap_contexts(res)


def _failsafe_vacuum_plain(version: str, **params: Any) -> Any:
    spec = RelationSpec(name="t", nblocks=100, dead_fraction=0.2, indexes=(IndexSpec("btree"),), seed=3)
    inst = Instance(Settings(version=version, io_method="sync", shared_buffers=4096))
    srel = build_relation(inst, spec)
    return run_scan("vacuum", inst.backend(), srel.heap, buffer_usage_limit=256, **params)


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


# ------------------------------------------------------------------------------ the server side
def test_server_variants_follow_each_versions_source() -> None:
    from pytest_readstream.postgres.impl.scanops import SERVER_VARIANTS, server_variant

    assert {s: server_variant(s, "18") for s in SERVER_VARIANTS} == SERVER_VARIANTS
    for scan in ("pgstatindex", "pgstathashindex", "pgstattuple_approx"):
        assert server_variant(scan, "19") == server_variant(scan, "master") == "streamed"
    assert server_variant("vacuum", "19") == "streamed"
    with pytest.raises(Exception, match="only runs inside VACUUM"):
        server_variant("ginvacuum", "19")


def test_server_vacuum_accepts_the_hash_stream_its_version_runs() -> None:
    from pytest_readstream.postgres.impl.relbuild import UnsupportedLayout
    from pytest_readstream.postgres.impl.scanops import server_op

    server_op("vacuum", {"hash_stream": False}, "18")
    server_op("vacuum", {"hash_stream": True}, "19")
    with pytest.raises(UnsupportedLayout, match="PostgreSQL 18 reads hash buckets one page at a time"):
        server_op("vacuum", {"hash_stream": True}, "18")
    with pytest.raises(UnsupportedLayout, match="PostgreSQL 20devel streams the hash bucket pages"):
        server_op("vacuum", {"hash_stream": False}, "20devel")
    with pytest.raises(UnsupportedLayout, match="failsafe_at_check = 2 cannot be run on a server"):
        server_op("vacuum", {"failsafe_at_check": 2})


@pytest.mark.parametrize("scan", sorted(_INSTRUMENTED))
def test_server_operations_refuse_explain_io_until_they_read_it(scan: str) -> None:
    from pytest_readstream.postgres.impl.relbuild import UnsupportedLayout
    from pytest_readstream.postgres.impl.scanops import server_op

    with pytest.raises(UnsupportedLayout, match="explain_io = True cannot be run on a server"):
        server_op(scan, {"explain_io": True}, "19")


def test_the_oracle_runs_the_variant_of_the_servers_version() -> None:
    """A 19 or master server runs the streamed pgstatindex, pgstathashindex and
    pgstattuple_approx (their contrib/pgstattuple sources begin a read stream); the oracle's
    model side and the server's accepted variant follow the server's version, not 18's table."""
    from pytest_readstream.postgres.fidelity import oracle
    from pytest_readstream.postgres.fidelity.scenarios import SCENARIOS

    for scan in ("pgstatindex", "pgstathashindex", "pgstattuple_approx"):
        assert oracle._server_variant(scan) == oracle._server_variant(scan, "18") == "unstreamed"
        assert oracle._server_variant(scan, "19") == oracle._server_variant(scan, "20devel") == "streamed"
    sc = next(s for s in SCENARIOS if s.name == "pgstatindex")
    # Measured on a master server: 12 reads of 1,384,448 bytes (18.6: 169 reads, the same bytes).
    m18, m20 = oracle.run_model(sc), oracle.run_model(sc, "20devel")
    assert (m18["reads"], m20["reads"]) == (169, 12)
    assert m18["read_bytes"] == m20["read_bytes"] == 1384448
