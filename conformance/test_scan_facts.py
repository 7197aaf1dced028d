"""Scan-level facts of PostgreSQL 18 that every implementation of a scan must keep.

A port of a scan, or a real server, is held to what PostgreSQL's scans do, stated here as facts
about PostgreSQL, each with the source function it comes from. They speak only ``ScanRequest`` /
``ScanOutcome`` (the ``scans`` capability), so a real server runs them too; every variant of a
scan the implementation offers must keep them (streaming changes how pages are read, never which).

* ``TABLESAMPLE SYSTEM (p) REPEATABLE (s)`` selects exactly the blocks whose hash of ``[block,
  seed]`` is below the cutoff (``system_nextsampleblock``); ``BERNOULLI`` exactly the tuples whose
  hash of ``[block, offset, seed]`` is (``bernoulli_nextsampletuple``). Their expected sets below
  were measured on PostgreSQL 18.6 for fixed seeds, as PostgreSQL's own regression test
  ``tablesample.sql`` fixes them.
* ``SYSTEM_ROWS`` visits blocks in one stride order, ``firstblock + k × step (mod nblocks)`` with
  ``step`` coprime to ``nblocks`` (``system_rows_nextsampleblock``, ``random_relative_prime``).
* VACUUM jumps over a run of skippable (all-visible) pages only when it is at least
  ``SKIP_PAGES_THRESHOLD`` = 32 pages long (``heap_vac_scan_next_block``), and always reads the
  last page (``find_next_unskippable_block``).
* A heap scan of a table of more than ``NBuffers / 4`` blocks reads through a BULKREAD ring
  (``initscan``), whose size is ``GetAccessStrategy``'s; one of at most ``NBuffers / 4`` blocks
  reads without a strategy.
* ``pg_prewarm``'s ``buffer`` mode reads every block into shared buffers without a ring, whatever
  the table's size (``pg_prewarm``: ``ReadBufferExtended`` with no strategy; PostgreSQL 18
  streams it with none).
* A combined read never crosses a 1 GiB segment (``mdmaxcombine``); at scan level, ``pg_prewarm``
  over a range around a segment boundary is cut there.
"""

from __future__ import annotations

import itertools
from math import gcd
from typing import Any

import pytest

from pytest_readstream.protocol import ScanOutcome, ScanRequest
from reference_impl import RELSEG_SIZE
from reference_impl.relations.spec import RelationSpec

from . import _oracle
from ._oracle import native_settings

pytestmark = pytest.mark.readstream_requires("scans")

_SAMPLED = RelationSpec(name="t", nblocks=60, tuples_per_page=4, seed=11)


def _variants(impl: Any, scan: str) -> tuple[str, ...]:
    offered = tuple(v for v in ("streamed", "unstreamed") if v in impl.scan_variants(scan))
    if not offered:
        pytest.skip(f"implementation {impl.name!r} does not offer scan {scan!r}")
    return offered


def _runs(impl: Any, scan: str, **kwargs: Any) -> list[tuple[str, ScanOutcome]]:
    """The scan in every variant the implementation offers; each must have succeeded."""
    out = []
    for variant in _variants(impl, scan):
        outcome = impl.run_scan(ScanRequest(scan, variant=variant, **kwargs))
        assert outcome.error is None, f"{scan} {variant}: {outcome.error}"
        out.append((variant, outcome))
    return out


def _io(outcome: ScanOutcome) -> dict[str, Any]:
    io = outcome.extra.get("io")
    if not io:
        pytest.skip("the implementation reports no I/O per context (outcome.extra['io'])")
    # Contexts that read something: a server also counts its catalog lookups (hits, context
    # normal) for the statement, which are not the scan's.
    return {ctx: counts for ctx, counts in io.items() if counts.get("reads", 0)}


# ------------------------------------------------------------------------------ sampling
@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize(
    ("percent", "seed", "blocks"),
    [
        (25.0, 123.5, [2, 3, 12, 14, 16, 18, 19, 20, 21, 25, 27, 36, 38, 42, 51, 52, 53, 56, 57]),
        (10.0, -17.0, [0, 1, 2, 5, 19, 21, 27, 34, 35, 49, 52]),
        (
            50.0,
            0.0,
            [
                1,
                2,
                4,
                8,
                9,
                10,
                11,
                12,
                13,
                17,
                19,
                20,
                22,
                24,
                26,
                27,
                29,
                31,
                32,
                33,
                36,
                40,
                42,
                43,
                44,
                45,
                49,
                51,
                52,
                53,
                54,
                57,
                58,
            ],
        ),
    ],
)
def test_system_repeatable_samples_postgresqls_block_set(
    readstream_impl: Any, percent: float, seed: float, blocks: list[int]
) -> None:
    """``TABLESAMPLE SYSTEM (percent) REPEATABLE (seed)`` on a 60-block table of 4 tuples a page
    returns every tuple of exactly these blocks, in block order (``system_nextsampleblock``:
    block b is sampled when ``hash_any_extended([b, hashfloat8(seed)]) < cutoff``)."""
    for variant, out in _runs(
        readstream_impl,
        "tablesample_system",
        relation=_SAMPLED,
        params={"sample_percent": percent, "repeatable_seed": seed},
    ):
        assert out.blocks == blocks, f"{variant}: sampled blocks {out.blocks}, PostgreSQL samples {blocks}"
        assert out.result["rows"] == 4 * len(blocks), f"{variant}: {out.result['rows']} rows"


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize(
    ("percent", "seed", "rows", "digest"),
    [(10.0, 7.0, 31, 17213968968091465129), (33.3, -2.5, 92, 8484231993590367923)],
)
def test_bernoulli_repeatable_samples_postgresqls_tuples(
    readstream_impl: Any, percent: float, seed: float, rows: int, digest: int
) -> None:
    """``TABLESAMPLE BERNOULLI (percent) REPEATABLE (seed)`` returns exactly these tuples
    (``bernoulli_nextsampletuple``: a tuple is sampled when ``hash_any_extended([block, offset,
    seed]) < cutoff``); compared by count and the order-free TID digest of
    ``ScanOutcome.result``."""
    for variant, out in _runs(
        readstream_impl,
        "tablesample_bernoulli",
        relation=_SAMPLED,
        params={"sample_percent": percent, "repeatable_seed": seed},
    ):
        assert out.result["rows"] == rows, f"{variant}: {out.result['rows']} rows, PostgreSQL samples {rows}"
        if "tid_digest" not in out.result:
            pytest.skip("the implementation reports no tid_digest of the sampled tuples")
        assert out.result["tid_digest"] == digest, f"{variant}: other tuples than PostgreSQL's"


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize(("nblocks", "rows"), [(60, 40), (97, 200), (64, 256)])
def test_system_rows_visits_blocks_in_one_stride_order(readstream_impl: Any, nblocks: int, rows: int) -> None:
    """``SYSTEM_ROWS (n)`` visits blocks ``firstblock + k × step (mod nblocks)``, each at most
    once, with ``step`` coprime to ``nblocks`` (``system_rows_nextsampleblock``,
    ``random_relative_prime``), and returns n rows while the table has them."""
    spec = RelationSpec(name="t", nblocks=nblocks, tuples_per_page=4, seed=5)
    for variant, out in _runs(
        readstream_impl, "tablesample_system_rows", relation=spec, params={"rows": rows}
    ):
        visited = out.blocks
        assert visited, f"{variant}: no block visited"
        assert out.result["rows"] == min(rows, 4 * nblocks)
        assert len(set(visited)) == len(visited), f"{variant}: a block visited twice: {visited}"
        if len(visited) >= 2:
            step = (visited[1] - visited[0]) % nblocks
            assert gcd(step, nblocks) == 1, f"{variant}: step {step} shares a factor with {nblocks}"
            jumps = {(b - a) % nblocks for a, b in itertools.pairwise(visited)}
            assert jumps == {step}, f"{variant}: not one stride: steps {sorted(jumps)} in {visited}"


# ------------------------------------------------------------------------------ vacuum
def _prefix(nblocks: int, visible: int, frozen: int = 0) -> RelationSpec:
    return RelationSpec(
        name="t",
        nblocks=nblocks,
        all_visible_fraction=visible / nblocks,
        all_frozen_fraction=frozen / nblocks,
        vm_pattern="prefix",
        seed=5,
    )


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize(("visible", "scanned"), [(31, 100), (32, 68), (33, 67)])
def test_vacuum_skips_runs_of_at_least_32_all_visible_pages(
    readstream_impl: Any, visible: int, scanned: int
) -> None:
    """VACUUM of a 100-page table whose first pages are all-visible jumps over them only when they
    are at least ``SKIP_PAGES_THRESHOLD`` = 32 (``heap_vac_scan_next_block``): 31 are read, 32
    or more are skipped."""
    for variant, out in _runs(readstream_impl, "vacuum", relation=_prefix(100, visible)):
        assert out.result["scanned_pages"] == scanned, (
            f"{variant}: {out.result['scanned_pages']} pages scanned with a run of {visible} all-visible "
            f"pages first; PostgreSQL scans {scanned}"
        )


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
def test_vacuum_always_reads_the_last_page(readstream_impl: Any) -> None:
    """VACUUM of an all-frozen table still reads its last page (``find_next_unskippable_block``:
    the last block is never skippable, so that the relation can be truncated)."""
    for variant, out in _runs(readstream_impl, "vacuum", relation=_prefix(100, 100, 100)):
        assert out.result["scanned_pages"] == 1, f"{variant}: {out.result['scanned_pages']} pages scanned"


# ------------------------------------------------------------------------------ bulk read
@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize("extra_blocks", [0, 1])
def test_bulkread_ring_only_above_a_quarter_of_shared_buffers(
    readstream_impl: Any, extra_blocks: int
) -> None:
    """A sequential scan of more than ``NBuffers / 4`` blocks reads through a BULKREAD ring; one
    of exactly ``NBuffers / 4`` blocks reads without a strategy (``initscan``:
    ``rs_nblocks > NBuffers / 4``)."""
    settings = native_settings(readstream_impl, shared_buffers=1024, synchronize_seqscans=False)
    nblocks = _oracle.bulkread_threshold(settings) + extra_blocks
    spec = RelationSpec(name="t", nblocks=nblocks, tuples_per_page=1, seed=3)
    want = "bulkread" if extra_blocks else "normal"
    for variant, out in _runs(readstream_impl, "seqscan", relation=spec, settings=settings):
        contexts = set(_io(out))
        assert contexts == {want}, (
            f"{variant}: {nblocks} blocks read in contexts {sorted(contexts)}, not {want}"
        )


@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
@pytest.mark.parametrize(
    "gucs",
    [
        pytest.param({}, id="default-94"),
        pytest.param({"effective_io_concurrency": 1}, id="eic1-48"),
        pytest.param({"shared_buffers": 4096}, id="pool4096-32"),
    ],
)
def test_bulkread_ring_has_getaccessstrategys_size(readstream_impl: Any, gucs: dict[str, Any]) -> None:
    """A cold sequential scan through a BULKREAD ring keeps reusing the ring's buffers: every page
    read after the ring's first fill reuses one, so ``reuses = pages read − ring size``, the ring
    size being ``GetAccessStrategy``'s (``freelist.c``: ``Min(Max(256 kB, GetPinLimit() × 8 kB),
    256 kB + 8 kB × io_combine_limit × effective_io_concurrency)``, at most ``NBuffers / 8``).
    The settings keep the stream's pins well below the ring, so no page escapes it."""
    settings = native_settings(readstream_impl, synchronize_seqscans=False, **gucs)
    ring = _oracle.ring_buffers("bulkread", None, settings)
    nblocks = _oracle.bulkread_threshold(settings) + 200
    spec = RelationSpec(name="t", nblocks=nblocks, tuples_per_page=1, seed=3)
    for variant, out in _runs(readstream_impl, "seqscan", relation=spec, settings=settings):
        bulk = _io(out).get("bulkread")
        assert bulk, f"{variant}: nothing read through a BULKREAD ring"
        read = bulk["read_bytes"] // 8192
        assert read == nblocks, f"{variant}: {read} pages read of {nblocks}"
        assert bulk["reuses"] == read - ring, (
            f"{variant}: {bulk['reuses']} ring reuses over {read} pages: a ring of {read - bulk['reuses']} "
            f"buffers; GetAccessStrategy gives {ring}"
        )


# ------------------------------------------------------------------------------ pg_prewarm
@pytest.mark.readstream_invariant("scans", "MUST", kind="implementation")
def test_pg_prewarm_buffer_mode_reads_every_block_without_a_ring(readstream_impl: Any) -> None:
    """``pg_prewarm(t, 'buffer')`` reads every block of a table larger than ``NBuffers / 4`` into
    shared buffers with no ring (``pg_prewarm``: no strategy), so all of it stays resident:
    context ``normal`` only, each block read once."""
    settings = native_settings(readstream_impl, shared_buffers=1024)
    nblocks = _oracle.bulkread_threshold(settings) + 40
    spec = RelationSpec(name="t", nblocks=nblocks, tuples_per_page=1, seed=3)
    for variant, out in _runs(readstream_impl, "pg_prewarm", relation=spec, settings=settings):
        io = _io(out)
        assert set(io) == {"normal"}, f"{variant}: contexts {sorted(io)}"
        read = io["normal"]["read_bytes"] // 8192
        assert read == nblocks, f"{variant}: {read} blocks read of {nblocks}"
        resident = out.extra.get("resident", {}).get("t", {}).get("main")
        if resident is not None:
            assert resident == list(range(nblocks)), f"{variant}: not every block stayed resident"


@pytest.mark.readstream_invariant("scans", "MUST", kind="contract")
def test_pg_prewarm_reads_are_cut_at_a_segment_boundary(readstream_impl: Any) -> None:
    """``pg_prewarm`` of blocks ``RELSEG_SIZE - 12 .. RELSEG_SIZE + 18`` reads up to the segment
    boundary, then from it (``mdmaxcombine``: a read never crosses a 1 GiB segment); reads are
    at most ``io_combine_limit`` (16) blocks."""
    first, last = RELSEG_SIZE - 12, RELSEG_SIZE + 18
    spec = RelationSpec(name="t", nblocks=RELSEG_SIZE + 40, tuples_per_page=1, seed=3)
    for variant, out in _runs(
        readstream_impl,
        "pg_prewarm",
        relation=spec,
        params={"first_block": first, "last_block": last},
        settings=native_settings(readstream_impl, io_method="sync"),
    ):
        if not out.read_ranges:
            pytest.skip("the implementation reports no read ranges (ScanOutcome.read_ranges)")
        covered = [b for start, n in out.read_ranges for b in range(start, start + n)]
        assert covered == list(range(first, last + 1)), f"{variant}: reads {out.read_ranges}"
        for start, n in out.read_ranges:
            assert start // RELSEG_SIZE == (start + n - 1) // RELSEG_SIZE, (
                f"{variant}: the read of blocks {start}..{start + n - 1} crosses a segment boundary"
            )
        if variant == "streamed":
            assert (RELSEG_SIZE - 12, 12) in out.read_ranges, f"{variant}: reads {out.read_ranges}"
