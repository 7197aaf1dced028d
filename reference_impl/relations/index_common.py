"""What every synthetic index shares: its page type and the map from key order to heap TIDs.

An index on a synthetic heap has one entry per heap line pointer of the table as built (dead,
unpruned tuples keep their index entries until VACUUM removes them). Entries are identified by
their *key rank* 0 .. T−1, the position in key order. ``EntryMap`` turns ranks into heap tuple
numbers with ``window_permutation`` (the ``correlation`` of the spec sets the window:
``round((1 − correlation) × T)``, so 1 keeps heap order and 0 shuffles the whole table) and tuple
numbers into TIDs with the heap content. Each page then knows the ranks it holds and computes its
TIDs only when a scan asks.

``IndexPage`` is one class for every kind and role, so scans of different access methods handle
pages alike: ``kind`` says what the page is (``meta``, ``root``/``internal``/``leaf`` for trees,
``bucket``/``overflow``/``bitmap`` for hash), with the links its access method follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ModelUsageError
from ..storage.relation import FORK_NAMES, ForkNumber, InvalidBlockNumber, Relation
from .mixing import seed_words, window_permutation

if TYPE_CHECKING:
    from .heap import HeapContent
    from .spec import IndexSpec

__all__ = ["IndexPage", "EntryMap", "IndexContent"]


class IndexPage:
    """One index page: its role, links and the key ranks (hence heap TIDs) it holds.

    Models the page opaque data of ``nbtree.h`` (``btpo_prev``/``btpo_next``, level), ``hash.h``
    (``hasho_prevblkno``/``hasho_nextblkno``, bucket, page type) and ``gist.h`` (leaf flag).
    ``children`` are the downlinks of an inner page (left to right); ``first_rank``/``nentries``
    the entries of a leaf, bucket or overflow page; ``heap_tids()`` their (blocks, offsets).
    Links that do not exist are ``InvalidBlockNumber``. ``items`` and ``tuple_bytes`` describe a
    btree leaf built with posting lists (``nbtdedup.c``): its tuples (a posting list of many heap
    TIDs is one) and their MAXALIGNed bytes, high key included; -1 when every entry is one
    tuple of the index's key width.
    """

    __slots__ = (
        "block",
        "kind",
        "level",
        "is_root",
        "left",
        "right",
        "bucket",
        "children",
        "first_rank",
        "nentries",
        "items",
        "tuple_bytes",
        "_ranks",
        "_index",
    )

    def __init__(
        self,
        index: IndexContent | None,
        block: int,
        kind: str,
        *,
        level: int = 0,
        is_root: bool = False,
        left: int = InvalidBlockNumber,
        right: int = InvalidBlockNumber,
        bucket: int = -1,
        children: npt.NDArray[np.int64] | None = None,
        first_rank: int = 0,
        nentries: int = 0,
        ranks: npt.NDArray[np.int64] | None = None,
        items: int = -1,
        tuple_bytes: int = -1,
    ) -> None:
        self._index = index
        self.block = block
        self.kind = kind
        self.level = level
        self.is_root = is_root
        self.left = left
        self.right = right
        self.bucket = bucket
        self.children = children
        self.first_rank = first_rank
        self.nentries = nentries
        self.items = items
        self.tuple_bytes = tuple_bytes
        self._ranks = ranks

    @property
    def is_leaf(self) -> bool:
        return self.kind in ("leaf", "bucket", "overflow") or (self.kind == "root" and self.level == 0)

    @property
    def next(self) -> int:
        """``hasho_nextblkno`` / ``btpo_next``: the right sibling or next page of a chain."""
        return self.right

    def ranks(self) -> npt.NDArray[np.int64]:
        """Key ranks of the entries on this page."""
        if self._ranks is not None:
            return self._ranks
        return np.arange(self.first_rank, self.first_rank + self.nentries, dtype=np.int64)

    def heap_tids(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(heap blocks, offsets) of this page's entries, in the page's key order."""
        if self.nentries == 0 or self._index is None:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        return self._index.entries.tids_of_ranks(self.ranks())

    def __repr__(self) -> str:
        extra = f", bucket={self.bucket}" if self.bucket >= 0 else ""
        return f"IndexPage({self.block}, {self.kind}, level={self.level}, entries={self.nentries}{extra})"


class EntryMap:
    """Key rank → heap tuple number → heap TID, for one index over one heap.

    ``descending`` (a btree on ``key DESC``): rank *r* in index order is the tuple whose
    ascending key rank is ``T − 1 − r``, so the keys themselves (a server table's ``id``) are
    the ascending ranks either way.

    ``expression`` (an index on ``(id % 100)`` and the like, see ``expression.py``): the tuple
    whose ``id`` is ``k`` (``id`` = its ascending key rank, as above) holds the expression's
    value of ``k``, and index order sorts by that value, equal values by heap TID (tuple
    number), as a btree keeps duplicates (``nbtsort.c``; heap TID is the last key attribute).
    That order is computed once for the whole index, on first use.
    """

    def __init__(
        self,
        heap: HeapContent,
        correlation: float,
        seed: int,
        descending: bool = False,
        expression: tuple[str, int] | None = None,
    ) -> None:
        self.heap = heap
        self.total = heap.total_entries()
        self.window = max(1, round((1.0 - correlation) * self.total))
        self.descending = descending
        self.expression = expression
        self._key = seed_words(seed, 0x494E4458)
        self._sorted: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    def ascending_positions(self, ranks: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Tuple numbers of ascending key ranks (the tuple whose key is ``r``)."""
        return window_permutation(ranks, self.total, self.window, self._key)

    def _expression_order(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(tuple number, expression value) of every entry, in index order."""
        if self._sorted is None:
            assert self.expression is not None
            from .expression import evaluate

            tuples = np.arange(self.total, dtype=np.int64)
            ids = np.empty(self.total, dtype=np.int64)
            ids[self.ascending_positions(tuples)] = tuples
            values = evaluate(self.expression, ids)
            order = np.lexsort((tuples, values)).astype(np.int64)
            self._sorted = (order, values[order])
        return self._sorted

    def heap_positions(self, ranks: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Tuple numbers of the entries at ranks ``ranks`` in index order."""
        if self.expression is not None:
            return self._expression_order()[0][np.asarray(ranks, dtype=np.int64)]
        if self.descending:
            return self.ascending_positions(self.total - 1 - np.asarray(ranks, dtype=np.int64))
        return window_permutation(ranks, self.total, self.window, self._key)

    def keys(self, ranks: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The values the index stores for the entries at ``ranks``: the key (``id``), or the
        expression's value of it."""
        r = np.asarray(ranks, dtype=np.int64)
        if self.expression is not None:
            return self._expression_order()[1][r]
        if self.descending:
            return self.total - 1 - r
        return r

    def key_group_span(self, lo: int, hi: int) -> tuple[int, int]:
        """The ranks whose keys lie between those of ranks ``lo`` and ``hi − 1`` (inclusive):
        ``[lo, hi)`` widened to whole runs of equal keys, as ``key >= a AND key <= b`` selects."""
        if hi <= lo or self.expression is None:
            return lo, hi
        values = self._expression_order()[1]
        first = int(np.searchsorted(values, values[lo], side="left"))
        last = int(np.searchsorted(values, values[hi - 1], side="right"))
        return first, last

    def key_bounds(self, lo: int, hi: int) -> tuple[int, int]:
        """The key values ``[a, b)`` a range scan of ranks ``[lo, hi)`` asks for: ``WHERE key >=
        a AND key < b`` (``key`` the indexed column or expression) selects exactly the ranks
        ``key_group_span(lo, hi)``."""
        if self.expression is not None:
            if not self.total:
                return 0, 0
            values = self._expression_order()[1]
            if hi <= lo:
                a = int(values[min(lo, self.total - 1)])
                return a, a
            return int(values[lo]), int(values[hi - 1]) + 1
        if self.descending:
            return self.total - hi, self.total - lo
        return lo, hi

    def tids_of_ranks(self, ranks: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        r = np.asarray(ranks, dtype=np.int64)
        if r.size == 0:
            return r.copy(), r.copy()
        return self.heap.entry_tids(self.heap_positions(r))


class IndexContent:
    """Base of the synthetic index contents (the ``PageContent`` of an index ``Relation``)."""

    kind = "index"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        self.heap = heap
        self.spec = spec
        self.name = name
        self.seed = seed
        self.entries = EntryMap(heap, spec.correlation, seed, spec.descending, spec.expression)
        self.rel: Relation | None = None
        self.nblocks = 0
        self.init_nblocks = 0

    def bind(self, rel: Relation) -> None:
        self.rel = rel

    def page(self, fork: ForkNumber, block: int) -> IndexPage:
        """The page ``block`` of ``fork`` (``PageContent`` protocol)."""
        size = self.init_nblocks if fork == ForkNumber.INIT else self.nblocks
        if fork not in (ForkNumber.MAIN, ForkNumber.INIT) or not 0 <= block < size:
            raise ModelUsageError(
                f"page {block} of fork {FORK_NAMES[ForkNumber(fork)]} of index {self.name!r} does not "
                f"exist (the fork has {size if fork in (ForkNumber.MAIN, ForkNumber.INIT) else 0} pages)"
            )
        if fork == ForkNumber.INIT:
            return self._init_page(block)
        return self._page(block)

    def _page(self, block: int) -> IndexPage:
        raise ModelUsageError(f"{type(self).__name__} does not describe its pages")

    def _init_page(self, block: int) -> IndexPage:
        raise ModelUsageError(f"{type(self).__name__} has no init fork")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "nblocks": self.nblocks, "entries": self.entries.total}
