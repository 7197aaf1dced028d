"""The pgstattuple family (``reference_impl.scans.pgstattuple``).

Property: for every function (``pgstattuple`` on a table and on btree/hash/GiST indexes,
``pgstattuple_approx``, ``pgstatindex``, ``pgstathashindex``), on random relations, settings and
cache states, the streamed and unstreamed variants return every statistic identically, consume
the same pages, and the streamed one issues no more reads. The statistics are also checked
against an oracle computed from the synthetic pages directly.

Exact tests: the streamify thread's ``pgstattuple_approx`` figure (4,139 → 260 reads),
``scans.md`` §7 (strategies and contexts of each function, the positions of the VM and FSM reads,
the free-space pass's second pin being a hit, BULKREAD ring escapes of pages whose hint bits are
set), and ``vac_estimate_reltuples``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream import strategies as rs
from reference_impl import Instance, ModelUsageError, Settings
from reference_impl.relations import SHAPES, IndexSpec, RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.pgstattuple import vac_estimate_reltuples
from reference_impl.storage.relation import ForkNumber

MAIN, FSM, VM = ForkNumber.MAIN, ForkNumber.FSM, ForkNumber.VM


def _run(
    spec: RelationSpec,
    scan: str,
    variant: str,
    cfg: Settings | None = None,
    warm: Any = None,
    index: bool = False,
    **params: Any,
):
    inst = Instance(cfg if cfg is not None else Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, spec)
    if warm is not None:
        warm(inst, srel)
    be = inst.backend()
    rel = srel.index() if index else srel.heap
    res = run_scan(scan, be, rel, variant=variant, **params)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return inst, srel, res


def _heap_oracle(srel: Any) -> dict[str, int]:
    """pgstattuple's counts from the synthetic pages, without any scan."""
    heap = srel.content
    width = 24 + srel.spec.tuple_width
    out = {"tuple_count": 0, "tuple_len": 0, "dead_tuple_count": 0, "dead_tuple_len": 0, "free_space": 0}
    for b in range(srel.heap.nblocks(MAIN)):
        p = heap.heap_page(b)
        out["tuple_count"] += p.nlive
        out["tuple_len"] += p.nlive * width
        out["dead_tuple_count"] += p.ndead
        out["dead_tuple_len"] += p.ndead * width
        stored = (p.nlive + p.ndead) * ((width + 7) // 8 * 8)
        out["free_space"] += 8192 - 24 - 4 * p.max_offset - stored
    return out


# ------------------------------------------------------------------------------------ property
_SCANS = (
    ("pgstattuple", None),
    ("pgstattuple", "btree"),
    ("pgstattuple", "hash"),
    ("pgstattuple", "gist"),
    ("pgstattuple_approx", None),
    ("pgstatindex", "btree"),
    ("pgstathashindex", "hash"),
)


@st.composite
def _cases(draw: Any) -> tuple[str, str | None, RelationSpec, Settings, int, float, dict[str, Any]]:
    scan, kind = draw(st.sampled_from(_SCANS))
    indexes: tuple[IndexSpec, ...] = ()
    if kind == "hash":
        indexes = (IndexSpec("hash", overflow=draw(st.sampled_from((0, 1, ("uniform", 0, 2))))),)
    elif kind is not None:
        indexes = (IndexSpec(kind, correlation=draw(st.sampled_from((1.0, 0.0)))),)
    avf = draw(st.sampled_from((0.0, 0.4, 0.9, 1.0)))
    width = draw(st.sampled_from((40, 100, 600)))
    spec = RelationSpec(
        name="t",
        nblocks=draw(st.integers(0 if kind is None else 1, 150)),
        tuples_per_page=draw(st.sampled_from((None, 8, ("uniform", 0, 30)) if width < 600 else (None, 5))),
        tuple_width=width,
        dead_fraction=draw(st.sampled_from((0.0, 0.1, 1.0))),
        all_visible_fraction=avf,
        all_frozen_fraction=avf / 2,
        vm_pattern=draw(st.sampled_from(("random", "runs"))),
        hinted_fraction=draw(st.sampled_from((0.0, 1.0))),
        indexes=indexes,
        seed=draw(st.integers(0, 2**31)),
    )
    cfg = draw(rs.settings(io_methods=("sync", "worker"), max_shared_buffers=4096))
    cfg = cfg.replace(shared_buffers=max(cfg.shared_buffers, 2048))
    params: dict[str, Any] = {}
    if scan == "pgstattuple_approx":
        params = {
            "relpages": draw(st.sampled_from((0, spec.nblocks))),
            "reltuples": draw(st.sampled_from((-1.0, 5000.0))),
        }
    return scan, kind, spec, cfg, draw(st.integers(0, 2**31)), draw(st.sampled_from((0.0, 0.5))), params


def _warm(seed: int, fraction: float) -> Any:
    def warm(inst: Instance, srel: Any) -> None:
        rng = random.Random(seed)
        for rel in (srel.heap, *srel.indexes.values()):
            for fork in rel.forks():
                inst.prewarm(rel, [b for b in range(rel.nblocks(fork)) if rng.random() < fraction], fork)

    return warm


@settings(max_examples=25)
@given(case=_cases())
def test_streamed_and_unstreamed_statistics_agree(case: Any) -> None:
    scan, kind, spec, cfg, seed, fraction, params = case
    index = kind is not None
    _, srel, plain = _run(spec, scan, "unstreamed", cfg, _warm(seed, fraction), index, **params)
    _, _, stream = _run(spec, scan, "streamed", cfg, _warm(seed, fraction), index, **params)
    assert stream.result == plain.result
    assert stream.blocks == plain.blocks
    assert stream.read_count <= plain.read_count
    if scan == "pgstattuple" and not index:
        oracle = _heap_oracle(srel)
        assert {k: plain.result[k] for k in oracle} == oracle


# ------------------------------------------------------------------------------------ the thread
def test_pgstattuple_approx_thread_figure() -> None:
    # The streamify thread's pgstattuple_small: 4,139 reads unstreamed, 260 streamed.
    spec = SHAPES["pgstattuple-thread"]
    _, _, plain = _run(spec, "pgstattuple_approx", "unstreamed", Settings())
    _, _, stream = _run(spec, "pgstattuple_approx", "streamed", Settings())
    assert (plain.read_count, stream.read_count) == (4139, 260)
    assert plain.io["normal"]["reads"] == stream.io["normal"]["reads"] == 1  # VM page 0
    assert plain.io["bulkread"]["reads"] == 4138
    assert stream.read_sizes.count(16) == 258 and sorted(stream.read_sizes)[:2] == [1, 10]
    assert stream.result == plain.result and plain.result["scanned_pages"] == 4138


# ------------------------------------------------------------------------------------ approx
def test_approx_reads_vm_and_fsm_before_the_first_heap_page() -> None:
    # Block 0 all-visible: VM page 0 and the FSM leaf are read before any heap block (normal).
    spec = RelationSpec(name="t", nblocks=40, all_visible_fraction=0.5, vm_pattern="prefix", seed=11)
    inst = Instance(Settings(io_method="sync"))
    srel = build_relation(inst, spec)
    assert srel.content.vm_status(0)[0] and not srel.content.vm_status(20)[0]
    for variant in ("unstreamed", "streamed"):
        inst = Instance(Settings(io_method="sync"))
        srel = build_relation(inst, spec)
        res = run_scan("pgstattuple_approx", inst.backend(), srel.heap, variant=variant)
        order = [(r.fork, r.start, r.context) for r in res.reads]
        assert order[:3] == [("vm", 0, "normal"), ("fsm", 2, "normal"), ("main", 20, "bulkread")]
        assert res.result["scanned_pages"] == 20


@pytest.mark.parametrize(("hinted", "resident"), [(0.0, 300), (1.0, 94)])
def test_approx_hint_bits_make_pages_escape_the_bulkread_ring(hinted: float, resident: int) -> None:
    # Unhinted pages get hint bits (WAL-logged with checksums): the BULKREAD ring refuses to
    # reuse them while their WAL is not flushed, so they all stay in the pool.
    spec = RelationSpec(name="t", nblocks=300, hinted_fraction=hinted, seed=3)
    inst, srel, _ = _run(spec, "pgstattuple_approx", "unstreamed", Settings())
    in_pool = sum(1 for b in range(300) if srel.heap.tag(MAIN, b) in inst.pool.mapping)
    assert in_pool == resident


# ------------------------------------------------------------------------------------ heap
def test_pgstattuple_heap_free_space_pass_pins_every_block_again() -> None:
    spec = RelationSpec(name="t", nblocks=60, dead_fraction=0.1, seed=2)
    inst, srel, res = _run(spec, "pgstattuple", "streamed")
    stats = inst.backends[0].stats.relation("t")
    assert stats.blks_fetched == 120 and stats.blks_hit == 60
    assert res.read_blocks == 60
    assert res.result == {**res.result, **_heap_oracle(srel)}


def test_pgstattuple_on_a_large_table_uses_bulkread() -> None:
    spec = SHAPES["bulk"]
    _, _, res = _run(spec, "pgstattuple", "streamed", Settings())
    assert set(res.io) == {"bulkread"}
    assert res.result["table_len"] == 4097 * 8192


# ------------------------------------------------------------------------------------ indexes
def test_pgstatindex_reads_every_block_with_bulkread_metapage_included() -> None:
    spec = RelationSpec(name="t", nblocks=200, indexes=(IndexSpec("btree"),), seed=1)
    _, srel, res = _run(spec, "pgstatindex", "unstreamed", index=True)
    n = srel.index().nblocks(MAIN)
    assert [r.start for r in res.reads] == list(range(n))
    assert set(res.io) == {"bulkread"}
    content = srel.index().content
    assert res.result["leaf_pages"] == content.nleaves
    assert res.result["internal_pages"] == n - 1 - content.nleaves
    assert res.result["index_size"] == n * 8192
    assert res.result["leaf_fragmentation"] == 0.0


def test_pgstatindex_streamed_proposal_combines_reads() -> None:
    spec = RelationSpec(name="t", nblocks=400, indexes=(IndexSpec("btree"),), seed=1)
    _, srel, res = _run(spec, "pgstatindex", "streamed", Settings(io_method="worker"), index=True)
    n = srel.index().nblocks(MAIN)
    assert res.read_sizes[0] == 1  # the metapage, still one ReadBufferExtended
    assert res.read_sizes[1:] == [16] * ((n - 1) // 16) + ([(n - 1) % 16] if (n - 1) % 16 else [])


def test_pgstathashindex_metapage_without_strategy() -> None:
    spec = RelationSpec(name="t", nblocks=50, indexes=(IndexSpec("hash", overflow=1),), seed=1)
    _, srel, res = _run(spec, "pgstathashindex", "unstreamed", index=True)
    content = srel.index().content
    assert (res.reads[0].start, res.reads[0].context) == (0, "normal")
    assert res.io["bulkread"]["reads"] == content.nblocks - 1
    assert res.result["bucket_pages"] == content.nbuckets
    assert res.result["overflow_pages"] == content.nbuckets
    assert res.result["bitmap_pages"] == 1
    assert res.result["live_items"] == content.entries.total


@pytest.mark.parametrize("kind", ["btree", "hash", "gist"])
def test_pgstattuple_on_an_index_counts_every_entry(kind: str) -> None:
    spec = RelationSpec(name="t", nblocks=80, indexes=(IndexSpec(kind),), seed=7)
    _, srel, res = _run(spec, "pgstattuple", "unstreamed", index=True)
    content = srel.index().content
    n = srel.index().nblocks(MAIN)
    assert [r.start for r in res.reads] == list(range(1, n))  # from block 1, one read each
    assert set(res.io) == {"bulkread"}
    expected = content.entries.total
    if kind == "gist" and n == 1:
        expected = 0
    assert res.result["tuple_count"] == expected
    assert res.result["table_len"] == n * 8192


def test_wrong_relation_kind_is_refused() -> None:
    spec = RelationSpec(name="t", nblocks=10, indexes=(IndexSpec("hash"),), seed=1)
    inst = Instance(Settings(io_method="sync"))
    srel = build_relation(inst, spec)
    with pytest.raises(ModelUsageError, match=r"pgstatindex.*hash index.*allowed a btree index"):
        run_scan("pgstatindex", inst.backend(), srel.index(), variant="streamed")
    with pytest.raises(ModelUsageError, match="not an index"):
        run_scan("pgstathashindex", inst.backend(), srel.heap, variant="streamed")


# ------------------------------------------------------------------------------------ estimate
@pytest.mark.parametrize(
    ("relpages", "reltuples", "total", "scanned", "tuples", "expected"),
    [
        (0, -1.0, 100, 100, 5000, 5000),  # whole table scanned
        (100, 9000.0, 100, 1, 40, 9000.0),  # same size, < 2 % scanned: keep
        (50, 9000.0, 100, 1, 40, 9000.0),  # a single page: keep
        (0, -1.0, 100, 10, 400, 4000),  # no old density: scale up
        (100, 10000.0, 100, 50, 2000, 7000),  # 100/page on 50 unscanned + 2000 seen
    ],
)
def test_vac_estimate_reltuples(
    relpages: int, reltuples: float, total: int, scanned: int, tuples: int, expected: float
) -> None:
    assert vac_estimate_reltuples(relpages, reltuples, total, scanned, tuples) == expected
