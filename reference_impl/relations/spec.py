"""Declarative descriptions of synthetic relations: ``RelationSpec`` and ``IndexSpec``.

A spec is a frozen dataclass: hashable, comparable, printable, and the same description builds
the model's relation (``build_relation``) and could build a real server's table. Every field is
checked when the spec is made; a bad value raises ``SettingError`` naming the field, the value and
what is allowed, so a hypothesis strategy or a typo fails at once and readably.

Conventions (see ``docs/relations.md`` for the full semantics):

* ``tuples_per_page`` is the number of line pointers (live + dead) on a page: an int, a
  distribution ``("poisson", mean)`` / ``("uniform", lo, hi)`` drawn per page, ``("cycle", n0,
  n1, ...)`` (block *b* has ``n[b mod k]``: rows per page given exactly), or ``None`` to derive it
  from ``tuple_width`` and ``fillfactor`` as ``INSERT`` would fill pages.
* ``dead_fraction``: each line pointer of a page that is not all-visible is a dead, unpruned
  tuple with this probability (an all-visible page has no dead tuples); ``dead_per_page`` gives
  the count exactly instead, and ``dead_every = k`` keeps dead tuples to every k-th block (those
  with ``b mod k = 0``).
* ``hot_per_page``: of a page's dead tuples, this many are HOT-updated (``heapam.c``
  ``heap_update`` on the same page): each has a live heap-only successor at the end of the page,
  which no index lists; pruning turns the dead root into a redirect, so VACUUM removes it
  without an LP_DEAD item (no index vacuuming for it).
* ``all_visible_fraction`` / ``all_frozen_fraction`` (frozen ⊆ visible) lay out the visibility
  map by ``vm_pattern``: ``random`` (each block independently), ``prefix`` (the first blocks), or
  ``runs`` (runs of ``vm_run_blocks`` blocks decided together); ``vm_cycle`` gives it exactly, one
  character per block repeated: ``F`` all-visible and all-frozen, ``V`` all-visible but not
  frozen, ``-`` neither.
* ``vacuumed`` (VM and FSM forks exist, sized as VACUUM leaves them), ``empty`` (they exist but
  have zero length), ``unlogged`` (an init fork exists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import SettingError
from .expression import check_expression
from .layout import (
    MAX_HEAP_TUPLES_PER_PAGE,
    heap_tuple_space,
    heap_tuples_per_page,
)

__all__ = ["RelationSpec", "IndexSpec", "TuplesPerPage", "INDEX_KINDS", "VM_PATTERNS", "MAX_NBLOCKS"]

INDEX_KINDS = ("btree", "hash", "gist", "spgist", "gin", "brin", "bloom")
VM_PATTERNS = ("random", "prefix", "runs")
OVERFLOW_LAYOUTS = ("grouped", "interleaved")
HASH_KEY_FUNCTIONS = ("hashint4", "hashint8")
MAX_NBLOCKS = 0xFFFFFFFF  # MaxBlockNumber + 1
_MAX_SEED = (1 << 63) - 1

TuplesPerPage = int | tuple[Any, ...] | None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _check_int(owner: str, name: str, value: Any, lo: int, hi: int) -> None:
    if not _is_int(value) or not lo <= value <= hi:
        raise SettingError(f"{owner}.{name} = {value!r} is out of range: allowed an integer {lo}..{hi}")


def _check_fraction(owner: str, name: str, value: Any) -> None:
    if not _is_real(value) or not 0.0 <= value <= 1.0:
        raise SettingError(f"{owner}.{name} = {value!r} is out of range: allowed a number 0..1")


def _check_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise SettingError(f"{owner}.{name} = {value!r} is invalid: allowed True or False")


def check_distribution(owner: str, name: str, value: Any, lo: int, hi: int, *, cycle: bool = False) -> None:
    """Validate an int in [lo, hi] or ``("poisson", mean)`` / ``("uniform", a, b)`` within it
    (and, with ``cycle``, ``("cycle", n0, n1, ...)``)."""
    allowed = f'an integer {lo}..{hi}, ("poisson", mean) or ("uniform", lo, hi)' + (
        ' or ("cycle", n0, n1, ...)' if cycle else ""
    )
    if cycle and isinstance(value, tuple) and value and value[0] == "cycle":
        if len(value) < 2 or not all(_is_int(v) and lo <= v <= hi for v in value[1:]):
            raise SettingError(
                f"{owner}.{name} = {value!r} is invalid: a cycle lists one or more integers {lo}..{hi}"
            )
        return
    if _is_int(value):
        if not lo <= value <= hi:
            raise SettingError(f"{owner}.{name} = {value!r} is out of range: allowed {allowed}")
        return
    if isinstance(value, tuple) and value and value[0] == "poisson":
        if len(value) != 2 or not _is_real(value[1]) or not 0 <= value[1] <= hi:
            raise SettingError(
                f"{owner}.{name} = {value!r} is invalid: a poisson mean must be a number 0..{hi}"
            )
        return
    if isinstance(value, tuple) and value and value[0] == "uniform":
        if len(value) != 3 or not all(_is_int(v) for v in value[1:]) or not lo <= value[1] <= value[2] <= hi:
            raise SettingError(
                f"{owner}.{name} = {value!r} is invalid: uniform bounds must be integers "
                f"with {lo} <= lo <= hi <= {hi}"
            )
        return
    raise SettingError(f"{owner}.{name} = {value!r} is invalid: allowed {allowed}")


@dataclass(frozen=True)
class IndexSpec:
    """An index on a synthetic heap: its access method and physical shape.

    Models the page layout ``CREATE INDEX`` produces: ``nbtsort.c`` (btree: metapage at block 0,
    pages numbered in the order the bottom-up build allocates them), ``hashpage.c`` (``_hash_init``:
    metapage, primary bucket pages, bitmap page, then overflow pages) and ``gistbuild.c`` (sorted
    build: root at block 0, children written before their parents).

    * btree and hash: ``expression`` (``CREATE INDEX ... ((id % 100))``: the index holds an int4
      expression of the key column, ``("mod", m)``, ``("div", d)``, ``("mul", k)`` or ``("add",
      c)`` (``expression.py``); a btree orders its entries by the values, equal values by heap
      TID, and lays its pages out as ``_bt_load`` builds them, posting lists included
      (``btree_build.py``); a hash index hashes the values);
    * btree: ``deduplicate`` (``deduplicate_items``, default on: runs of equal keys become
      posting lists at build time), ``descending`` (``CREATE INDEX ... (key DESC)``: key rank 0 is the largest key, so
      with correlation 1 the index lists the heap backwards), ``leaf_pages`` (default: entries / ``keys_per_leaf``, which defaults from
      ``key_width`` and ``fillfactor`` 90), ``levels`` (total levels, leaves included; picks the
      inner fan-out) or ``fanout`` (items an inner page holds when it fills, at least 3, default
      from fill factor 70; a split moves the last one to the new page, see ``nbtsort_layout``);
    * hash: ``buckets`` (default as ``_hash_init`` sizes them), ``key_hash`` (``hashint4`` or
      ``hashint8``: entries go to buckets by PostgreSQL's own hash of their key, the key rank, as
      ``_hash_hashkey2bucket`` maps it; default: a synthetic uniform hash), ``overflow`` (overflow
      pages per bucket: an int, a distribution, a tuple of one int per bucket, ``("blocks", b0,
      b1, ...)``: the bucket of each overflow page in block order (the numbering given exactly,
      as a server's ``pageinspect`` shows it), or ``"build"``:
      as ``CREATE INDEX`` allocates them, ``_hash_doinsert`` in heap order adding an overflow page
      (``_hash_addovflpage``) whenever a bucket's last page is full; needs ``key_hash``),
      ``overflow_layout``
      (``grouped``: each bucket's chain in consecutive blocks; ``interleaved``: allocated in a
      seeded random order, as inserts after the build produce);
    * gist: ``pages`` (total, default from entries / ``keys_per_leaf``) and ``fanout``;
    * spgist: ``keys_per_leaf`` and ``pages`` (``spgist.py``: metapage, root, nulls root, then
      the leaves in key order);
    * gin: ``keys_per_leaf`` (entry tuples a leaf takes, default 291: an int4 key with one heap
      TID) and ``fanout`` (downlinks an inner page takes, default 407): the entry tree as
      ``ginbuild`` inserts the keys in order (``gin.py``; every key has one TID, so no posting
      trees, and the pending list is empty);
    * brin: ``pages_per_range`` (default 128) and ``keys_per_leaf`` (summary tuples a regular
      page takes, default 408: int4 minmax); ``correlation`` does not apply (``brin.py``);
    * bloom: ``bloom_length`` (signature bits, the ``length`` option, default 80): the metapage,
      then the signatures in heap order (``bloom.py``); ``correlation`` does not apply;
    * all: ``correlation`` 0..1 — how well leaf order follows heap order (1: key order is heap
      order; 0: fully shuffled); ``seed`` (default: derived from the relation's seed).
    """

    kind: str = "btree"
    name: str | None = None
    levels: int | None = None
    leaf_pages: int | None = None
    keys_per_leaf: int | None = None
    key_width: int | None = None
    fanout: int | None = None
    correlation: float = 1.0
    buckets: int | None = None
    overflow: Any = 0
    overflow_layout: str = "grouped"
    pages: int | None = None
    key_hash: str | None = None
    descending: bool = False
    expression: tuple[str, int] | None = None
    deduplicate: bool = True
    pages_per_range: int | None = None
    bloom_length: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        owner = "IndexSpec"
        if self.kind not in INDEX_KINDS:
            raise SettingError(f"{owner}.kind = {self.kind!r} is invalid: allowed {', '.join(INDEX_KINDS)}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise SettingError(f"{owner}.name = {self.name!r} is invalid: allowed a non-empty string or None")
        own = {
            "btree": {"levels", "leaf_pages", "keys_per_leaf", "key_width", "fanout"},
            "hash": {"buckets", "overflow", "overflow_layout", "key_hash"},
            "gist": {"pages", "fanout", "keys_per_leaf", "key_width"},
            "spgist": {"pages", "keys_per_leaf"},
            "gin": {"keys_per_leaf", "fanout"},
            "brin": {"pages_per_range", "keys_per_leaf"},
            "bloom": {"bloom_length"},
        }[self.kind]
        defaults = {f.name: f.default for f in fields(self)}
        for fname in (
            "levels",
            "leaf_pages",
            "keys_per_leaf",
            "key_width",
            "fanout",
            "buckets",
            "pages",
            "key_hash",
            "pages_per_range",
            "bloom_length",
        ):
            if fname not in own and getattr(self, fname) is not None:
                raise SettingError(
                    f"{owner}.{fname} = {getattr(self, fname)!r} does not apply to a {self.kind} index"
                )
        _check_bool(owner, "descending", self.descending)
        if self.descending and self.kind != "btree":
            raise SettingError(f"{owner}.descending = True does not apply to a {self.kind} index")
        _check_bool(owner, "deduplicate", self.deduplicate)
        if not self.deduplicate and self.kind != "btree":
            raise SettingError(f"{owner}.deduplicate = False does not apply to a {self.kind} index")
        if self.expression is not None:
            check_expression(owner, self.expression)
            if self.kind not in ("btree", "hash"):
                raise SettingError(
                    f"{owner}.expression = {self.expression!r} does not apply to a {self.kind} index: "
                    "allowed on btree and hash indexes"
                )
            shaped = [
                n
                for n in ("levels", "leaf_pages", "keys_per_leaf", "key_width", "fanout")
                if getattr(self, n) is not None
            ]
            if shaped:
                raise SettingError(
                    f"{owner}.expression = {self.expression!r} lays the btree out from its keys as CREATE "
                    f"INDEX does (posting lists, nbtsort.c): leave {', '.join(shaped)} unset"
                )
            if self.descending:
                raise SettingError(
                    f"{owner}.expression = {self.expression!r} with descending = True is not modelled: "
                    "order by a negated expression instead, e.g. expression=('mul', -1)"
                )
        for fname in ("overflow", "overflow_layout"):
            if fname not in own and getattr(self, fname) != defaults[fname]:
                raise SettingError(
                    f"{owner}.{fname} = {getattr(self, fname)!r} does not apply to a {self.kind} index"
                )
        for fname, lo, hi in (
            ("levels", 1, 20),
            ("leaf_pages", 1, MAX_NBLOCKS - 1),
            ("keys_per_leaf", 1, 2048),
            ("key_width", 1, 2000),
            ("fanout", 3 if self.kind == "btree" else 2, 4096),
            ("buckets", 2, 0x40000000),
            ("pages", 1, MAX_NBLOCKS - 1),
            ("pages_per_range", 1, 131072),
            ("bloom_length", 1, 4096),
        ):
            v = getattr(self, fname)
            if v is not None:
                _check_int(owner, fname, v, lo, hi)
        _check_fraction(owner, "correlation", self.correlation)
        if self.kind in ("brin", "bloom") and self.correlation != 1.0:
            raise SettingError(
                f"{owner}.correlation = {self.correlation!r} does not apply to a {self.kind} index: "
                "its pages follow the heap's order"
            )
        if self.overflow_layout not in OVERFLOW_LAYOUTS:
            raise SettingError(
                f"{owner}.overflow_layout = {self.overflow_layout!r} is invalid: "
                f"allowed {', '.join(OVERFLOW_LAYOUTS)}"
            )
        if self.key_hash is not None and self.key_hash not in HASH_KEY_FUNCTIONS:
            raise SettingError(
                f"{owner}.key_hash = {self.key_hash!r} is invalid: allowed {', '.join(HASH_KEY_FUNCTIONS)}"
            )
        ov = self.overflow
        if isinstance(ov, tuple) and ov and ov[0] == "blocks":
            owners = ov[1:]
            if not all(_is_int(b) and b >= 0 for b in owners) or len(owners) > 32767:
                raise SettingError(
                    f"{owner}.overflow = {ov!r} is invalid: ('blocks', b0, b1, ...) lists the bucket "
                    "(0 or more) of each overflow page in block order, at most 32767 of them"
                )
            if self.buckets is not None and owners and max(owners) >= self.buckets:
                raise SettingError(
                    f"{owner}.overflow names bucket {max(owners)} but buckets = {self.buckets}: "
                    f"allowed 0..{self.buckets - 1}"
                )
            if self.overflow_layout != "grouped":
                raise SettingError(
                    f"{owner}.overflow = ('blocks', ...) numbers the overflow pages itself: leave overflow_layout"
                )
        elif ov == "build":
            if self.key_hash is None:
                raise SettingError(
                    f"{owner}.overflow = 'build' needs key_hash: which bucket fills first follows "
                    f"from the real hash of each key (allowed {', '.join(HASH_KEY_FUNCTIONS)})"
                )
            if self.overflow_layout != "grouped":
                raise SettingError(
                    f"{owner}.overflow = 'build' numbers the overflow pages itself: leave overflow_layout"
                )
        elif isinstance(ov, tuple) and ov and all(_is_int(v) for v in ov):
            if any(v < 0 or v > 32767 for v in ov):
                raise SettingError(f"{owner}.overflow has a per-bucket count outside 0..32767: {ov!r}")
            if self.buckets is not None and len(ov) != self.buckets:
                raise SettingError(
                    f"{owner}.overflow lists {len(ov)} per-bucket counts but buckets = {self.buckets}"
                )
        else:
            check_distribution(owner, "overflow", ov, 0, 32767)
        if self.seed is not None:
            _check_int(owner, "seed", self.seed, 0, _MAX_SEED)

    def default_name(self, relation: str) -> str:
        return self.name if self.name is not None else f"{relation}_{self.kind}"


@dataclass(frozen=True)
class RelationSpec:
    """A synthetic heap table (and its indexes), generated lazily from ``seed``.

    Models what a table looks like on disk after ``CREATE TABLE``/``INSERT`` (``hio.c`` page
    filling), some deletes (dead tuples not yet pruned), and VACUUM's visibility-map and
    free-space-map forks (``visibilitymap.c``, ``freespace.c``).
    """

    name: str = "t"
    nblocks: int = 0
    tuples_per_page: TuplesPerPage = None
    tuple_width: int = 100
    fillfactor: int = 100
    dead_fraction: float = 0.0
    all_visible_fraction: float = 0.0
    all_frozen_fraction: float = 0.0
    vm_pattern: str = "random"
    vacuumed: bool = True
    unlogged: bool = False
    empty: bool = False
    indexes: tuple[IndexSpec, ...] = ()
    seed: int = 0
    payload: bool = True
    hinted_fraction: float = 1.0
    vm_run_blocks: int = 64
    dead_every: int | None = None
    dead_per_page: int | None = None
    hot_per_page: int = 0
    vm_cycle: str | None = None
    _capacity: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner = "RelationSpec"
        if not isinstance(self.name, str) or not self.name:
            raise SettingError(f"{owner}.name = {self.name!r} is invalid: allowed a non-empty string")
        _check_int(owner, "nblocks", self.nblocks, 0, MAX_NBLOCKS)
        _check_int(owner, "fillfactor", self.fillfactor, 10, 100)
        # tuple_width is checked (with its own message) by heap_tuples_per_page.
        capacity = heap_tuples_per_page(self.tuple_width, 100)
        object.__setattr__(self, "_capacity", capacity)
        tpp = self.tuples_per_page
        if tpp is not None:
            check_distribution(owner, "tuples_per_page", tpp, 0, MAX_HEAP_TUPLES_PER_PAGE, cycle=True)
            top: int | None = None
            if isinstance(tpp, int):
                top = tpp
            elif tpp[0] == "uniform":
                top = int(tpp[2])
            elif tpp[0] == "cycle":
                top = max(int(v) for v in tpp[1:])
            if top is not None and top > capacity:
                raise SettingError(
                    f"{owner}.tuples_per_page = {tpp!r} does not fit: at tuple_width = "
                    f"{self.tuple_width} ({heap_tuple_space(self.tuple_width)} bytes per tuple) a page "
                    f"holds at most {capacity}; lower tuple_width"
                )
        for fname in ("dead_fraction", "all_visible_fraction", "all_frozen_fraction", "hinted_fraction"):
            _check_fraction(owner, fname, getattr(self, fname))
        if self.all_frozen_fraction > self.all_visible_fraction:
            raise SettingError(
                f"{owner}.all_frozen_fraction = {self.all_frozen_fraction!r} exceeds all_visible_fraction "
                f"= {self.all_visible_fraction!r}: all-frozen pages are a subset of all-visible ones"
            )
        if self.vm_pattern not in VM_PATTERNS:
            raise SettingError(
                f"{owner}.vm_pattern = {self.vm_pattern!r} is invalid: allowed {', '.join(VM_PATTERNS)}"
            )
        _check_int(owner, "vm_run_blocks", self.vm_run_blocks, 1, 1 << 24)
        if self.dead_every is not None:
            _check_int(owner, "dead_every", self.dead_every, 1, MAX_NBLOCKS)
        if self.dead_per_page is not None:
            _check_int(owner, "dead_per_page", self.dead_per_page, 0, MAX_HEAP_TUPLES_PER_PAGE)
            if self.dead_fraction > 0:
                raise SettingError(
                    f"{owner}.dead_per_page = {self.dead_per_page!r} and dead_fraction = "
                    f"{self.dead_fraction!r} both set the dead tuples of a page: give one"
                )
        if self.dead_every is not None and self.dead_per_page is None and self.dead_fraction == 0:
            raise SettingError(
                f"{owner}.dead_every = {self.dead_every!r} needs dead_per_page or dead_fraction "
                "(how many tuples of those pages are dead)"
            )
        _check_int(owner, "hot_per_page", self.hot_per_page, 0, MAX_HEAP_TUPLES_PER_PAGE)
        if self.hot_per_page and self.dead_per_page is None and self.dead_fraction == 0:
            raise SettingError(
                f"{owner}.hot_per_page = {self.hot_per_page!r} needs dead tuples: HOT-updated "
                "tuples are dead ones (give dead_per_page or dead_fraction)"
            )
        if self.vm_cycle is not None:
            if not isinstance(self.vm_cycle, str) or not self.vm_cycle or set(self.vm_cycle) - set("FV-"):
                raise SettingError(
                    f"{owner}.vm_cycle = {self.vm_cycle!r} is invalid: allowed a non-empty string of "
                    "F (all-visible and all-frozen), V (all-visible only) and - (neither), one per block"
                )
            if self.all_visible_fraction or self.all_frozen_fraction or self.vm_pattern != "random":
                raise SettingError(
                    f"{owner}.vm_cycle = {self.vm_cycle!r} gives the visibility map exactly: leave "
                    "all_visible_fraction, all_frozen_fraction and vm_pattern at their defaults"
                )
            if not self.vacuumed and set(self.vm_cycle) != {"-"}:
                raise SettingError(
                    f"{owner}.vm_cycle = {self.vm_cycle!r} needs vacuumed = True "
                    "(without a visibility-map fork no page is all-visible)"
                )
        for fname in ("vacuumed", "unlogged", "empty", "payload"):
            _check_bool(owner, fname, getattr(self, fname))
        if self.empty and not self.vacuumed:
            raise SettingError(
                f"{owner}.empty = True needs vacuumed = True: empty means the VM and FSM forks exist "
                "with zero length, vacuumed = False means they do not exist"
            )
        if not self.vacuumed and self.all_visible_fraction > 0:
            raise SettingError(
                f"{owner}.all_visible_fraction = {self.all_visible_fraction!r} needs vacuumed = True "
                "(without a visibility-map fork no page is all-visible)"
            )
        _check_int(owner, "seed", self.seed, 0, _MAX_SEED)
        if not isinstance(self.indexes, tuple) or not all(isinstance(i, IndexSpec) for i in self.indexes):
            raise SettingError(f"{owner}.indexes = {self.indexes!r} is invalid: allowed a tuple of IndexSpec")
        names = [i.default_name(self.name) for i in self.indexes]
        dup = sorted({n for n in names if names.count(n) > 1} | ({self.name} & set(names)))
        if dup:
            raise SettingError(
                f"{owner}.indexes: index name {dup[0]!r} is used twice (or equals the table's): "
                "give the indexes explicit names"
            )

    # ------------------------------------------------------------------------------ derived
    @property
    def page_capacity(self) -> int:
        """Most tuples a page of this width can hold (fill factor 100)."""
        return self._capacity

    @property
    def fixed_tuples_per_page(self) -> int | None:
        """The per-page line-pointer count when it is the same on every page, else ``None``."""
        tpp = self.tuples_per_page
        if tpp is None:
            return heap_tuples_per_page(self.tuple_width, self.fillfactor)
        if isinstance(tpp, int):
            return tpp
        if tpp[0] == "uniform" and tpp[1] == tpp[2]:
            return int(tpp[1])
        if tpp[0] == "cycle" and len(set(tpp[1:])) == 1:
            return int(tpp[1])
        return None

    @property
    def has_vm(self) -> bool:
        """The VM (and FSM) forks exist."""
        return self.vacuumed and (self.nblocks > 0 or self.empty)

    def index_names(self) -> list[str]:
        return [i.default_name(self.name) for i in self.indexes]

    def replace(self, **changes: Any) -> RelationSpec:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
