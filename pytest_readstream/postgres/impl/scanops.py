"""Each scan of the model as the SQL a PostgreSQL 18 server runs for it.

The model's scans (``reference_impl.scans``) are the consumers of PostgreSQL's read path; on a
real server each is reached through one SQL statement (or a short sequence, for cursors):

=========================  =====================================================  ==========
scan                       SQL                                                    PG 18 runs
=========================  =====================================================  ==========
seqscan                    ``SELECT count(*) FROM t`` (cursor for passes/growth)  streamed
tidrangescan               ``SELECT ctid FROM t WHERE ctid >= .. AND ctid <= ..`` streamed
bitmapscan                 ``SELECT ctid FROM t WHERE id >= lo AND id < hi``      streamed
indexscan                  the same, planned as an index scan                     unstreamed
tablesample_*              ``SELECT ctid FROM t TABLESAMPLE method(arg) ...``     unstreamed
analyze                    ``ANALYZE (BUFFER_USAGE_LIMIT ..) t``                  streamed
vacuum                     ``VACUUM (options) t``                                 streamed
pgstattuple(_approx)       ``SELECT * FROM pgstattuple(_approx)('t')``            streamed /
                                                                                  unstreamed
pgstatindex, pgstathash..  ``SELECT * FROM pgstatindex('t_btree')`` ...           unstreamed
pg_prewarm(_read/_prefetch) ``SELECT pg_prewarm('t', mode, fork, first, last)``  streamed /
                                                                                  unstreamed
pg_visibility_rel, ..      ``SELECT count(*) ... FROM pg_visibility('t')`` ...    streamed /
                                                                                  unstreamed
verify_heapam              ``SELECT count(*) FROM verify_heapam('t', ...)``       streamed
bt_index_check             ``SELECT bt_index_check('t_btree', heapallindexed)``   unstreamed
cursor                     ``DECLARE c SCROLL CURSOR FOR SELECT 1 FROM t``, then  streamed
                           the ``FETCH``/``MOVE`` commands, ``CLOSE``/``COMMIT``/
                           ``ROLLBACK``
=========================  =====================================================  ==========

A range scan through an index on an expression compares the expression instead of ``id``
(``WHERE (id % 100) >= a AND (id % 100) < b``), with ``a`` and ``b`` the values of the model's
ranks (``EntryMap.key_bounds``).

The scans a server cannot run by themselves are not offered: index bulk deletes
(``btvacuumscan``, ``hashbulkdelete``, ``gistvacuumscan``) only happen inside a ``VACUUM`` (the
``vacuum`` scan covers them), ``log_newpage_range`` and ``createdb_wal_log`` have no SQL entry
point for one relation, and ``data_checksums`` exists only in the development branch.

Session state the model takes as a parameter becomes the state of the measured session: a
"metapage cached" parameter is satisfied by planning a query on the index in that session before
the measurement (the planner reads the btree metapage into the relcache, ``_bt_getrootheight``),
and its absence by measuring in a fresh session. Parameters that stand for something a server
cannot be told (the backend's PRNG seeds of ANALYZE and SYSTEM_ROWS, a preset sync-scan
location) are refused or, for seeds, recorded as not applied (``ServerOp.unapplied``). So is
``rescan_fix=True``, the model's switch for the seed thread's ``heap_rescan`` fix: the server
runs the code it was built with, and the conformance tests that ask for the fix show whether it
has it (stock 18.6 does not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from ..servers.session import PgSession
from .relbuild import BuiltRelation, UnsupportedLayout

__all__ = [
    "SERVER_VARIANTS",
    "server_variant",
    "NOT_OFFERED",
    "ServerOp",
    "OpContext",
    "server_op",
    "tid_digest",
]

#: The variant a stock PostgreSQL 18 server runs, per scan of the model.
SERVER_VARIANTS: dict[str, str] = {
    "seqscan": "streamed",
    "tidrangescan": "streamed",
    "bitmapscan": "streamed",
    "indexscan": "unstreamed",
    "tablesample_system": "unstreamed",
    "tablesample_bernoulli": "unstreamed",
    "tablesample_system_rows": "unstreamed",
    "tablesample_system_time": "unstreamed",
    "analyze": "streamed",
    "vacuum": "streamed",
    "pgstattuple": "streamed",
    "pgstattuple_approx": "unstreamed",
    "pgstatindex": "unstreamed",
    "pgstathashindex": "unstreamed",
    "pg_prewarm": "streamed",
    "pg_prewarm_read": "unstreamed",
    "pg_prewarm_prefetch": "unstreamed",
    "pg_visibility_rel": "streamed",
    "pg_visibility_map_rel": "unstreamed",
    "pg_visibility_map_summary": "unstreamed",
    "pg_check_visible": "streamed",
    "pg_check_frozen": "streamed",
    "verify_heapam": "streamed",
    "bt_index_check": "unstreamed",
    "cursor": "streamed",
}


def server_variant(scan: str, version: str = "18") -> str:
    """The variant a stock server of ``version`` (``"18"``, ``"19"``, ``"20devel"``/``"master"``)
    runs for ``scan``: the model's ``native_variant`` (what that version's source does), for the
    scans a server is offered. ``SERVER_VARIANTS`` is this table for 18."""
    from reference_impl.scans import native_variant

    if scan not in SERVER_VARIANTS:
        raise UnsupportedLayout(
            f"scan {scan!r} is not offered on a server: "
            f"{NOT_OFFERED.get(scan, 'unknown to the server implementation')}"
        )
    return native_variant(scan, version)


#: Scans of the model a server cannot run on their own, and why.
NOT_OFFERED: dict[str, str] = {
    "btvacuumscan": "a btree bulk delete only runs inside VACUUM (use the 'vacuum' scan)",
    "hashbulkdelete": "a hash bulk delete only runs inside VACUUM (use the 'vacuum' scan)",
    "gistvacuumscan": "a GiST bulk delete only runs inside VACUUM",
    "log_newpage_range": "log_newpage_range has no SQL entry point for one relation",
    "createdb_wal_log": "CREATE DATABASE copies a whole template database, not one relation",
    "data_checksums": "online data-checksum enabling exists only in the development branch",
    "autoprewarm": "autoprewarm reloads its dump in a background worker at server start, "
    "not in the measured session",
    "spgvacuumscan": "an SP-GiST bulk delete only runs inside VACUUM",
    "ginvacuum": "a GIN bulk delete only runs inside VACUUM",
    "brinvacuumcleanup": "a BRIN cleanup only runs inside VACUUM",
    "blbulkdelete": "a bloom bulk delete only runs inside VACUUM",
    "blgetbitmap": "a bloom index scan feeds a bitmap heap scan whose heap pages (the matching "
    "signatures, false positives included) the model does not compute",
}


class OpContext:
    """What a server operation needs: the measured session, the built relation, its parameters."""

    def __init__(
        self,
        session: PgSession,
        built: BuiltRelation,
        params: dict[str, Any],
        *,
        grow: Callable[[int, bool], None],
    ) -> None:
        self.session = session
        self.built = built
        self.params = params
        self.grow = grow
        self.notices: list[str] = []

    @property
    def table(self) -> sql.Identifier:
        return sql.Identifier(self.built.table)

    def execute(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        return self.session.execute(query, params)


@dataclass
class ServerOp:
    """One scan as the server runs it.

    ``run(ctx)`` executes the measured statements and returns the answer; ``prep(ctx)`` runs in
    the measured session before the measurement; ``fresh`` asks for a new session (no cached
    metapages); ``warm_runs`` is how often the catalog warm-up runs it and ``warm_catalogs`` the
    catalog relations it reads in whole (those a statement writes into); ``releases_pin`` ends the relation's horizon pin first (VACUUM must be able to
    remove the dead tuples); ``mutates`` says the relation is spent afterwards; ``target`` is the
    relation whose pages the scan visits (``None``: the table).
    """

    scan: str
    run: Callable[[OpContext], dict[str, Any]]
    prep: Callable[[OpContext], None] | None = None
    fresh: bool = False
    releases_pin: bool = False
    mutates: bool = False
    target: str | None = None
    planner: dict[str, bool] = field(default_factory=dict)
    gucs: dict[str, str] = field(default_factory=dict)
    unapplied: dict[str, Any] = field(default_factory=dict)
    warmable: bool = True
    warm_runs: int = 1
    warm_catalogs: tuple[str, ...] = ()


def tid_digest(tids: list[tuple[int, int]]) -> tuple[int, int]:
    """(rows, digest) of returned TIDs, the model's ``TidDigest`` (order-independent)."""
    from reference_impl.scans._heapfetch import TidDigest

    digest = TidDigest()
    by_block: dict[int, list[int]] = {}
    for b, o in tids:
        by_block.setdefault(b, []).append(o)
    for b, offs in by_block.items():
        digest.add(b, offs)
    return digest.count, digest.value


def _ctids(rows: list[tuple[Any, ...]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for (ctid,) in rows:
        b, o = str(ctid).strip("()").split(",")
        out.append((int(b), int(o)))
    return out


def _visit_order(tids: list[tuple[int, int]]) -> list[int]:
    """Blocks of returned tuples in the order they came (consecutive repeats merged)."""
    blocks: list[int] = []
    for b, _o in tids:
        if not blocks or blocks[-1] != b:
            blocks.append(b)
    return blocks


def _unsupported(scan: str, param: str, value: Any, why: str) -> UnsupportedLayout:
    return UnsupportedLayout(f"scan {scan!r}: parameter {param} = {value!r} cannot be run on a server: {why}")


def _refuse_explain_io(scan: str, p: dict[str, Any]) -> None:
    """``explain_io`` (19's ``EXPLAIN (ANALYZE, IO)``): not run on a server by these operations yet."""
    if p.get("explain_io"):
        raise _unsupported(
            scan,
            "explain_io",
            True,
            "the server operations do not run EXPLAIN (ANALYZE, IO) and read its IOStats back yet",
        )


def _tid_answer(rows: list[tuple[Any, ...]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    tids = _ctids(rows)
    n, digest = tid_digest(tids)
    out = {"rows": n, "tid_digest": digest, "visited_blocks": _visit_order(tids)}
    if extra:
        out.update(extra)
    return out


def _limit_clause(limit: int | None) -> sql.Composable:
    return sql.SQL("") if limit is None else sql.SQL(" LIMIT {}").format(sql.Literal(int(limit)))


def _float_literal(x: float) -> sql.Composable:
    return sql.SQL("{}::float8").format(sql.Literal(repr(float(x))))


# ------------------------------------------------------------------------------ heap scans
def _seqscan(p: dict[str, Any]) -> ServerOp:
    _refuse_explain_io("seqscan", p)
    if p.get("sync_location") is not None:
        raise _unsupported(
            "seqscan", "sync_location", p["sync_location"], "the sync-scan table cannot be set from SQL"
        )
    if p.get("slot", True) is not True:
        raise _unsupported("seqscan", "slot", p["slot"], "every SQL scan stores its tuples in a slot")
    passes = int(p.get("passes", 1))
    rescan = p.get("rescan_nblocks")
    grow = int(p.get("grow_during", 0))
    limit = p.get("limit")
    if limit is not None and passes > 1:
        raise _unsupported(
            "seqscan",
            "limit",
            limit,
            f"with passes = {passes} the cursor's LIMIT applies again after each rewind, while the "
            "model's limit ends the whole scan",
        )

    def run(ctx: OpContext) -> dict[str, Any]:
        nblocks = ctx.built.layout.nblocks
        if passes == 1 and not grow:
            q = (
                sql.SQL("SELECT count(*) FROM {}").format(ctx.table)
                if limit is None
                else sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {}{}) s").format(
                    ctx.table, _limit_clause(limit)
                )
            )
            rows = int(ctx.execute(q)[0][0])
            return {"rows": rows, "rows_per_pass": [rows], "nblocks_at_start": nblocks}
        if rescan is not None and rescan < nblocks:
            raise _unsupported(
                "seqscan",
                "rescan_nblocks",
                rescan,
                "a table cannot shrink between rescans of one statement: the scan's lock keeps "
                "VACUUM from truncating it",
            )
        return _cursor_seqscan(ctx, passes, rescan, grow, limit)

    # rescan_fix selects the model's heap_rescan (the seed thread's fix or PostgreSQL 18's code);
    # a server runs the heap_rescan it was built with, so asking for the fix is recorded, not
    # refused: the outcome then shows what this server does.
    unapplied = {"rescan_fix": True} if p.get("rescan_fix") else {}
    return ServerOp(
        "seqscan",
        run,
        prep=_planned_prep,
        mutates=bool(grow or (rescan is not None and rescan > 0)),
        unapplied=unapplied,
        planner=_SEQ_PLANNER,
    )


def _cursor_seqscan(
    ctx: OpContext, passes: int, rescan: int | None, grow: int, limit: int | None
) -> dict[str, Any]:
    """Several passes (rewinds) or growth during the scan: a scrollable cursor in one transaction."""
    s = ctx.session
    nblocks = ctx.built.layout.nblocks
    per_pass: list[int] = []
    total = 0
    s.execute("BEGIN")
    try:
        s.execute(
            sql.SQL("DECLARE readstream_c SCROLL CURSOR FOR SELECT 1 FROM {}{}").format(
                ctx.table, _limit_clause(limit)
            )
        )
        for p in range(passes):
            if p > 0:
                if rescan is not None and rescan > nblocks:
                    ctx.grow(rescan - nblocks, False)
                    nblocks = rescan
                s.execute("MOVE ABSOLUTE 0 IN readstream_c")  # ExecutorRewind: heap_rescan
            moved = 0
            if grow and p == 0:
                moved += _move(s, "MOVE FORWARD 1 IN readstream_c")
                ctx.grow(grow, True)
            moved += _move(s, "MOVE FORWARD ALL IN readstream_c")
            per_pass.append(moved)
            total += moved
        s.execute("CLOSE readstream_c")
        s.execute("COMMIT")
    except BaseException:
        _rollback(s)
        raise
    return {"rows": total, "rows_per_pass": per_pass, "nblocks_at_start": ctx.built.layout.nblocks}


def _move(s: PgSession, statement: str) -> int:
    cur = s.conn.execute(statement)
    return int(cur.rowcount)


def _rollback(s: PgSession) -> None:
    try:
        s.conn.rollback()
        s.execute("ROLLBACK")
    except Exception:  # the connection may be gone; the caller reports the original error
        pass


def _tidrangescan(p: dict[str, Any]) -> ServerOp:
    _refuse_explain_io("tidrangescan", p)

    def run(ctx: OpContext) -> dict[str, Any]:
        lo = f"({int(p.get('start_block', 0))},{int(p.get('start_offset', 1))})"
        cond = sql.SQL("ctid >= {}::tid").format(sql.Literal(lo))
        if p.get("end_block") is not None:
            hi = f"({int(p['end_block'])},{int(p.get('end_offset', 2048))})"
            cond = sql.SQL("{} AND ctid <= {}::tid").format(cond, sql.Literal(hi))
        rows = ctx.execute(
            sql.SQL("SELECT ctid FROM {} WHERE {}{}").format(ctx.table, cond, _limit_clause(p.get("limit")))
        )
        return _tid_answer(rows)

    return ServerOp(
        "tidrangescan", run, prep=_planned_prep, planner={"enable_tidscan": True, "enable_seqscan": False}
    )


def _range_index(ctx: OpContext) -> tuple[int, Any] | None:
    """(position, spec) of the btree a range scan uses: ``index`` by name, else the first btree."""
    spec = ctx.built.spec
    name = ctx.params.get("index")
    for position, ispec in enumerate(spec.indexes):
        if ispec.kind == "btree" and (name is None or ispec.default_name(spec.name) == name):
            return position, ispec
    return None


def _key_bounds(ctx: OpContext) -> tuple[int, int]:
    from reference_impl.scans._heapfetch import key_range

    total = int(ctx.built.layout.nitems.sum())
    lo, hi = key_range(
        total, float(ctx.params.get("key_start", 0.0)), float(ctx.params.get("selectivity", 0.01))
    )
    chosen = _range_index(ctx)
    if chosen is not None and chosen[1].expression is not None:
        # The model's own index order gives the values of ranks lo and hi - 1.
        from reference_impl.relations.build import make_index_content

        position, ispec = chosen
        content = make_index_content(
            ctx.built.layout.content, ispec, ispec.default_name(ctx.built.spec.name), position
        )
        return content.entries.key_bounds(lo, hi)
    btrees = [i for i in ctx.built.spec.indexes if i.kind == "btree"]
    if btrees and btrees[0].descending:
        # Ranks [lo, hi) in DESC index order hold the keys T - hi .. T - lo - 1.
        return total - hi, total - lo
    return lo, hi


def _range_key(ctx: OpContext) -> sql.Composable:
    """What the range condition compares: ``id``, or the index's expression (``(id % 100)``)."""
    from reference_impl.relations.expression import expression_sql

    chosen = _range_index(ctx)
    if chosen is not None and chosen[1].expression is not None:
        return sql.SQL(expression_sql(chosen[1].expression))
    return sql.SQL("id")


def _planned_prep(ctx: OpContext) -> None:
    """Plan a statement on the table before the measurement: planning reads each btree index's
    metapage into the backend's relcache (``_bt_getrootheight`` in ``get_relation_info``), a
    read the model's scans, which start at the executor, do not make; the index scans' own
    ``metapage_cached`` means the same backend state. Nothing to do without a btree."""
    if any(i.kind == "btree" for i in ctx.built.spec.indexes):
        ctx.execute(sql.SQL("EXPLAIN SELECT 1 FROM {}").format(ctx.table))


# A sequential scan of a table with indexes: the planner must not choose one of them instead.
_SEQ_PLANNER = {
    "enable_indexscan": False,
    "enable_indexonlyscan": False,
    "enable_bitmapscan": False,
    "enable_tidscan": False,
}


def _index_prep(kind: str) -> Callable[[OpContext], None]:
    def prep(ctx: OpContext) -> None:
        # Planning reads the btree metapage into this backend's relcache (_bt_getrootheight).
        ctx.execute(sql.SQL("EXPLAIN SELECT ctid FROM {} WHERE id >= 0").format(ctx.table))

    return prep


def _index_heap_scan(scan: str, p: dict[str, Any]) -> ServerOp:
    _refuse_explain_io(scan, p)
    bitmap = scan == "bitmapscan"
    planner = {
        "enable_seqscan": False,
        "enable_indexonlyscan": False,
        "enable_tidscan": False,
        "enable_bitmapscan": bitmap,
        "enable_indexscan": not bitmap,
    }
    gucs = {"work_mem": f"{int(p.get('work_mem_kb', 4096))}kB"} if bitmap else {}
    cached = bool(p.get("metapage_cached", True))

    def run(ctx: OpContext) -> dict[str, Any]:
        lo, hi = _key_bounds(ctx)
        if p.get("index") is not None:
            ctx.built.index_for("btree", p["index"])
        key = _range_key(ctx)
        rows = ctx.execute(
            sql.SQL("SELECT ctid FROM {} WHERE {} >= {} AND {} < {}{}").format(
                ctx.table, key, sql.Literal(lo), key, sql.Literal(hi), _limit_clause(p.get("limit"))
            )
        )
        return _tid_answer(rows, {"key_range": [lo, hi]})

    return ServerOp(
        scan, run, prep=_index_prep("btree") if cached else None, fresh=not cached, planner=planner, gucs=gucs
    )


# ------------------------------------------------------------------------------ sampling
def _sample(scan: str, p: dict[str, Any]) -> ServerOp:
    method = {
        "tablesample_system": "SYSTEM",
        "tablesample_bernoulli": "BERNOULLI",
        "tablesample_system_rows": "SYSTEM_ROWS",
        "tablesample_system_time": "SYSTEM_TIME",
    }[scan]
    unapplied: dict[str, Any] = {}
    arg: sql.Composable
    rep: sql.Composable
    if scan in ("tablesample_system", "tablesample_bernoulli"):
        arg = _float_literal(float(p.get("sample_percent", 1.0)))
        if p.get("repeatable_seed") is not None:
            rep = sql.SQL(" REPEATABLE ({})").format(_float_literal(float(p["repeatable_seed"])))
        else:
            rep = sql.SQL("")
            unapplied["seed"] = p.get("seed", 0)
        if p.get("sync_location") is not None:
            raise _unsupported(
                scan, "sync_location", p["sync_location"], "the sync-scan table cannot be set from SQL"
            )
    elif scan == "tablesample_system_rows":
        arg = sql.Literal(int(p.get("rows", 100)))
        rep = sql.SQL("")
        unapplied["seed"] = p.get("seed", 0)
    else:
        arg = _float_literal(float(p.get("time_ms", 100.0)))
        rep = sql.SQL("")
        unapplied["seed"] = p.get("seed", 0)

    def run(ctx: OpContext) -> dict[str, Any]:
        rows = ctx.execute(
            sql.SQL("SELECT ctid FROM {} TABLESAMPLE {} ({}){}{}").format(
                ctx.table, sql.SQL(method), arg, rep, _limit_clause(p.get("limit"))
            )
        )
        out = _tid_answer(rows, {"nblocks": ctx.built.layout.nblocks})
        if scan in ("tablesample_system_rows", "tablesample_system_time"):
            out.update(_stride_plan(out["visited_blocks"], ctx.built.layout.nblocks))
        return out

    return ServerOp(scan, run, prep=_planned_prep, unapplied=unapplied)


def _stride_plan(visited: list[int], nblocks: int) -> dict[str, Any]:
    """(firstblock, step) of a stride order, inferred from its first two blocks (sampling.md §8)."""
    if len(visited) < 2 or nblocks < 2:
        return {"firstblock": None, "step": None}
    step = (visited[1] - visited[0]) % nblocks
    first = (visited[0] - step) % nblocks
    return {"firstblock": first, "step": step}


# ------------------------------------------------------------------------------ maintenance
def _analyze(p: dict[str, Any]) -> ServerOp:
    gucs: dict[str, str] = {}
    if p.get("statistics_target") is not None:
        gucs["default_statistics_target"] = str(int(p["statistics_target"]))
    opts = ""
    if p.get("buffer_usage_limit_kb") is not None:
        opts = f"(BUFFER_USAGE_LIMIT '{int(p['buffer_usage_limit_kb'])}kB') "

    def run(ctx: OpContext) -> dict[str, Any]:
        ctx.execute(sql.SQL("ANALYZE " + opts + "{}").format(ctx.table))
        return {}

    unapplied: dict[str, Any] = {k: p[k] for k in ("sampler_seed", "reservoir_seed") if k in p}
    # ANALYZE writes new pg_statistic rows to whichever page its free-space map offers; after a
    # restart that page may not have been read yet (a catalog read in the measurement).
    return ServerOp("analyze", run, gucs=gucs, unapplied=unapplied, warm_catalogs=("pg_statistic",))


_VACUUM_BOOLS = (
    ("disable_page_skipping", "DISABLE_PAGE_SKIPPING"),
    ("freeze", "FREEZE"),
    ("truncate", "TRUNCATE"),
)


def _vacuum(p: dict[str, Any], version: str = "18") -> ServerOp:
    if p.get("failsafe_at_check") is not None:
        raise _unsupported(
            "vacuum",
            "failsafe_at_check",
            p["failsafe_at_check"],
            "a server's failsafe engages from the table's relfrozenxid age, which the builder does not set",
        )
    for name in ("eager_first_region_end", "dead_items_max"):
        if p.get(name) is not None:
            why = (
                "the first eager-scan region's end is drawn from the backend's PRNG"
                if name == "eager_first_region_end"
                else "the dead-TID store's capacity is maintenance_work_mem bytes, not a TID count"
            )
            raise _unsupported("vacuum", name, p[name], why)
    from reference_impl.versions import VERSIONS, canonical_version

    streams_hash = VERSIONS.index(canonical_version(version)) >= VERSIONS.index("19")
    if p.get("hash_stream") is not None and bool(p["hash_stream"]) != streams_hash:
        raise _unsupported(
            "vacuum",
            "hash_stream",
            p["hash_stream"],
            "PostgreSQL 18 reads hash buckets one page at a time"
            if not streams_hash
            else f"PostgreSQL {version} streams the hash bucket pages",
        )
    # PARALLEL 0: with two indexes above min_parallel_index_scan_size VACUUM vacuums them in
    # parallel workers, other backends whose reads the measured session does not see (a
    # 1,200-page table with a btree and a hash index: 205 of the model's 1,229 reads measured).
    # The model vacuums its indexes in the backend itself.
    opts = ["VERBOSE", "PARALLEL 0"]
    for name, option in _VACUUM_BOOLS:
        if name in p:
            opts.append(f"{option} {'true' if p[name] else 'false'}")
    if "index_cleanup" in p:
        opts.append(f"INDEX_CLEANUP {str(p['index_cleanup']).upper()}")
    if p.get("buffer_usage_limit") is not None:
        opts.append(f"BUFFER_USAGE_LIMIT '{int(p['buffer_usage_limit'])}kB'")
    gucs: dict[str, str] = {}
    if p.get("max_eager_freeze_failure_rate") is not None:
        gucs["vacuum_max_eager_freeze_failure_rate"] = repr(float(p["max_eager_freeze_failure_rate"]))
    hash_cached = bool(p.get("hash_metapage_cached", False))

    def prep(ctx: OpContext) -> None:
        # Any use of the hash index caches its metapage in this backend (_hash_getcachedmetap).
        ctx.execute(sql.SQL("SET enable_seqscan = off"))
        ctx.execute(sql.SQL("SELECT count(*) FROM {} WHERE id = -1").format(ctx.table))
        ctx.execute(sql.SQL("RESET enable_seqscan"))

    def run(ctx: OpContext) -> dict[str, Any]:
        ctx.execute(sql.SQL("VACUUM (" + ", ".join(opts) + ") {}").format(ctx.table))
        return _vacuum_answer(ctx.notices)

    return ServerOp(
        "vacuum",
        run,
        prep=prep if hash_cached else None,
        fresh=not hash_cached,
        releases_pin=True,
        mutates=True,
        gucs=gucs,
        warmable=False,
    )


def _vacuum_answer(notices: list[str]) -> dict[str, Any]:
    """The figures of ``VACUUM (VERBOSE)``'s report that the model's answer also has."""
    import re

    text = "\n".join(notices)
    out: dict[str, Any] = {}
    m = re.search(r"pages: (\d+) removed, (\d+) remain, (\d+) scanned", text)
    if m:
        out["removed_pages"] = int(m.group(1))
        out["new_rel_pages"] = int(m.group(2))
        out["scanned_pages"] = int(m.group(3))
    m = re.search(r"tuples: (\d+) removed, (\d+) remain", text)
    if m:
        out["tuples_deleted"] = int(m.group(1))
        out["live_tuples"] = int(m.group(2))
    m = re.search(r"index scan (not needed|needed|bypassed)", text)
    if m:
        out["index_scan"] = m.group(1)
    m = re.search(
        r"(\d+) pages? from table \(([\d.]+)% of total\) (?:had|have) (\d+) dead item identifiers", text
    )
    if m:
        out["lpdead_item_pages"] = int(m.group(1))
        out["lpdead_items"] = int(m.group(3))
    out["verbose"] = text
    return out


def _function_row(query: Callable[[OpContext], sql.Composed]) -> Callable[[OpContext], dict[str, Any]]:
    def run(ctx: OpContext) -> dict[str, Any]:
        cur = ctx.session.conn.execute(query(ctx))
        row = cur.fetchone()
        names = [d.name for d in cur.description or ()]
        return {
            n: (float(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, int) else v)
            for n, v in zip(names, row or ())
        }

    return run


def _pgstat(scan: str, p: dict[str, Any]) -> ServerOp:
    if scan == "pgstattuple":
        return ServerOp(
            scan,
            _function_row(
                lambda c: sql.SQL("SELECT * FROM pgstattuple({}::regclass)").format(
                    sql.Literal(c.built.table)
                )
            ),
        )
    if scan == "pgstattuple_approx":
        relpages = int(p.get("relpages", 0))
        reltuples = float(p.get("reltuples", -1.0))

        def prep(ctx: OpContext) -> None:
            # statapprox_heap extrapolates the live tuples from pg_class (vac_estimate_reltuples).
            ctx.execute(
                "UPDATE pg_class SET relpages = %s, reltuples = %s WHERE oid = %s::regclass",
                (relpages, reltuples, ctx.built.table),
            )

        return ServerOp(
            scan,
            _function_row(
                lambda c: sql.SQL("SELECT * FROM pgstattuple_approx({}::regclass)").format(
                    sql.Literal(c.built.table)
                )
            ),
            prep=prep,
        )
    kind = "btree" if scan == "pgstatindex" else "hash"
    return ServerOp(
        scan,
        _function_row(
            lambda c: sql.SQL("SELECT * FROM {}({}::regclass)").format(
                sql.Identifier(scan), sql.Literal(c.built.index_for(kind))
            )
        ),
        target=kind,
    )


def _prewarm(scan: str, p: dict[str, Any]) -> ServerOp:
    mode = {"pg_prewarm": "buffer", "pg_prewarm_read": "read", "pg_prewarm_prefetch": "prefetch"}[scan]
    fork = str(p.get("fork", "main"))

    def run(ctx: OpContext) -> dict[str, Any]:
        first = p.get("first_block")
        last = p.get("last_block")
        blocks = ctx.execute(
            sql.SQL("SELECT pg_prewarm({}::regclass, {}, {}, {}, {})").format(
                sql.Literal(ctx.built.table),
                sql.Literal(mode),
                sql.Literal(fork),
                sql.Literal(None if first is None else int(first)),
                sql.Literal(None if last is None else int(last)),
            )
        )[0][0]
        return {"blocks": int(blocks), "fork": fork}

    return ServerOp(scan, run)


def _verify_heapam(p: dict[str, Any]) -> ServerOp:
    skip = str(p.get("skip", "none"))

    def run(ctx: OpContext) -> dict[str, Any]:
        first = p.get("first_block")
        last = p.get("last_block")
        rows = ctx.execute(
            sql.SQL(
                "SELECT count(*) FROM verify_heapam({}::regclass, on_error_stop => false, check_toast => false, "
                "skip => {}, startblock => {}, endblock => {})"
            ).format(
                sql.Literal(ctx.built.table),
                sql.Literal(skip),
                sql.Literal(None if first is None else int(first)),
                sql.Literal(None if last is None else int(last)),
            )
        )
        return {"corruption": int(rows[0][0])}

    return ServerOp("verify_heapam", run)


def _bt_index_check(p: dict[str, Any]) -> ServerOp:
    cached = bool(p.get("metapage_cached", False))
    heapall = bool(p.get("heapallindexed", False))

    def prep(ctx: OpContext) -> None:
        ctx.execute(sql.SQL("EXPLAIN SELECT ctid FROM {} WHERE id >= 0").format(ctx.table))

    def run(ctx: OpContext) -> dict[str, Any]:
        idx = ctx.built.index_for("btree", p.get("index"))
        ctx.execute(
            sql.SQL("SELECT bt_index_check({}::regclass, {})").format(sql.Literal(idx), sql.Literal(heapall))
        )
        return {"index": idx, "corruption": 0}

    return ServerOp("bt_index_check", run, prep=prep if cached else None, fresh=not cached, target="btree")


def _pg_visibility(scan: str) -> ServerOp:
    """``contrib/pg_visibility``: the same counts the model answers."""
    queries = {
        "pg_visibility_rel": "SELECT count(*) AS blocks, count(*) FILTER (WHERE all_visible) AS all_visible, "
        "count(*) FILTER (WHERE all_frozen) AS all_frozen, count(*) FILTER (WHERE pd_all_visible) "
        "AS pd_all_visible FROM pg_visibility({}::regclass)",
        "pg_visibility_map_rel": "SELECT count(*) AS blocks, count(*) FILTER (WHERE all_visible) AS all_visible, "
        "count(*) FILTER (WHERE all_frozen) AS all_frozen FROM pg_visibility_map({}::regclass)",
        "pg_visibility_map_summary": "SELECT * FROM pg_visibility_map_summary({}::regclass)",
        "pg_check_visible": "SELECT count(*) AS corrupt_items FROM pg_check_visible({}::regclass)",
        "pg_check_frozen": "SELECT count(*) AS corrupt_items FROM pg_check_frozen({}::regclass)",
    }
    query = queries[scan]
    return ServerOp(scan, _function_row(lambda c: sql.SQL(query).format(sql.Literal(c.built.table))))


def server_op(scan: str, params: dict[str, Any], version: str = "18") -> ServerOp:
    """The server operation of ``scan`` with ``params`` on a server of ``version``
    (:class:`UnsupportedLayout` if impossible)."""
    if scan in NOT_OFFERED:
        raise UnsupportedLayout(f"scan {scan!r} is not offered on a server: {NOT_OFFERED[scan]}")
    if scan == "seqscan":
        return _seqscan(params)
    if scan == "tidrangescan":
        return _tidrangescan(params)
    if scan in ("bitmapscan", "indexscan"):
        return _index_heap_scan(scan, params)
    if scan.startswith("tablesample_"):
        return _sample(scan, params)
    if scan == "analyze":
        return _analyze(params)
    if scan == "vacuum":
        return _vacuum(params, version)
    if scan in ("pgstattuple", "pgstattuple_approx", "pgstatindex", "pgstathashindex"):
        return _pgstat(scan, params)
    if scan.startswith("pg_prewarm"):
        return _prewarm(scan, params)
    if scan.startswith(("pg_visibility", "pg_check_")):
        return _pg_visibility(scan)
    if scan == "verify_heapam":
        return _verify_heapam(params)
    if scan == "bt_index_check":
        return _bt_index_check(params)
    if scan == "cursor":
        return _cursor(params)
    raise UnsupportedLayout(
        f"scan {scan!r} is unknown to the server implementation: allowed {', '.join(sorted(SERVER_VARIANTS))}"
    )


# The AIO handles of a backend whose read has not finished yet (pg_aios, PostgreSQL 18).
_AIO_PENDING = (
    "SELECT count(*) FROM pg_aios WHERE pid = %s AND state NOT IN ('COMPLETED_SHARED', 'COMPLETED_LOCAL')"
)
# Polls of pg_aios, 5 ms apart: a read still in flight after about a minute (even on a loaded
# machine) is a server problem, reported with the backend's pid rather than waited for forever.
_AIO_POLLS = 12_000


def _wait_for_reads(ctx: OpContext) -> None:
    """Poll until the measured backend has no read in flight (``io_method=worker``: a look-ahead
    page shows in ``pg_buffercache`` once its read completed)."""
    import time

    db = ctx.session.database
    pid = ctx.session.pid
    for _ in range(_AIO_POLLS):
        with db.server._guard("waiting for the cursor's reads"):
            pending = int(db.observer().execute(_AIO_PENDING, (pid,)).fetchone()[0])  # type: ignore[index]
        if pending == 0:
            return
        time.sleep(0.005)
    raise RuntimeError(f"backend {pid} still has reads in flight after {_AIO_POLLS} polls of pg_aios")


def _cursor(p: dict[str, Any]) -> ServerOp:
    from reference_impl.scans.cursor import parse_commands

    commands = parse_commands(str(p.get("commands", "FETCH ALL; CLOSE")))

    def run(ctx: OpContext) -> dict[str, Any]:
        from ..servers.observe import pinned_buffers

        s = ctx.session
        rows_per_command: list[int] = []
        pins_per_command: list[int] = []
        fetched = 0
        s.execute("BEGIN")
        try:
            s.execute(sql.SQL("DECLARE readstream_c SCROLL CURSOR FOR SELECT 1 FROM {}").format(ctx.table))
            for c in commands:
                n = 0
                if c.kind == "FETCH":
                    n = len(s.execute(c.text + " IN readstream_c"))
                    fetched += n
                elif c.kind == "MOVE":
                    n = _move(s, c.text + " IN readstream_c")
                elif c.kind == "CLOSE":
                    s.execute("CLOSE readstream_c")
                    s.execute("COMMIT")
                elif c.kind == "COMMIT":
                    s.execute("COMMIT")
                else:
                    s.execute("ROLLBACK")
                    # Under io_method=sync the abort leaves staged look-ahead buffers mapped but
                    # invalid: the next eviction of the relation must repair them.
                    s.server._note_abort()
                _wait_for_reads(ctx)
                rows_per_command.append(n)
                pins_per_command.append(
                    sum(1 for b in pinned_buffers(s, ctx.built.table) if b.fork == "main")
                )
        except BaseException:
            _rollback(s)
            raise
        return {
            "rows": fetched,
            "rows_per_command": rows_per_command,
            "pins_per_command": pins_per_command,
            "commands": [c.text for c in commands],
        }

    # No warm-up on the relation itself: a cursor stopped early leaves a sync-scan position. A
    # ROLLBACK under io_method=sync leaves mapped-but-invalid buffers: the relation is rebuilt.
    rolls_back = any(c.kind == "ROLLBACK" for c in commands)
    return ServerOp(
        "cursor", run, prep=_planned_prep, warmable=False, mutates=rolls_back, planner=_SEQ_PLANNER
    )
