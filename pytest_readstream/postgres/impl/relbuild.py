"""Building a ``RelationSpec`` on a real server, page for page as the model lays it out.

The model describes a table by a few fields and generates each page's contents from a seed
(``reference_impl.relations``). A fidelity check is only meaningful if the server's table has the
same pages: the same number of heap blocks, the same line pointers on each block, the same dead
tuples at the same offsets, the same visibility-map bits, and indexes of the same size whose
leaves point at the same heap tuples. This module asks the model for every page and then writes
that page with ordinary SQL:

* **Line pointers per page.** ``INSERT`` fills a page while the next row fits
  (``RelationGetBufferForTuple``). For a page that must hold ``k`` tuples the builder inserts
  ``k − 1`` rows of the spec's width and then one *filler* row as wide as the remaining space
  allows, so nothing more fits and the next row starts a new page. Only ``MAXALIGN(t_len)``
  matters for placement, so rows are ``(id int4, pad text STORAGE PLAIN)`` with a pad length
  chosen for the aligned size (a 1-byte varlena header up to 126 bytes, 4 bytes beyond). The
  table is created with fill factor 100 (the spec's fill factor is set afterwards: it then only
  changes the opportunistic-pruning threshold). A page that must be empty gets one filler that is
  deleted before ``VACUUM`` removes it and truncates its line-pointer array.
* **Keys.** ``id`` is the tuple's key rank in the model's indexes (the tuple number when the
  indexes follow heap order), so ``CREATE INDEX ... (id)`` builds leaves holding exactly the
  model's TIDs, and an index on an expression (``IndexSpec.expression``, e.g. ``((id % 100))``)
  holds the expression's values of the same keys. Indexes are built before any tuple is deleted: dead tuples keep their entries.
* **Visibility map.** ``VACUUM (FREEZE)`` sets every page all-visible and all-frozen. A page that
  must be all-visible but not all-frozen gets one tuple locked ``FOR KEY SHARE``
  (``heap_lock_tuple`` clears only the all-frozen bit); a page that must not be all-visible gets
  its dead tuples deleted, or, without dead tuples, one ``DELETE`` rolled back (``heap_delete``
  clears both bits and leaves an aborted ``xmax``). No ``pg_visibility`` is needed; the result is
  checked by decoding the VM fork with ``pageinspect``.
* **Hint bits and pruning.** Pages the spec calls hinted are read once after the changes (a TID
  scan: it sets hint bits and never prunes), then the cluster is checkpointed so they are clean.
  On PostgreSQL 18 a table whose every page is to be hinted gets one sequential scan instead.
  From 19 on it never does: ``heap_insert`` and ``heap_delete`` mark the page prunable
  (``PageSetPrunable``), and a read-only sequential, index or bitmap scan of a full page then
  prunes it *and sets it all-visible in the VM* (``heap_page_prune_opt`` with
  ``HEAP_PAGE_PRUNE_SET_VM``, pruneheap.c), which would give a never-vacuumed table VM bits
  the model does not have. A TID fetch (``heap_fetch``) prunes nothing on any version.
  Dead tuples must stay unpruned until the measured statement: a scan that sees a full page
  whose dead tuples are older than every snapshot prunes it (``heap_page_prune_opt``). A
  relation with dead tuples therefore keeps a *horizon pin*: an idle ``REPEATABLE READ``
  transaction whose snapshot predates the deletes. It must be released before a ``VACUUM`` (and
  before building another relation in the same database, whose ``VACUUM (FREEZE)`` it would
  hold back); the relation is then spent (see ``BuiltRelation.spent``).

``verify_layout`` compares the result with the model: fork sizes, line pointers of every page,
live and dead tuple counts (``pgstattuple``), VM bits and index sizes, including the free-space
map a table filled by ``INSERT`` has even if it was never vacuumed
(``RecordAndGetPageWithFreeSpace`` creates it when a page fills; the model has it too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from ..errors import PgHarnessError
from ..servers.observe import evict
from ..servers.scratch import NO_AUTOVACUUM, ScratchDatabase

__all__ = [
    "SCAN_SETS_VM_VERSION_NUM",
    "BuiltRelation",
    "LayoutMismatch",
    "ModelLayout",
    "UnsupportedLayout",
    "build_relation_on_server",
    "model_layout",
    "server_names",
    "verify_layout",
]

_BLCKSZ = 8192
#: From this ``server_version_num`` on, a read-only scan of a full page that an insert or delete
#: marked prunable sets the page all-visible in the VM (``heap_page_prune_opt``, 19's pruneheap.c).
SCAN_SETS_VM_VERSION_NUM = 190000
_PAGE_SPACE = _BLCKSZ - 24  # page header; heap pages have no special space
_ITEM_ID = 4
_MAX_ITEMS = 291


class UnsupportedLayout(PgHarnessError):
    """A ``RelationSpec`` the builder cannot reproduce on a server (the message says which field)."""


class LayoutMismatch(PgHarnessError):
    """The server's table differs from the model's after building (the message lists what)."""

    readstream_harness_error = "build the relation the model describes"


def _maxalign(n: int) -> int:
    return (n + 7) & ~7


def _pad_for(aligned: int) -> int:
    """Pad length of ``(id int4, pad text)`` giving a tuple of ``MAXALIGN(t_len) = aligned``.

    ``t_len`` = 24 (header) + 4 (``id``) + varlena header + pad; any ``t_len`` in
    ``(aligned − 8, aligned]`` does. A pad of at most 126 bytes gets a 1-byte header.
    """
    short = aligned - 29
    if 0 <= short <= 126:
        return short
    long_ = aligned - 32
    if long_ >= 127:
        return long_
    raise UnsupportedLayout(f"no (int4, text) row has an aligned size of {aligned} bytes")


def _row_space(tuple_width: int) -> int:
    """Bytes a row of ``tuple_width`` data bytes takes on a heap page: tuple plus line pointer."""
    return _maxalign(24 + tuple_width) + _ITEM_ID


def _filler_pad(nitems: int, tuple_width: int) -> int:
    """Pad of the last of ``nitems`` rows so that the page has no room for another row."""
    left = _PAGE_SPACE - (nitems - 1) * _row_space(tuple_width)
    aligned = (left - _ITEM_ID) // 8 * 8
    if aligned < _maxalign(24 + tuple_width):
        raise UnsupportedLayout(
            f"{nitems} rows of tuple_width {tuple_width} do not fit on one page ({_PAGE_SPACE} bytes)"
        )
    return _pad_for(aligned)


@dataclass
class ModelLayout:
    """Every heap page of a spec as the model generates it, plus the key of every tuple.

    ``nitems[b]`` line pointers (live + dead), ``ndead[b]``, VM bits and hint flags per block;
    ``dead_tids`` the dead tuples' ``(block, offset)``; ``keys[h]`` the ``id`` of tuple number
    ``h`` (its rank in the indexes' key order). ``grown`` has the same arrays for blocks appended
    later (``grow_nitems``).
    """

    spec: Any
    nitems: npt.NDArray[np.int64]
    ndead: npt.NDArray[np.int64]
    visible: npt.NDArray[np.bool_]
    frozen: npt.NDArray[np.bool_]
    hinted: npt.NDArray[np.bool_]
    dead_tids: list[tuple[int, int]]
    keys: npt.NDArray[np.int64]
    index_sizes: dict[str, int]
    fork_sizes: dict[str, int]
    content: Any = field(repr=False, default=None)

    @property
    def nblocks(self) -> int:
        return int(self.nitems.size)

    @property
    def live_tuples(self) -> int:
        return int(self.nitems.sum() - self.ndead.sum())

    def grow_nitems(self, first: int, n: int) -> npt.NDArray[np.int64]:
        """Line pointers of blocks ``first .. first + n − 1`` appended after the build."""
        return np.array(
            [self.content.heap_page(b).max_offset for b in range(first, first + n)], dtype=np.int64
        )


def model_layout(spec: Any) -> ModelLayout:
    """Ask the model for every page of ``spec`` (a ``reference_impl.relations.RelationSpec``)."""
    from reference_impl import Instance
    from reference_impl.relations import build_relation
    from reference_impl.relations.build import heap_fork_sizes

    _check_supported(spec)
    built = build_relation(Instance(), spec)
    content = built.content
    n = spec.nblocks
    nitems = np.zeros(n, dtype=np.int64)
    ndead = np.zeros(n, dtype=np.int64)
    hinted = np.zeros(n, dtype=bool)
    dead_tids: list[tuple[int, int]] = []
    for b in range(n):
        page = content.heap_page(b)
        nitems[b] = page.max_offset
        ndead[b] = page.ndead
        hinted[b] = page.hinted
        if page.ndead:
            dead_tids.extend((b, int(o)) for o in page.dead_offsets)
    visible, frozen = content.vm_bits(0, n) if n else (np.zeros(0, bool), np.zeros(0, bool))
    total = int(nitems.sum())
    keys = np.arange(total, dtype=np.int64)
    contents: list[Any] = [rel.content for rel in built.indexes.values()]
    permuted = [c for c in contents if c.entries.window > 1]
    if permuted and total:
        # ascending rank -> tuple number; the key of tuple h is its ascending rank (a DESC index
        # lists the same keys backwards).
        positions = permuted[0].entries.ascending_positions(np.arange(total, dtype=np.int64))
        keys = np.empty(total, dtype=np.int64)
        keys[positions] = np.arange(total, dtype=np.int64)
    forks = {str(f.name).lower(): size for f, size in heap_fork_sizes(spec).items()}
    return ModelLayout(
        spec=spec,
        nitems=nitems,
        ndead=ndead,
        visible=np.asarray(visible, dtype=bool),
        frozen=np.asarray(frozen, dtype=bool),
        hinted=hinted,
        dead_tids=dead_tids,
        keys=keys,
        index_sizes={name: rel.nblocks() for name, rel in built.indexes.items()},
        fork_sizes=forks,
        content=content,
    )


def _check_hash_builds(spec: Any, lay: ModelLayout) -> None:
    """Refuse to verify a hash index whose ``CREATE INDEX`` would split buckets as it inserts:
    the model lays out a build without splits (``layout.hash_build_splits``). The index holds
    an entry per heap line pointer, the ``reltuples`` the builder sets."""
    from reference_impl.relations.layout import HASH_DEFAULT_FFACTOR, hash_build_splits, hash_initial_buckets

    total = int(lay.nitems.sum())
    if not hash_build_splits(total):
        return
    for ispec in spec.indexes:
        if ispec.kind == "hash" and ispec.buckets is None:
            buckets = hash_initial_buckets(total)
            raise UnsupportedLayout(
                f"RelationSpec {spec.name!r}: its hash index has {total} entries, more than "
                f"{HASH_DEFAULT_FFACTOR} x its {buckets} initial buckets, so CREATE INDEX splits buckets "
                "while it inserts, which the model does not lay out; allowed: at most "
                f"{HASH_DEFAULT_FFACTOR * buckets} or at least {HASH_DEFAULT_FFACTOR * (buckets + 1)} entries"
            )


def _check_supported(spec: Any) -> None:
    from reference_impl.relations import RelationSpec

    if not isinstance(spec, RelationSpec):
        raise UnsupportedLayout(f"relation {spec!r} is not a reference_impl.relations.RelationSpec")
    if spec.empty:
        raise UnsupportedLayout(
            f"RelationSpec.empty = True ({spec.name!r}) cannot be built on a server: VACUUM of a "
            "table without pages creates no visibility map or free-space map forks"
        )
    if spec.hot_per_page:
        raise UnsupportedLayout(
            f"RelationSpec.hot_per_page = {spec.hot_per_page} ({spec.name!r}) cannot be built on a "
            "server by this builder: it writes rows with INSERT and deletes them, and makes no "
            "HOT updates"
        )
    kinds = [i.kind for i in spec.indexes]
    if "spgist" in kinds:
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r} has an SP-GiST index: the table's int4 key has no SP-GiST "
            "operator class, and where spgdoinsert puts tuples depends on the operator class"
        )
    if "gist" in kinds:
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r} has a GiST index: a server's sorted GiST build of the key "
            "does not give the model's page count (measured: 333 pages where the model has 234 "
            "for 61,020 entries), so the layouts would differ"
        )
    if any(
        i.kind == "hash"
        and (
            i.buckets is not None
            or (i.overflow != 0 and not (i.overflow == "build" and i.key_hash == "hashint4"))
            or i.key_hash not in (None, "hashint4")
        )
        for i in spec.indexes
    ):
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r}: a hash index's buckets and overflow pages follow from the "
            "row count on a server (_hash_init at CREATE INDEX) and its int4 keys; give "
            "IndexSpec('hash') without buckets/overflow, or with key_hash='hashint4' and "
            "overflow='build' for the server's own layout"
        )
    if any(i.kind == "hash" and i.expression is not None and i.overflow != "build" for i in spec.indexes):
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r}: a hash index on an expression fills the buckets its values "
            "hash to, with the overflow pages CREATE INDEX adds; give it key_hash='hashint4' and "
            "overflow='build'"
        )
    if any(
        i.kind == "btree" and (i.levels or i.leaf_pages or i.fanout or i.keys_per_leaf or i.key_width)
        for i in spec.indexes
    ):
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r}: a btree's shape follows from its int4 keys on a server; "
            "give IndexSpec('btree') without levels/leaf_pages/fanout/keys_per_leaf/key_width"
        )
    shuffled = [i for i in spec.indexes if i.correlation < 1.0]
    if len(shuffled) > 0 and len(spec.indexes) > 1:
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r}: the indexes share the key column, so only a single index "
            "may have correlation < 1"
        )


def server_names(spec: Any) -> tuple[str, dict[str, str]]:
    """The server-side table name and model index name → server index name for ``spec``.

    Names carry a digest of the spec, so several layouts named ``t`` can coexist.
    """
    digest = hashlib.blake2b(repr(spec).encode(), digest_size=5).hexdigest()
    table = f"{spec.name[:40]}_{digest}".lower()
    indexes = {
        i.default_name(spec.name): f"{i.default_name(spec.name)[:40]}_{digest}".lower() for i in spec.indexes
    }
    return table, indexes


@dataclass
class BuiltRelation:
    """A table (and its indexes) built on a server from a ``RelationSpec``.

    ``pin`` is the horizon pin of a relation with dead tuples (``None`` otherwise);
    ``spent`` is set once something changed the table (a VACUUM, a grown table, a corrupted
    page, a released pin): it must then be dropped and built again.
    """

    spec: Any
    table: str
    indexes: dict[str, str]
    layout: ModelLayout
    pin: psycopg.Connection[Any] | None = None
    spent: bool = False
    delete_xid: int | None = None
    grown_blocks: int = 0
    grown_tuples: int = 0
    build_seconds: float = 0.0

    @property
    def relations(self) -> list[str]:
        return [self.table, *self.indexes.values()]

    def index_for(self, kind: str, name: str | None = None) -> str:
        """The server name of the model index ``name`` or of the first index of ``kind``."""
        for ispec in self.spec.indexes:
            model_name = ispec.default_name(self.spec.name)
            if (name is not None and model_name == name) or (name is None and ispec.kind == kind):
                return self.indexes[model_name]
        raise UnsupportedLayout(
            f"relation {self.spec.name!r} has no {kind} index"
            + (f" named {name!r}" if name else "")
            + f": give RelationSpec(indexes=(IndexSpec({kind!r}),))"
        )

    def release_pin(self) -> None:
        """End the horizon pin; the dead tuples become prunable, so the relation is spent."""
        if self.pin is not None:
            try:
                self.pin.close()
            except psycopg.Error:
                pass
            self.pin = None
            self.spent = True


def _tids_literal(tids: list[tuple[int, int]]) -> str:
    return "{" + ",".join(f'"({b},{o})"' for b, o in tids) + "}"


def _insert_pages(
    conn: psycopg.Connection[Any],
    table: str,
    nitems: npt.NDArray[np.int64],
    first_tuple: int,
    keys: npt.NDArray[np.int64] | None,
    tuple_width: int,
) -> None:
    """Append one page per entry of ``nitems`` (0 → one filler row, deleted later)."""
    normal = _pad_for(_maxalign(24 + tuple_width))
    fillers = [0] * (_MAX_ITEMS + 1)
    for k in np.unique(nitems).tolist():
        # An empty page starts as one full-page filler (k = 0 uses the one-row filler).
        fillers[k] = _filler_pad(max(k, 1), tuple_width)
    ks = nitems.astype(np.int64)
    rows_per_page = np.maximum(ks, 1)
    firsts = first_tuple + np.concatenate(([0], np.cumsum(ks)[:-1])) if ks.size else ks
    chunk = 20_000
    ident = sql.Identifier(table)
    for start in range(0, ks.size, chunk):
        part = slice(start, start + chunk)
        if not ks[part].size:
            continue
        lo = int(firsts[part][0])
        hi = int(firsts[part][-1] + ks[part][-1])
        params: list[Any] = [
            normal,
            fillers,
            ks[part].tolist(),
            rows_per_page[part].tolist(),
            firsts[part].tolist(),
        ]
        if keys is not None and keys.size and hi > lo:
            # Array subscripts are 1-based and local to this chunk; a filler of an empty page
            # (deleted before the indexes are built) takes no key.
            id_expr: sql.Composable = sql.SQL("coalesce((%s::int4[])[p.first - {lo} + g.i], -1)").format(
                lo=sql.Literal(lo)
            )
            params = [keys[lo:hi].tolist(), *params]
        else:
            id_expr = sql.SQL("p.first + g.i - 1")
        query = sql.SQL(
            "INSERT INTO {t} (id, pad) "
            "SELECT {id}, repeat('x', CASE WHEN g.i < p.k THEN %s ELSE (%s::int4[])[p.k + 1] END) "
            "FROM unnest(%s::int4[], %s::int4[], %s::int8[]) WITH ORDINALITY AS p(k, nrows, first, b) "
            "CROSS JOIN LATERAL generate_series(1, p.nrows) AS g(i) ORDER BY p.b, g.i"
        ).format(t=ident, id=id_expr)
        conn.execute(query, params)


def build_relation_on_server(
    db: ScratchDatabase, spec: Any, *, verify: bool = True, layout: ModelLayout | None = None
) -> BuiltRelation:
    """Create ``spec``'s table and indexes in ``db`` page for page as the model lays them out.

    Raises :class:`UnsupportedLayout` for specs that cannot be reproduced and, with ``verify``,
    :class:`LayoutMismatch` when the result differs from the model. The caller must have ended
    every other horizon pin in ``db`` (it would keep ``VACUUM (FREEZE)`` from freezing).
    """
    import time

    t0 = time.monotonic()
    lay = layout if layout is not None else model_layout(spec)
    if verify:
        _check_hash_builds(spec, lay)
    table, index_names = server_names(spec)
    server = db.server
    kind = sql.SQL("UNLOGGED TABLE" if spec.unlogged else "TABLE")
    ident = sql.Identifier(table)
    zero_pages = np.flatnonzero(lay.nitems == 0)
    if zero_pages.size and not spec.vacuumed:
        raise UnsupportedLayout(
            f"RelationSpec {spec.name!r} has pages without line pointers but vacuumed = False: an "
            "empty page in the middle of a heap only exists after VACUUM removed its rows"
        )
    built = BuiltRelation(spec=spec, table=table, indexes=index_names, layout=lay)
    with server._guard(f"building {table}"), server._connect_raw(db.name) as conn:
        conn.execute("SET synchronize_seqscans = off")
        conn.execute("SET max_parallel_workers_per_gather = 0")
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(ident))
        # STORAGE PLAIN in the column definition, not altered afterwards: a table with no
        # toastable column gets no TOAST table (needs_toast_table), as the model has none. With
        # one, a never-vacuumed table's first VACUUM also reads the TOAST index's metapage.
        conn.execute(
            sql.SQL(
                "CREATE {} {} (id int4, pad text STORAGE PLAIN) WITH (fillfactor = 100, "
                + NO_AUTOVACUUM
                + ")"
            ).format(kind, ident)
        )
        if lay.nblocks:
            _insert_pages(conn, table, lay.nitems, 0, lay.keys, spec.tuple_width)
        if zero_pages.size:
            # Deleted before the indexes exist, so no index ever holds an entry for them.
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE ctid = ANY(%s::tid[])").format(ident),
                (_tids_literal([(int(b), 1) for b in zero_pages]),),
            )
        if spec.vacuumed and lay.nblocks:
            # Before the indexes: without one, VACUUM removes an emptied page's line pointer at
            # once (with one it would stay LP_DEAD when index vacuuming is bypassed).
            conn.execute(sql.SQL("VACUUM (FREEZE, TRUNCATE false) {}").format(ident))
        if spec.indexes:
            # _hash_init sizes the bucket array from the estimated row count: make it exact
            # (the model counts every line pointer of the table as built).
            conn.execute(
                "UPDATE pg_class SET reltuples = %s, relpages = %s WHERE oid = %s::regclass",
                (float(lay.nitems.sum()), lay.nblocks, table),
            )
        for ispec in spec.indexes:
            conn.execute(_create_index(ispec, index_names[ispec.default_name(spec.name)], ident))
        if lay.dead_tids:
            pin = server._connect_raw(db.name)
            pin.autocommit = False
            pin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            pin.execute("SELECT 1")  # the snapshot is taken here and held until the pin ends
            built.pin = pin
        with _tid_scans(conn):
            built.delete_xid = _set_visibility(conn, table, lay, spec)
        _set_hints(conn, table, lay, seq_scan_ok=server.version_num < SCAN_SETS_VM_VERSION_NUM)
        if spec.fillfactor != 100:
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (fillfactor = {})").format(ident, sql.Literal(spec.fillfactor))
            )
        conn.execute("CHECKPOINT")
    _evict_all(db, built)
    if verify:
        problems = verify_layout(db, built)
        if problems:
            built.release_pin()
            raise LayoutMismatch(
                f"relation {spec.name!r} ({table}) differs from the model: " + "; ".join(problems)
            )
        _evict_all(db, built)
    built.build_seconds = time.monotonic() - t0
    return built


def _create_index(ispec: Any, name: str, table: sql.Identifier) -> sql.Composed:
    """``CREATE INDEX`` of one ``IndexSpec``: on ``id`` (``DESC``) or on its expression, e.g.
    ``((id % 100))``; ``deduplicate = False`` is ``WITH (deduplicate_items = off)``."""
    from reference_impl.relations.expression import expression_sql

    using = sql.SQL(ispec.kind if ispec.kind in ("hash", "gin", "brin", "bloom") else "btree")
    if ispec.kind in ("gin", "brin", "bloom"):
        # gin on int4 through btree_gin (one TID per key); brin minmax; bloom's length option.
        options = []
        if ispec.kind == "brin" and ispec.pages_per_range is not None:
            options.append(f"pages_per_range = {int(ispec.pages_per_range)}")
        if ispec.kind == "bloom" and ispec.bloom_length is not None:
            options.append(f"length = {int(ispec.bloom_length)}")
        if ispec.kind == "gin":
            options.append("fastupdate = off")
        with_am = sql.SQL(" WITH (" + ", ".join(options) + ")" if options else "")
        return sql.SQL("CREATE INDEX {} ON {} USING {} (id){}").format(
            sql.Identifier(name), table, using, with_am
        )
    if ispec.expression is not None:
        # expression_sql renders an int4 operator and an integer checked by IndexSpec.
        key = sql.SQL("(" + expression_sql(ispec.expression) + ")")
    else:
        key = sql.SQL("id DESC" if ispec.descending else "id")
    with_ = sql.SQL(" WITH (deduplicate_items = off)" if not ispec.deduplicate else "")
    return sql.SQL("CREATE INDEX {} ON {} USING {} ({}){}").format(
        sql.Identifier(name), table, using, key, with_
    )


def _evict_all(db: ScratchDatabase, built: BuiltRelation) -> None:
    with db.session() as s:
        for rel in built.relations:
            evict(s, rel)


@contextmanager
def _tid_scans(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The statements inside fetch their ``ctid = ANY(...)`` rows by a TID scan: with many TIDs
    the planner prefers a sequential scan with a filter, whose visibility tests would hint every
    page (and which could prune one). Set outside a transaction, so a ROLLBACK keeps it."""
    conn.execute("SET enable_seqscan = off")
    try:
        yield
    finally:
        conn.execute("RESET enable_seqscan")


def _set_visibility(conn: psycopg.Connection[Any], table: str, lay: ModelLayout, spec: Any) -> int | None:
    """Clear VM bits where the model has them clear; delete the dead tuples (returns that xid).
    The caller runs it under :func:`_tid_scans`."""
    ident = sql.Identifier(table)
    nonempty = lay.nitems - lay.ndead > 0
    delete_xid: int | None = None
    if spec.vacuumed and lay.nblocks:
        lock = np.flatnonzero(lay.visible & ~lay.frozen & nonempty)
        if lock.size:
            tids = [(int(b), _first_live(lay, int(b))) for b in lock]
            conn.execute("BEGIN")
            conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM (SELECT 1 FROM {} WHERE ctid = ANY(%s::tid[]) FOR KEY SHARE) s"
                ).format(ident),
                (_tids_literal(tids),),
            )
            conn.execute("COMMIT")
    if lay.dead_tids:
        conn.execute("BEGIN")
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE ctid = ANY(%s::tid[])").format(ident),
            (_tids_literal(lay.dead_tids),),
        )
        row = conn.execute("SELECT txid_current()").fetchone()
        conn.execute("COMMIT")
        assert row is not None
        delete_xid = int(row[0]) & 0xFFFFFFFF
    if spec.vacuumed and lay.nblocks:
        clear = np.flatnonzero(~lay.visible & (lay.ndead == 0) & nonempty)
        if clear.size:
            tids = [(int(b), _first_live(lay, int(b))) for b in clear]
            conn.execute("BEGIN")
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE ctid = ANY(%s::tid[])").format(ident), (_tids_literal(tids),)
            )
            conn.execute("ROLLBACK")
    return delete_xid


def _first_live(lay: ModelLayout, block: int) -> int:
    if lay.ndead[block] == 0:
        return 1
    dead = {o for b, o in lay.dead_tids if b == block}
    for o in range(1, int(lay.nitems[block]) + 1):
        if o not in dead:
            return o
    raise UnsupportedLayout(f"page {block} has no live tuple")


def _set_hints(
    conn: psycopg.Connection[Any], table: str, lay: ModelLayout, *, seq_scan_ok: bool = True
) -> None:
    """Read the tuples of the pages the model calls hinted, which sets their hint bits.

    All-visible pages need none (frozen, or never looked at tuple by tuple). When every other
    page is to be hinted and ``seq_scan_ok`` (PostgreSQL 18) one sequential scan does it;
    otherwise a TID scan of exactly those pages (a TID fetch never prunes, and so never sets a
    VM bit on 19+). Dead tuples are not pruned either way: the horizon pin holds them.
    """
    if not lay.nblocks:
        return
    ident = sql.Identifier(table)
    candidates = (lay.nitems > 0) & (~lay.visible if lay.spec.vacuumed else np.ones(lay.nblocks, bool))
    wanted = candidates & lay.hinted
    if not wanted.any():
        return
    if seq_scan_ok and np.array_equal(wanted, candidates):
        conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident))
        return
    pages = np.flatnonzero(wanted)
    tids = [(int(b), o) for b in pages for o in range(1, int(lay.nitems[b]) + 1)]
    # With 25,000 TIDs of a 5,000-page table the planner chose a seq scan, which hinted every page.
    with _tid_scans(conn):
        for start in range(0, len(tids), 200_000):
            conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE ctid = ANY(%s::tid[])").format(ident),
                (_tids_literal(tids[start : start + 200_000]),),
            )


# ------------------------------------------------------------------------------ verification
def _decode_vm(raw: bytes, n: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    body = np.frombuffer(raw[24:], dtype=np.uint8)
    bits = np.unpackbits(body, bitorder="little")
    return bits[0::2][:n].astype(bool), bits[1::2][:n].astype(bool)


def verify_layout(db: ScratchDatabase, built: BuiltRelation) -> list[str]:
    """Differences between the server's relation and the model's layout (empty when equal).

    Reads raw pages only (``pageinspect``), so it sets no hint bits and prunes nothing.
    """

    lay = built.layout
    spec = built.spec
    problems: list[str] = []
    server = db.server
    table = built.table
    with server._guard(f"verifying {table}"), server._connect_raw(db.name) as conn:

        def pages(rel: str, fork: str) -> int:
            row = conn.execute("SELECT pg_relation_size(%s::regclass, %s)", (rel, fork)).fetchone()
            assert row is not None
            return int(row[0]) // _BLCKSZ

        main = pages(table, "main")
        if main != lay.nblocks:
            problems.append(f"main fork has {main} blocks, the model {lay.nblocks}")
        vm = pages(table, "vm")
        fsm = pages(table, "fsm")
        want_vm = lay.fork_sizes.get("vm", 0)
        if vm != want_vm:
            problems.append(f"VM fork has {vm} blocks, the model {want_vm}")
        want_fsm = lay.fork_sizes.get("fsm", 0)
        if fsm != want_fsm:
            problems.append(f"FSM fork has {fsm} blocks, the model {want_fsm}")
        if spec.unlogged and pages(table, "init") != 0:
            problems.append("the init fork is not empty")
        if main == lay.nblocks and main:
            lower = np.array(
                [
                    r[0]
                    for r in conn.execute(
                        "SELECT h.lower FROM generate_series(0, %s - 1) AS b, "
                        "LATERAL page_header(get_raw_page(%s, 'main', b::int)) AS h ORDER BY b",
                        (main, table),
                    )
                ],
                dtype=np.int64,
            )
            items = (lower - 24) // _ITEM_ID
            bad = np.flatnonzero(items != lay.nitems)
            if bad.size:
                b = int(bad[0])
                problems.append(
                    f"{bad.size} page(s) hold other line-pointer counts than the model's, first block "
                    f"{b}: {int(items[b])} instead of {int(lay.nitems[b])}"
                )
            if built.delete_xid is not None:
                dead = {
                    (int(r[0]), int(r[1]))
                    for r in conn.execute(
                        "SELECT b, i.lp FROM generate_series(0, %s - 1) AS b, "
                        "LATERAL heap_page_items(get_raw_page(%s, 'main', b::int)) AS i "
                        "WHERE i.t_xmax::text::bigint = %s",
                        (main, table, built.delete_xid),
                    )
                }
                want = set(lay.dead_tids)
                if dead != want:
                    problems.append(
                        f"dead tuples differ: {len(dead - want)} on the server only, "
                        f"{len(want - dead)} in the model only"
                    )
            if spec.hinted_fraction < 1.0:
                # Which pages carry every hint bit a visibility test would set (a scan that finds
                # one missing dirties the page): each tuple's xmin hinted (committed, or frozen)
                # and its xmax absent, hinted (committed or invalid: an aborted delete's) or a
                # lock only, which HeapTupleSatisfiesMVCC does not hint.
                hinted_got = np.zeros(main, dtype=bool)
                for r in conn.execute(
                    "SELECT b, bool_and((i.t_infomask & 768) <> 0 AND (i.t_xmax::text = '0' "
                    "OR (i.t_infomask & 3072) <> 0 OR (i.t_infomask & 128) <> 0)) "
                    "FROM generate_series(0, %s - 1) AS b, "
                    "LATERAL heap_page_items(get_raw_page(%s, 'main', b::int)) AS i "
                    "WHERE i.lp_flags = 1 GROUP BY b",
                    (main, table),
                ):
                    hinted_got[int(r[0])] = bool(r[1])
                diff = np.flatnonzero(hinted_got != (lay.hinted & (lay.nitems > 0)))
                if diff.size:
                    first = int(diff[0])
                    problems.append(
                        f"{diff.size} page(s) hinted otherwise than the model's, first block {first}: "
                        f"{'hinted' if hinted_got[first] else 'not hinted'} on the server"
                    )
        if vm == want_vm and vm:
            for p in range(vm):
                first = p * 32672
                n = min(32672, lay.nblocks - first)
                raw = conn.execute("SELECT get_raw_page(%s, 'vm', %s)", (table, p)).fetchone()
                assert raw is not None
                vis, frz = _decode_vm(bytes(raw[0]), n)
                for what, got_bits, want_bits in (
                    ("all-visible", vis, lay.visible[first : first + n]),
                    ("all-frozen", frz, lay.frozen[first : first + n]),
                ):
                    diff = np.flatnonzero(got_bits != want_bits)
                    if diff.size:
                        problems.append(
                            f"{diff.size} VM {what} bit(s) differ, first heap block {first + int(diff[0])}"
                        )
        for model_name, server_name in built.indexes.items():
            got = pages(server_name, "main")
            want_pages = lay.index_sizes[model_name]
            if got != want_pages:
                problems.append(
                    f"index {model_name} has {got} blocks on the server, {want_pages} in the model"
                )
    return problems
