"""The fidelity scenarios: operations run both through the model and on a real PostgreSQL 18.

Each :class:`Scenario` is one scan (a name of ``reference_impl.scans``) on one synthetic
relation (a ``RelationSpec``, built identically on both sides) under one set of settings
(``reference_impl.Settings`` fields). The set covers what the fidelity issue lists: sequential
scans with ``io_combine_limit`` 1, 4, 8, 16 and 32 and ``effective_io_concurrency`` 0, 1 and 16
on ``io_method`` sync and worker, tables below and above ``NBuffers / 4`` (no ring, ring) and one
crossing a 1 GiB segment; SYSTEM and BERNOULLI with ``REPEATABLE`` seeds, SYSTEM_ROWS and
SYSTEM_TIME; ANALYZE's sample; ``pg_prewarm`` in its three modes; VACUUM with and without
skippable pages, with a btree and with a hash index; bitmap heap and index scans; the
pgstattuple family; amcheck.

Most scenarios must agree exactly. A few cannot, and say why with a named reason from
:data:`REASONS`; each reason lists the checks that still hold (the oracle runs them, and a
scenario whose checks fail counts as a disagreement). ``fast`` marks the subset CI runs live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_impl.relations import IndexSpec, RelationSpec

__all__ = ["Reason", "REASONS", "Scenario", "SCENARIOS", "RELATIONS", "scenario_names"]


@dataclass(frozen=True)
class Reason:
    """Why a scenario's model and server figures may differ, and what must hold anyway."""

    name: str
    text: str
    checks: tuple[str, ...]


REASONS: dict[str, Reason] = {
    "backend-prng-seed": Reason(
        "backend-prng-seed",
        "The block choice is drawn from the backend's private PRNG (pg_global_prng_state): "
        "ANALYZE's block sampler, and the start block and stride of SYSTEM_ROWS and SYSTEM_TIME, "
        "which reject REPEATABLE in PostgreSQL 18. SQL can neither read nor set that seed, so the "
        "model runs with its own and picks other blocks; how many blocks are read does not "
        "depend on the seed.",
        ("read_bytes_equal", "contexts_equal"),
    ),
    "real-time-limit": Reason(
        "real-time-limit",
        "TABLESAMPLE SYSTEM_TIME stops when its limit has passed on the server's clock; the model "
        "runs on a virtual clock, so how many blocks fit into the limit differs. The visit order "
        "is still a stride permutation of the table, read one block per I/O.",
        ("stride_order", "one_block_reads"),
    ),
    "read-ahead-timing": Reason(
        "read-ahead-timing",
        "From PostgreSQL 19 on, with an asynchronous io_method, the stream's read-ahead distance "
        "grows only after WaitReadBuffers() reported a real wait (read_stream_next_buffer). "
        "Whether the backend waited for an I/O worker depends on real time on the server and on "
        "the model's device on its virtual clock, so how far the stream had read ahead when the "
        "consumer stopped, turned or rolled back differs (and varies between server runs). Still "
        "checked: the rows returned, the I/O contexts, and that the two sides' reads differ by "
        "less than the stream can read ahead (GetPinLimit() blocks).",
        ("rows_equal", "contexts_equal", "read_ahead_bounded"),
    ),
}


#: From 19 on the read-ahead grows only after a real wait: scenarios whose answer depends on how
#: far the stream read ahead run with 1 ms reads imposed on the server's files (and the model on
#: the same device), so that every read is waited for on both sides.
_WAITED_DEVICE = (("19", "cloud-1ms"),)


def _from_version(pairs: tuple[tuple[str, str], ...], version: str | None) -> str | None:
    """The last value of ``(first version, value)`` pairs whose first version is not newer than
    ``version`` (``None``: 18)."""
    from reference_impl.versions import VERSIONS, canonical_version

    at = VERSIONS.index(canonical_version(version or VERSIONS[0]))
    found = None
    for since, value in pairs:
        if VERSIONS.index(since) <= at:
            found = value
    return found


@dataclass(frozen=True)
class Scenario:
    """One fidelity scenario (see the module docstring).

    ``target`` names the relation whose resident main-fork blocks form the compared block set
    (``None``: the table); ``answer_keys`` are answer fields that must also be equal;
    ``reason`` names an entry of :data:`REASONS` when exact agreement is impossible;
    ``relation_reads`` also compares each relation's blocks read (``pg_statio``: fetched −
    hit, every fork together) for scenarios whose point is a read ``pg_stat_io`` does not show.
    """

    name: str
    scan: str
    relation: RelationSpec
    settings: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    answer_keys: tuple[str, ...] = ()
    reason: str | None = None
    fast: bool = False
    note: str = ""
    relation_reads: bool = False
    #: Reasons that apply from a version on, as ``(first version, reason)`` pairs.
    reasons_from: tuple[tuple[str, str], ...] = ()
    #: A device both sides run on from a version on, as ``(first version, device profile)``
    #: pairs: the model on that profile, the server with it imposed on the relation's files
    #: (``ScanRequest.impose_device``); none: the model's nvme, the server's own storage.
    device_from: tuple[tuple[str, str], ...] = ()

    def device_for(self, version: str | None = None) -> str | None:
        """The device imposed on both sides on ``version`` (``None``: none)."""
        return _from_version(self.device_from, version)

    def reason_for(self, version: str | None = None) -> str | None:
        """The reason that applies when the model of ``version`` (``None``: 18) judges a server:
        ``reason``, else the last of ``reasons_from`` whose first version is not newer."""
        if self.reason is not None:
            return self.reason
        return _from_version(self.reasons_from, version)

    @property
    def server_key(self) -> tuple[Any, ...]:
        """Settings that need a server restart: scenarios are run grouped by them."""
        s = self.settings
        return (
            s.get("io_method", "worker"),
            s.get("shared_buffers", 16384),
            s.get("io_max_combine_limit", 16),
        )


# ------------------------------------------------------------------------------ relations
RELATIONS: dict[str, RelationSpec] = {
    # 2000 blocks: below NBuffers / 4 = 4096 with the default pool, so no ring.
    "small": RelationSpec(name="small", nblocks=2000, tuples_per_page=3, tuple_width=2000, seed=1),
    # 5000 blocks: above 4096, so sequential scans use a BULKREAD ring.
    "bulk": RelationSpec(name="bulk", nblocks=5000, tuples_per_page=3, tuple_width=2000, seed=2),
    # Just over 131072 blocks: the 1 GiB segment boundary lies inside the table.
    "segment": RelationSpec(
        name="seg",
        nblocks=131_080,
        tuples_per_page=1,
        tuple_width=5000,
        all_visible_fraction=1.0,
        all_frozen_fraction=1.0,
        seed=3,
    ),
    # Variable line pointers per page: BERNOULLI chooses tuples by (block, offset).
    "sample": RelationSpec(
        name="samp", nblocks=3000, tuples_per_page=("uniform", 1, 20), tuple_width=300, seed=4
    ),
    # One row per page, so SYSTEM_ROWS(n) reads n blocks.
    "onerow": RelationSpec(name="onerow", nblocks=1500, tuples_per_page=1, tuple_width=5000, seed=5),
    "vac_noskip": RelationSpec(
        name="vacn", nblocks=1000, tuples_per_page=20, tuple_width=300, dead_fraction=0.05, seed=6
    ),
    "vac_skip": RelationSpec(
        name="vacs",
        nblocks=1000,
        tuples_per_page=20,
        tuple_width=300,
        dead_fraction=0.05,
        all_visible_fraction=0.6,
        all_frozen_fraction=0.3,
        vm_pattern="prefix",
        seed=7,
    ),
    "vac_btree": RelationSpec(
        name="vacb", nblocks=800, tuple_width=100, dead_fraction=0.02, indexes=(IndexSpec("btree"),), seed=8
    ),
    # 270 blocks of 226 rows: 61,020 entries, 256 hash buckets (a power of two: no overflow).
    "vac_hash": RelationSpec(
        name="vach", nblocks=270, tuple_width=5, dead_fraction=0.01, indexes=(IndexSpec("hash"),), seed=9
    ),
    "indexed": RelationSpec(
        name="idx", nblocks=1000, tuple_width=100, indexes=(IndexSpec("btree"),), seed=10
    ),
    "scattered": RelationSpec(
        name="scat", nblocks=1000, tuple_width=100, indexes=(IndexSpec("btree", correlation=0.3),), seed=11
    ),
    # Never hinted: the first look at each page sets hint bits (a WAL-logged change with data
    # checksums), and a BULKREAD ring then refuses those buffers.
    "unhinted": RelationSpec(
        name="unh", nblocks=6000, tuples_per_page=10, tuple_width=500, hinted_fraction=0.0, seed=40
    ),
    "unhinted_small": RelationSpec(
        name="unh2",
        nblocks=800,
        tuples_per_page=10,
        tuple_width=500,
        hinted_fraction=0.0,
        all_visible_fraction=0.3,
        seed=41,
    ),
    "approx": RelationSpec(
        name="approx",
        nblocks=1200,
        tuples_per_page=10,
        tuple_width=500,
        all_visible_fraction=0.5,
        vm_pattern="runs",
        seed=12,
    ),
    # 4,425 blocks of 226 rows: 1,000,050 int4 keys, a 2,745-page btree of three levels whose
    # inner pages after the first each take one downlink fewer (nbtsort.c moves the last item).
    # Never vacuumed: the first VACUUM creates the visibility map by extending it.
    "fresh": RelationSpec(
        name="fresh", nblocks=10_005, tuples_per_page=3, tuple_width=2000, vacuumed=False, seed=43
    ),
    # Every page given exactly (fidelity issue item 5): rows per page cycling 20, 12, 0, 25;
    # 3 dead tuples on every 5th page; the VM in runs: 40 all-frozen, 40 all-visible-not-frozen,
    # 20 neither (runs of 32 or more are skipped; an aggressive VACUUM reads the not-frozen ones).
    "patterned": RelationSpec(
        name="pat",
        nblocks=1200,
        tuples_per_page=("cycle", 20, 12, 0, 25),
        tuple_width=200,
        dead_every=5,
        dead_per_page=3,
        vm_cycle="F" * 40 + "V" * 40 + "-" * 20,
        indexes=(IndexSpec("btree"),),
        seed=44,
    ),
    # 885 blocks of 226 rows: 200,010 int4 keys, 768 hash buckets; with PostgreSQL's hashint4
    # the 256 buckets below the split point take twice the keys and 52 of them overflow.
    "hash_build": RelationSpec(
        name="hashb",
        nblocks=885,
        tuple_width=5,
        dead_fraction=0.1,
        indexes=(IndexSpec("hash", key_hash="hashint4", overflow="build"),),
        seed=45,
    ),
    # CREATE INDEX ... (id DESC): key rank 0 is the largest id, the last heap tuple.
    "descending": RelationSpec(
        name="idxd", nblocks=1000, tuple_width=100, indexes=(IndexSpec("btree", descending=True),), seed=46
    ),
    "btree3": RelationSpec(name="bt3", nblocks=4425, tuple_width=5, indexes=(IndexSpec("btree"),), seed=42),
    # 885 blocks of 226 rows: 200,010 rows, a btree on (id % 100): 100 values of 2,000 rows, so
    # CREATE INDEX makes posting lists of 132 TIDs, nine to a leaf: 178 leaves, not 547.
    "expr": RelationSpec(
        name="expr",
        nblocks=885,
        tuple_width=5,
        indexes=(IndexSpec("btree", expression=("mod", 100)),),
        seed=47,
    ),
    # The same keys without deduplication (deduplicate_items = off): 547 leaves whose high keys
    # inside a run of equal values carry a heap TID, so inner pages take 204 downlinks, not 285.
    "expr_nodedup": RelationSpec(
        name="exprn",
        nblocks=885,
        tuple_width=5,
        indexes=(IndexSpec("btree", expression=("mod", 100), deduplicate=False),),
        seed=47,
    ),
    # 10 % of the rows deleted under a btree on (id % 100). One index a table: with two of at
    # least min_parallel_index_scan_size (512 kB) VACUUM hands one to a parallel worker, whose
    # reads are the worker's (not modelled).
    "expr_vac": RelationSpec(
        name="exprv",
        nblocks=885,
        tuple_width=5,
        dead_fraction=0.1,
        indexes=(IndexSpec("btree", expression=("mod", 100)),),
        seed=48,
    ),
    # The same under a hash index on (id % 100): the values fill at most 100 of the 768
    # buckets, each with a chain of overflow pages, which VACUUM's squeeze shortens.
    "expr_vac_hash": RelationSpec(
        name="exprh",
        nblocks=885,
        tuple_width=5,
        dead_fraction=0.1,
        indexes=(IndexSpec("hash", expression=("mod", 100), key_hash="hashint4", overflow="build"),),
        seed=48,
    ),
    # 1,000,050 rows, a btree on (id % 5000): 200 rows a value, a three-level tree of 834 leaves
    # whose inner pages hold 204 downlinks (pivots with a heap TID).
    "expr3": RelationSpec(
        name="expr3",
        nblocks=4425,
        tuple_width=5,
        indexes=(IndexSpec("btree", expression=("mod", 5000)),),
        seed=49,
    ),
}

_NO_SYNC = {"synchronize_seqscans": False}


def _seq_matrix() -> list[Scenario]:
    out: list[Scenario] = []
    small = RELATIONS["small"]
    grid = [
        ("worker", 1, 16),
        ("worker", 4, 16),
        ("worker", 8, 16),
        ("worker", 16, 16),
        ("worker", 32, 16),
        ("worker", 16, 0),
        ("worker", 16, 1),
        ("sync", 1, 16),
        ("sync", 8, 1),
        ("sync", 16, 16),
        ("sync", 32, 0),
        ("sync", 4, 0),
    ]
    for method, icl, eic in grid:
        settings: dict[str, Any] = {
            "io_method": method,
            "io_combine_limit": icl,
            "effective_io_concurrency": eic,
        }
        if icl > 16:
            settings["io_max_combine_limit"] = icl
        out.append(
            Scenario(
                f"seqscan-2000-{method}-icl{icl}-eic{eic}",
                "seqscan",
                small,
                settings,
                answer_keys=("rows",),
                fast=(method, icl, eic) in (("worker", 16, 16), ("sync", 1, 16), ("worker", 4, 16)),
            )
        )
    bulk = RELATIONS["bulk"]
    for method, icl, eic in (("worker", 16, 16), ("sync", 1, 16), ("worker", 16, 0), ("sync", 32, 16)):
        settings = {"io_method": method, "io_combine_limit": icl, "effective_io_concurrency": eic, **_NO_SYNC}
        if icl > 16:
            settings["io_max_combine_limit"] = icl
        out.append(
            Scenario(
                f"seqscan-5000-ring-{method}-icl{icl}-eic{eic}",
                "seqscan",
                bulk,
                settings,
                answer_keys=("rows",),
                note="above NBuffers/4: BULKREAD ring",
            )
        )
    out.append(
        Scenario(
            "seqscan-600-ring-pool2048",
            "seqscan",
            RelationSpec(name="pool", nblocks=600, tuples_per_page=3, tuple_width=2000, seed=13),
            {"shared_buffers": 2048, **_NO_SYNC},
            answer_keys=("rows",),
            note="pool of 2048 buffers: 600 > 512 blocks uses the ring; pin limit 11",
        )
    )
    out.append(
        Scenario(
            "seqscan-segment-crossing",
            "seqscan",
            RELATIONS["segment"],
            dict(_NO_SYNC),
            answer_keys=("rows",),
            note="131,080 blocks: one read is cut at the 1 GiB boundary",
        )
    )
    return out


def _sampling() -> list[Scenario]:
    sample = RELATIONS["sample"]
    onerow = RELATIONS["onerow"]
    bulk = RELATIONS["bulk"]
    keys = ("rows", "tid_digest")
    return [
        Scenario(
            "system-5pct-repeatable",
            "tablesample_system",
            sample,
            params={"sample_percent": 5.0, "repeatable_seed": 7.0},
            answer_keys=keys,
            fast=True,
        ),
        Scenario(
            "system-0.5pct-repeatable",
            "tablesample_system",
            sample,
            params={"sample_percent": 0.5, "repeatable_seed": 42.25},
            answer_keys=keys,
        ),
        Scenario(
            "system-2pct-ring",
            "tablesample_system",
            bulk,
            _NO_SYNC,
            params={"sample_percent": 2.0, "repeatable_seed": -17.0},
            answer_keys=keys,
            note="above NBuffers/4 and >= 1 %: BULKREAD ring",
        ),
        Scenario(
            "bernoulli-10pct-repeatable",
            "tablesample_bernoulli",
            sample,
            params={"sample_percent": 10.0, "repeatable_seed": 3.0},
            answer_keys=keys,
        ),
        Scenario(
            "bernoulli-1pct-ring",
            "tablesample_bernoulli",
            bulk,
            _NO_SYNC,
            params={"sample_percent": 1.0, "repeatable_seed": 9.0},
            answer_keys=keys,
        ),
        Scenario(
            "system_rows-whole-table",
            "tablesample_system_rows",
            onerow,
            params={"rows": 2000},
            answer_keys=("rows",),
            note="more rows than the table: every block, in stride order",
        ),
        Scenario(
            "system_rows-200",
            "tablesample_system_rows",
            onerow,
            params={"rows": 200},
            answer_keys=("rows",),
            reason="backend-prng-seed",
        ),
        Scenario(
            "system_time-whole-table",
            "tablesample_system_time",
            onerow,
            params={"time_ms": 100000.0},
            answer_keys=("rows",),
            note="a limit no run reaches: every block",
        ),
        Scenario(
            "system_time-1ms",
            "tablesample_system_time",
            onerow,
            params={"time_ms": 1.0},
            reason="real-time-limit",
        ),
    ]


def _maintenance() -> list[Scenario]:
    small = RELATIONS["small"]
    return [
        Scenario(
            "analyze-every-block",
            "analyze",
            small,
            params={"statistics_target": 10},
            note="300 × 10 = 3000 ≥ 2000 blocks: the sample is the whole table",
        ),
        Scenario(
            "analyze-sampled",
            "analyze",
            RELATIONS["bulk"],
            params={"statistics_target": 2},
            reason="backend-prng-seed",
            note="600 of 5000 blocks",
        ),
        Scenario(
            "prewarm-buffer-ring-size-table",
            "pg_prewarm",
            RELATIONS["bulk"],
            answer_keys=("blocks",),
        ),
        Scenario(
            "prewarm-buffer-segment-boundary",
            "pg_prewarm",
            RELATIONS["segment"],
            params={"first_block": 131_000, "last_block": 131_079},
            answer_keys=("blocks",),
        ),
        Scenario("prewarm-read", "pg_prewarm_read", small, answer_keys=("blocks",), fast=True),
        Scenario("prewarm-prefetch", "pg_prewarm_prefetch", small, answer_keys=("blocks",)),
        Scenario(
            "vacuum-no-skippable-pages",
            "vacuum",
            RELATIONS["vac_noskip"],
            answer_keys=("scanned_pages", "tuples_deleted"),
        ),
        Scenario(
            "vacuum-skippable-pages",
            "vacuum",
            RELATIONS["vac_skip"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            fast=True,
        ),
        Scenario(
            "vacuum-btree",
            "vacuum",
            RELATIONS["vac_btree"],
            answer_keys=("scanned_pages", "tuples_deleted"),
        ),
        Scenario(
            "vacuum-hash-index",
            "vacuum",
            RELATIONS["vac_hash"],
            answer_keys=("scanned_pages", "tuples_deleted"),
        ),
        Scenario(
            "pgstattuple",
            "pgstattuple",
            RELATIONS["vac_noskip"],
            answer_keys=("table_len", "tuple_count", "dead_tuple_count"),
        ),
        Scenario(
            "pgstattuple_approx",
            "pgstattuple_approx",
            RELATIONS["approx"],
            answer_keys=("table_len", "scanned_percent"),
        ),
        Scenario(
            "pgstatindex",
            "pgstatindex",
            RELATIONS["indexed"],
            target="idx_btree",
            answer_keys=("index_size", "leaf_pages", "internal_pages", "tree_level"),
        ),
        Scenario(
            "pgstathashindex",
            "pgstathashindex",
            RELATIONS["vac_hash"],
            target="vach_hash",
            answer_keys=("bucket_pages", "overflow_pages", "bitmap_pages"),
        ),
        Scenario("verify_heapam", "verify_heapam", small, answer_keys=("corruption",), fast=True),
        Scenario(
            "bt_index_check",
            "bt_index_check",
            RELATIONS["indexed"],
            target="idx_btree",
            answer_keys=("corruption",),
        ),
    ]


def _index_scans() -> list[Scenario]:
    keys = ("rows", "tid_digest")
    return [
        Scenario(
            "bitmapscan-correlated",
            "bitmapscan",
            RELATIONS["indexed"],
            params={"key_start": 0.2, "selectivity": 0.05},
            answer_keys=keys,
            fast=True,
        ),
        Scenario(
            "bitmapscan-scattered",
            "bitmapscan",
            RELATIONS["scattered"],
            params={"key_start": 0.5, "selectivity": 0.002},
            answer_keys=keys,
        ),
        Scenario(
            "indexscan-correlated",
            "indexscan",
            RELATIONS["indexed"],
            params={"key_start": 0.6, "selectivity": 0.01},
            answer_keys=keys,
        ),
        Scenario(
            "tidrangescan",
            "tidrangescan",
            RELATIONS["small"],
            params={"start_block": 100, "end_block": 900},
            answer_keys=("rows", "tid_digest"),
        ),
    ]


def _more() -> list[Scenario]:
    """Options and states beyond the issue's list (limits, VACUUM options, hint bits, shapes)."""
    return [
        Scenario(
            "seqscan-limit-ring",
            "seqscan",
            RELATIONS["bulk"],
            dict(_NO_SYNC),
            params={"limit": 3000},
            answer_keys=("rows",),
            note="LIMIT: the stream is ended early and its look-ahead drained",
            reasons_from=(("19", "read-ahead-timing"),),
            device_from=_WAITED_DEVICE,
        ),
        Scenario(
            "vacuum-freeze",
            "vacuum",
            RELATIONS["vac_skip"],
            params={"freeze": True},
            answer_keys=("scanned_pages", "tuples_deleted"),
            note="aggressive: all-visible pages that are not all-frozen are read too",
        ),
        Scenario(
            "vacuum-index-cleanup-off",
            "vacuum",
            RELATIONS["vac_btree"],
            params={"index_cleanup": "off"},
            answer_keys=("scanned_pages", "tuples_deleted"),
        ),
        Scenario(
            "verify_heapam-skip-all-visible",
            "verify_heapam",
            RELATIONS["approx"],
            params={"skip": "all-visible"},
            answer_keys=("corruption",),
        ),
        Scenario(
            "bt_index_check-heapallindexed",
            "bt_index_check",
            RELATIONS["indexed"],
            params={"heapallindexed": True},
            target="idx_btree",
            answer_keys=("corruption",),
        ),
        Scenario(
            "pgstattuple-unhinted-ring",
            "pgstattuple",
            RELATIONS["unhinted"],
            dict(_NO_SYNC),
            answer_keys=("table_len", "tuple_count", "dead_tuple_count"),
            note="hint bits set with data checksums: every page escapes the BULKREAD ring",
        ),
        Scenario(
            "pgstattuple_approx-unhinted",
            "pgstattuple_approx",
            RELATIONS["unhinted_small"],
            answer_keys=("table_len",),
        ),
        Scenario(
            "bitmapscan-metapage-not-cached",
            "bitmapscan",
            RELATIONS["indexed"],
            params={"key_start": 0.2, "selectivity": 0.05, "metapage_cached": False},
            answer_keys=("rows", "tid_digest"),
            note="a fresh session: planning reads the btree metapage",
        ),
        Scenario(
            "indexscan-scattered",
            "indexscan",
            RELATIONS["scattered"],
            params={"key_start": 0.3, "selectivity": 0.002},
            answer_keys=("rows", "tid_digest"),
        ),
        Scenario(
            "bitmapscan-leaf-boundary",
            "bitmapscan",
            RELATIONS["scattered"],
            params={"key_start": 0.1, "selectivity": 0.2, "work_mem_kb": 64},
            answer_keys=("rows", "tid_digest"),
            note="the key range ends at 18300 = 50 × 366, a leaf boundary of the server's btree",
        ),
    ]


_CURSOR_KEYS = ("rows", "rows_per_command", "pins_per_command")
_CURSOR_SCRIPTS = {
    # Forward, back over a direction change, forward again, then the portal's absolute moves:
    # MOVE ABSOLUTE far ahead moves relative, FETCH ABSOLUTE -10 runs to the end first.
    "mixed": "FETCH 300; FETCH BACKWARD 200; FETCH FORWARD 50; MOVE ABSOLUTE 1000; "
    "FETCH ABSOLUTE -10; FETCH BACKWARD 5; FETCH ALL; FETCH BACKWARD 7; CLOSE",
    # FETCH ABSOLUTE near the start rewinds (heap_rescan); MOVE BACKWARD ALL rewinds too.
    "rewind": "FETCH 600; FETCH ABSOLUTE 100; FETCH PRIOR; FETCH 0; MOVE BACKWARD ALL; FETCH NEXT; "
    "FETCH RELATIVE 40; FETCH RELATIVE -3; FETCH LAST; FETCH FIRST; COMMIT",
    # Backward from the end of a ring-sized table, one-block reads; a ROLLBACK drops the pins.
    "backward-ring": "FETCH 4500; FETCH BACKWARD 3000; MOVE FORWARD 200; FETCH BACKWARD 10; ROLLBACK",
    # A ROLLBACK with the look-ahead in flight: nothing drained, the issued reads complete.
    "rollback": "FETCH 1000; ROLLBACK",
    "from-the-end": "FETCH LAST; FETCH BACKWARD 2500; FETCH 30; MOVE FORWARD ALL; FETCH BACKWARD 3; CLOSE",
}


def _cursor_scenarios() -> list[Scenario]:
    """Scroll cursors in both directions (fidelity issue item 4), io_method sync and worker."""
    out = []
    for method in ("sync", "worker"):
        for name, relation, script in (
            ("mixed", "small", "mixed"),
            ("rewind", "small", "rewind"),
            ("backward-ring", "bulk", "backward-ring"),
            ("from-the-end", "bulk", "from-the-end"),
            ("rollback", "small", "rollback"),
        ):
            out.append(
                Scenario(
                    f"cursor-{name}-{method}",
                    "cursor",
                    RELATIONS[relation],
                    {"io_method": method, **_NO_SYNC},
                    params={"commands": _CURSOR_SCRIPTS[script]},
                    answer_keys=_CURSOR_KEYS,
                    fast=(name, method) == ("mixed", "worker"),
                    relation_reads=name == "rollback",
                    note="pins: pages of the table pinned after each command",
                    reasons_from=(("19", "read-ahead-timing"),) if method != "sync" else (),
                    device_from=_WAITED_DEVICE if method != "sync" else (),
                )
            )
    return out


def _fidelity_issue() -> list[Scenario]:
    """The model misses the fidelity issue (14) lists, each a scenario the fix made agree."""
    return [
        Scenario(
            "vacuum-first-creates-vm",
            "vacuum",
            RELATIONS["fresh"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="vm_extend's new page is an extension (ExtendBufferedRelTo), not a block read",
        ),
        *_cursor_scenarios(),
        Scenario(
            "vacuum-hash-real-layout",
            "vacuum",
            RELATIONS["hash_build"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="10 % of rows deleted; the squeeze frees the overflow pages the server frees",
        ),
        Scenario(
            "pgstathashindex-real-layout",
            "pgstathashindex",
            RELATIONS["hash_build"],
            target="hashb_hash",
            answer_keys=("bucket_pages", "overflow_pages", "bitmap_pages", "live_items", "dead_items"),
        ),
        Scenario(
            "vacuum-patterned",
            "vacuum",
            RELATIONS["patterned"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="the runs of 40 all-visible pages are skipped; dead tuples every 5th page",
        ),
        Scenario(
            "vacuum-patterned-freeze",
            "vacuum",
            RELATIONS["patterned"],
            params={"freeze": True},
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="aggressive: the all-visible-not-frozen pages are read too",
        ),
        Scenario(
            "pgstattuple-patterned",
            "pgstattuple",
            RELATIONS["patterned"],
            answer_keys=("table_len", "tuple_count", "dead_tuple_count"),
        ),
        Scenario(
            "indexscan-descending",
            "indexscan",
            RELATIONS["descending"],
            params={"key_start": 0.2, "selectivity": 0.01},
            answer_keys=("rows", "tid_digest"),
            note="a DESC btree: the range's leaves and its heap pages, in descending heap order",
        ),
        Scenario(
            "bitmapscan-descending",
            "bitmapscan",
            RELATIONS["descending"],
            params={"key_start": 0.6, "selectivity": 0.05},
            answer_keys=("rows", "tid_digest"),
        ),
        Scenario(
            "indexscan-3-level",
            "indexscan",
            RELATIONS["btree3"],
            params={"key_start": 0.75, "selectivity": 0.001},
            answer_keys=("rows", "tid_digest"),
            note="the descent reads level-1 page 8 of 10 (block 2000; 2006 if every inner page "
            "took fanout downlinks) and leaves numbered after it",
        ),
    ]


def _expression_indexes() -> list[Scenario]:
    """Indexes on an expression (fidelity issue item 3, the key function): their layout as
    CREATE INDEX builds it, posting lists included, and the scans that read them."""
    layout = (
        "tree_level",
        "index_size",
        "root_block_no",
        "internal_pages",
        "leaf_pages",
        "avg_leaf_density",
        "leaf_fragmentation",
    )
    return [
        Scenario(
            "pgstatindex-expression",
            "pgstatindex",
            RELATIONS["expr"],
            target="expr_btree",
            answer_keys=layout,
            note="posting lists of 132 TIDs, nine to a leaf: 178 leaves (547 without them)",
        ),
        Scenario(
            "pgstatindex-expression-no-dedup",
            "pgstatindex",
            RELATIONS["expr_nodedup"],
            target="exprn_btree",
            answer_keys=layout,
            note="deduplicate_items = off: 366 tuples a leaf, 24-byte pivots inside runs of equal keys",
        ),
        Scenario(
            "bt_index_check-expression",
            "bt_index_check",
            RELATIONS["expr"],
            target="expr_btree",
            answer_keys=("corruption",),
        ),
        Scenario(
            "bt_index_check-expression-3-level",
            "bt_index_check",
            RELATIONS["expr3"],
            target="expr3_btree",
            answer_keys=("corruption",),
        ),
        Scenario(
            "indexscan-expression",
            "indexscan",
            RELATIONS["expr"],
            params={"key_start": 0.05, "selectivity": 0.01},
            answer_keys=("rows", "tid_digest"),
            note="WHERE (id % 100) >= 4 AND (id % 100) < 6: two runs of equal keys, heap in TID order",
        ),
        Scenario(
            "bitmapscan-expression",
            "bitmapscan",
            RELATIONS["expr"],
            params={"key_start": 0.3, "selectivity": 0.02},
            answer_keys=("rows", "tid_digest"),
        ),
        Scenario(
            "vacuum-expression",
            "vacuum",
            RELATIONS["expr_vac"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="10 % deleted: btvacuumscan reads the posting-list leaves of (id % 100)",
        ),
        Scenario(
            "vacuum-expression-hash",
            "vacuum",
            RELATIONS["expr_vac_hash"],
            answer_keys=("scanned_pages", "tuples_deleted"),
            relation_reads=True,
            note="10 % deleted: the hash chains of (id % 100) and the squeeze's freed overflow pages",
        ),
        Scenario(
            "pgstathashindex-expression",
            "pgstathashindex",
            RELATIONS["expr_vac_hash"],
            target="exprh_hash",
            answer_keys=("bucket_pages", "overflow_pages", "bitmap_pages", "unused_pages", "live_items"),
        ),
        Scenario(
            "indexscan-expression-3-level",
            "indexscan",
            RELATIONS["expr3"],
            params={"key_start": 0.75, "selectivity": 0.0001},
            answer_keys=("rows", "tid_digest"),
            note="the descent through inner pages of 204 downlinks to the run of (id % 5000) = 3750",
        ),
    ]


SCENARIOS: tuple[Scenario, ...] = tuple(
    _seq_matrix()
    + _sampling()
    + _maintenance()
    + _index_scans()
    + _more()
    + _fidelity_issue()
    + _expression_indexes()
)


def scenario_names() -> list[str]:
    return [s.name for s in SCENARIOS]


_dups = {s.name for s in SCENARIOS if scenario_names().count(s.name) > 1}
if _dups:  # pragma: no cover - a programming error caught at import
    raise RuntimeError(f"duplicate scenario names: {sorted(_dups)}")
