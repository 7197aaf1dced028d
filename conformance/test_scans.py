"""Scan-level properties: whole scans, streamed and unstreamed, through ``run_scan``.

These tests speak only ``ScanRequest`` / ``ScanOutcome`` (``pytest_readstream.protocol``), so they
run against any implementation with the ``scans`` capability, a real PostgreSQL server included;
a scan or variant the implementation does not offer is skipped with that reason.

* the streamed and unstreamed variants of a scan return the same answer;
* reads stay inside the relation (never past the size the scan started with, even while the
  table grows: the online-checksums thread), are at most ``io_combine_limit`` blocks, and a
  scan that reads all its pages issues no more reads streamed than unstreamed;
* ``SYSTEM_TIME``'s overshoot past its deadline is bounded by the look-ahead window (the
  sample-scan thread: "any blocks already queued when the limit expires are still processed");
* a cancelled scan leaves no pinned buffer;
* a rescan that crosses the ``NBuffers / 4`` threshold switches the stream's strategy: no stale
  strategy when one is added, no freed one used when it is removed (the heap-rescan bug, fixed
  by the seed thread; these two run with ``version="master"`` settings, and PostgreSQL 18.6,
  which still has the bug, fails them: list them in its expectations file).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_readstream.protocol import ScanOutcome, ScanRequest
from reference_impl import Settings
from reference_impl.relations.spec import IndexSpec, RelationSpec

from . import _oracle
from ._oracle import native_settings

pytestmark = pytest.mark.readstream_requires("scans")

_INDEX_FOR = {
    "btvacuumscan": "btree",
    "hashbulkdelete": "hash",
    "gistvacuumscan": "gist",
    "pgstatindex": "btree",
    "pgstathashindex": "hash",
    "bitmapscan": "btree",
    "indexscan": "btree",
}

# Scans that read every page they are after, with parameters that keep them quick.
_FULL_SCANS: dict[str, dict[str, Any]] = {
    "seqscan": {},
    "tidrangescan": {"start_block": 10, "end_block": 120},
    "tablesample_system": {"sample_percent": 20.0, "repeatable_seed": 7},
    "tablesample_bernoulli": {"sample_percent": 5.0, "repeatable_seed": 7},
    "bitmapscan": {},
    "indexscan": {},
    "analyze": {"statistics_target": 10},
    "vacuum": {},
    "btvacuumscan": {},
    "hashbulkdelete": {},
    "gistvacuumscan": {},
    "pgstattuple": {},
    "pgstattuple_approx": {},
    "pgstatindex": {},
    "pgstathashindex": {},
    "pg_prewarm": {},
    "data_checksums": {},
    "log_newpage_range": {},
    "verify_heapam": {},
    "createdb_wal_log": {},
}


def _spec(scan: str, nblocks: int = 160) -> RelationSpec:
    kind = _INDEX_FOR.get(scan)
    indexes = (IndexSpec(kind),) if kind else ()
    return RelationSpec(
        name="t",
        nblocks=nblocks,
        seed=11,
        indexes=indexes,
        dead_fraction=0.05,
        all_visible_fraction=0.3,
    )


def _run(impl: Any, scan: str, variant: str, **kwargs: Any) -> ScanOutcome:
    offered = impl.scan_variants(scan)
    if variant not in offered:
        pytest.skip(
            f"implementation {impl.name!r} does not offer scan {scan!r} {variant}"
            + (f" (only {', '.join(offered)})" if offered else "")
        )
    return impl.run_scan(ScanRequest(scan, variant=variant, **kwargs))


def _own_code_note(outcome: ScanOutcome) -> str:
    """Where the implementation could not apply a parameter (it ran its own code), say so."""
    unapplied = outcome.extra.get("unapplied_params") or {}
    return f" (not applied, the implementation ran its own code: {unapplied})" if unapplied else ""


def _assert_reads_bounded(outcome: ScanOutcome, nblocks: int, icl: int, what: str) -> None:
    for start, n in outcome.read_ranges:
        assert start + n <= nblocks, (
            f"{what}: a read of blocks {start}..{start + n - 1} past the {nblocks} blocks"
        )
    if outcome.read_sizes:
        assert max(outcome.read_sizes) <= icl, (
            f"{what}: a read of {max(outcome.read_sizes)} blocks (icl {icl})"
        )


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
@pytest.mark.parametrize("scan", sorted(_FULL_SCANS))
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"shared_buffers": 4096}, id="worker"),
        pytest.param({"shared_buffers": 4096, "io_method": "sync", "io_combine_limit": 4}, id="sync-icl4"),
    ],
    indirect=True,
)
def test_streamed_and_unstreamed_agree(
    readstream_impl: Any, readstream_settings: Settings, readstream_stats: Any, scan: str
) -> None:
    """Same answer from both variants; reads inside the relation, at most ``io_combine_limit``
    blocks, and no more of them streamed than unstreamed; no pin left."""
    spec = _spec(scan)
    params = _FULL_SCANS[scan]
    outs = {}
    for variant in ("streamed", "unstreamed"):
        outs[variant] = _run(
            readstream_impl, scan, variant, relation=spec, params=params, settings=readstream_settings
        )
    s, u = outs["streamed"], outs["unstreamed"]
    assert s.error is None and u.error is None, (s.error, u.error)
    assert s.result == u.result
    assert s.pinned_after == 0 and u.pinned_after == 0
    icl = _oracle.effective_io_combine_limit(readstream_settings)
    _assert_reads_bounded(s, spec.nblocks, icl, "streamed")
    _assert_reads_bounded(u, spec.nblocks, 1, "unstreamed")
    assert s.reads <= u.reads, f"streamed issued {s.reads} reads, unstreamed {u.reads}"
    readstream_stats.record_outcome(s, scan=scan, unstreamed_reads=u.reads)


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
@pytest.mark.parametrize(
    ("scan", "params"),
    [
        pytest.param("seqscan", {"grow_during": 300}, id="seqscan"),
        pytest.param("data_checksums", {"grow_during": 300}, id="data_checksums"),
    ],
)
@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_scan_never_reads_past_the_size_it_started_with(
    readstream_impl: Any, scan: str, params: dict[str, Any], variant: str
) -> None:
    """A table that grows during the scan is read only up to the size captured at the start."""
    spec = _spec(scan, 200)
    out = _run(readstream_impl, scan, variant, relation=spec, params=params)
    assert out.error is None, out.error
    _assert_reads_bounded(out, spec.nblocks, 128, variant)
    if out.blocks is not None:
        assert all(b < spec.nblocks for b in out.blocks)


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
@pytest.mark.parametrize(
    "scan",
    [
        "seqscan",
        "tablesample_system",
        "pg_prewarm",
        "vacuum",
        "pgstattuple",
        "data_checksums",
        "btvacuumscan",
    ],
)
@pytest.mark.parametrize("cancel_after", [0, 3, 40])
def test_cancelled_scan_leaves_no_pin(readstream_impl: Any, scan: str, cancel_after: int) -> None:
    """A statement cancelled after some pages leaves no pinned buffer behind (§7.1)."""
    params = {"sample_percent": 50.0, "repeatable_seed": 1} if scan == "tablesample_system" else {}
    out = _run(
        readstream_impl,
        scan,
        "streamed",
        relation=_spec(scan, 300),
        params=params,
        cancel_after_buffers=cancel_after,
        device="cloud-1ms",
    )
    assert out.error is not None, "the scan was not cancelled"
    assert out.pinned_after == 0


def _window(settings: Settings) -> int:
    """The most blocks a stream can hold between the callback and the consumer (§9.10)."""
    icl = _oracle.effective_io_combine_limit(settings)
    return max(1, min((settings.effective_io_concurrency + 1) * icl, _oracle.max_proportional_pins(settings)))


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param(
            {"io_method": m, "effective_io_concurrency": e, "debug_io_direct": "data"}, id=f"{m}-eic{e}"
        )
        for m in ("sync", "worker", "io_uring")
        for e in (1, 16, 256)
    ],
    indirect=True,
)
@pytest.mark.parametrize("variant", ["streamed", "unstreamed"])
def test_system_time_overshoot_bounded_by_lookahead_window(
    readstream_impl: Any, readstream_settings: Settings, readstream_stats: Any, variant: str
) -> None:
    """``TABLESAMPLE SYSTEM_TIME``: pages processed after the deadline are at most the blocks the
    stream had already queued (its look-ahead window; one page unstreamed)."""
    out = _run(
        readstream_impl,
        "tablesample_system_time",
        variant,
        relation=RelationSpec(name="t", nblocks=3000, seed=5),
        params={"time_ms": 3.0},
        settings=readstream_settings,
    )
    after = out.result.get("pages_after_deadline")
    if after is None:
        pytest.skip("the implementation does not report pages_after_deadline for SYSTEM_TIME")
    assert out.result.get("expired", True), "the time limit never expired: use a larger relation"
    window = _window(readstream_settings) if variant == "streamed" else 0
    readstream_stats.record_outcome(out, pages_after_deadline=after, window=window)
    assert after <= window + 2, (
        f"{after} pages processed after the deadline; the look-ahead window is {window}"
    )
    assert out.pinned_after == 0


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize("io_method", ["worker", "sync"])
def test_rescan_that_adds_a_strategy_reads_through_the_ring(readstream_impl: Any, io_method: str) -> None:
    """A two-pass ``seqscan`` whose table grows past ``NBuffers / 4`` before the rescan reads its
    second pass with a BULKREAD ring (I/O context ``bulkread``), not with the stale no-strategy.
    ``rescan_fix=True`` selects the seed thread's fix in the reference model (its PostgreSQL 18
    code has the bug, as 18.6 has); an implementation without that switch runs its own code."""
    out = _run(
        readstream_impl,
        "seqscan",
        "streamed",
        relation=RelationSpec(name="t", nblocks=200, seed=3),
        params={"passes": 2, "rescan_nblocks": 900, "rescan_fix": True},
        settings=native_settings(readstream_impl, shared_buffers=1024, io_method=io_method),
    )
    io = out.extra.get("io")
    if not io:
        pytest.skip("the implementation reports no I/O per context (outcome.extra['io'])")
    assert out.error is None, out.error
    bulk = io.get("bulkread", {}).get("reads", 0)
    normal = io.get("normal", {}).get("reads", 0)
    ran = _own_code_note(out)
    assert bulk > 0, f"the second pass read nothing through the ring: {io}{ran}"
    assert normal <= 200, f"{normal} reads without a strategy: the second pass kept the stale one{ran}"


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
@pytest.mark.parametrize("io_method", ["worker", "sync"])
def test_rescan_that_removes_a_strategy_never_uses_the_freed_one(
    readstream_impl: Any, io_method: str
) -> None:
    """A two-pass ``seqscan`` whose table shrinks below ``NBuffers / 4`` before the rescan frees
    its ring; the second pass reads without it (context ``normal``) and never touches it.
    ``rescan_fix=True`` selects the seed thread's fix, as above. (A server cannot run this: one
    statement's lock keeps VACUUM from truncating the table between the passes.)"""
    out = _run(
        readstream_impl,
        "seqscan",
        "streamed",
        relation=RelationSpec(name="t", nblocks=900, seed=3),
        params={"passes": 2, "rescan_nblocks": 200, "rescan_fix": True},
        settings=native_settings(readstream_impl, shared_buffers=1024, io_method=io_method),
    )
    assert out.error is None, f"{out.error}{_own_code_note(out)}"
    assert out.pinned_after == 0
    rows = out.result.get("rows_per_pass")
    if rows is not None:
        assert len(rows) == 2 and rows[1] > 0
    io = out.extra.get("io")
    if io:
        assert io.get("normal", {}).get("reads", 0) > 0, (
            f"the second pass did not read without the ring: {io}"
        )
