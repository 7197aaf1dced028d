"""``build_relation``: put a synthetic table and its indexes into an instance's storage.

The relations are registered straight in the simulated storage (the fixture back door), never
written through the implementation under test: the read path only ever sees fork sizes, and the
scans ask the relations' content objects what the pages hold.

Forks, as PostgreSQL would have them:

* main: ``nblocks`` heap blocks;
* visibility map and free space map: if the table was ``vacuumed`` and has pages —
  ``ceil(nblocks / 32672)`` VM pages and the FSM up to the last heap block's leaf (VACUUM of a
  table without pages creates neither); with ``empty`` they exist but have zero length. A table
  never vacuumed but loaded by INSERT has no VM and an FSM up to the leaf of its second-to-last
  block (pages are recorded as they fill);
* init: for ``unlogged`` relations — empty for the heap, the metapage for a btree, metapage,
  two buckets and the bitmap page for a hash index, the root for GiST;
* an index's main fork: its metapage (btree, hash, SP-GiST, GIN, BRIN, bloom), inner pages and
  leaves or buckets, bitmap and overflow pages, range map and summaries (see ``btree.py``,
  ``hashindex.py``, ``gist.py``, ``spgist.py``, ``gin.py``, ``brin.py``, ``bloom.py``); a BRIN
  index also has the FSM its build recorded its insert pages in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ModelUsageError
from ..storage.relation import ForkNumber, Relation
from .bloom import BloomContent
from .brin import BrinContent
from .btree import BTreeContent
from .gin import GinContent
from .gist import GistContent
from .hashindex import HashContent
from .heap import HeapContent
from .index_common import IndexContent
from .layout import fsm_nblocks, vm_nblocks
from .mixing import seed_words
from .spec import IndexSpec, RelationSpec
from .spgist import SpgistContent

if TYPE_CHECKING:
    from ..instance import Instance

__all__ = ["SyntheticRelation", "build_relation", "heap_fork_sizes", "make_index_content"]

_INDEX_CLASSES: dict[str, type[IndexContent]] = {
    "btree": BTreeContent,
    "hash": HashContent,
    "gist": GistContent,
    "spgist": SpgistContent,
    "gin": GinContent,
    "brin": BrinContent,
    "bloom": BloomContent,
}


def heap_fork_sizes(spec: RelationSpec) -> dict[ForkNumber, int]:
    """The heap's forks and their sizes in blocks."""
    forks = {ForkNumber.MAIN: spec.nblocks}
    if spec.vacuumed and spec.empty:
        forks[ForkNumber.FSM] = 0
        forks[ForkNumber.VM] = 0
    elif spec.vacuumed and spec.nblocks > 0:
        forks[ForkNumber.FSM] = fsm_nblocks(spec.nblocks)
        forks[ForkNumber.VM] = vm_nblocks(spec.nblocks)
    elif not spec.vacuumed and spec.nblocks >= 2:
        # Loaded by INSERT, never vacuumed: each page that filled up was recorded in the FSM
        # (RecordAndGetPageWithFreeSpace), so the FSM reaches the leaf of the second-to-last
        # block; no VM. Measured on an 18.6 server: 2 pages → 3 FSM pages, 4,100 → 4, 10,000 → 5.
        forks[ForkNumber.FSM] = fsm_nblocks(spec.nblocks - 1)
    if spec.unlogged:
        forks[ForkNumber.INIT] = 0
    return forks


def make_index_content(heap: HeapContent, spec: IndexSpec, name: str, position: int) -> IndexContent:
    """The content object of one index (its seed defaults from the table's seed and position)."""
    seed = spec.seed if spec.seed is not None else int(seed_words(heap.spec.seed, position, 0x49)) >> 1
    return _INDEX_CLASSES[spec.kind](heap, spec, name, seed)


@dataclass
class SyntheticRelation:
    """A synthetic table built into an instance: the heap ``Relation``, its indexes, its spec.

    ``heap.content`` is the :class:`HeapContent`; ``indexes`` maps index names to their
    ``Relation`` (content: a :class:`BTreeContent`, :class:`HashContent` or
    :class:`GistContent`). ``grow(n)`` appends heap blocks, as concurrent inserts would.
    """

    heap: Relation
    spec: RelationSpec
    indexes: dict[str, Relation] = field(default_factory=dict)

    @property
    def content(self) -> HeapContent:
        content = self.heap.content
        assert isinstance(content, HeapContent)
        return content

    def index(self, name: str | None = None) -> Relation:
        """The index called ``name`` (or the only/first one)."""
        if not self.indexes:
            raise ModelUsageError(f"relation {self.spec.name!r} has no indexes")
        if name is None:
            return next(iter(self.indexes.values()))
        try:
            return self.indexes[name]
        except KeyError:
            raise ModelUsageError(
                f"relation {self.spec.name!r} has no index {name!r}: allowed {', '.join(self.indexes)}"
            ) from None

    def index_content(self, name: str | None = None) -> IndexContent:
        content = self.index(name).content
        assert isinstance(content, IndexContent)
        return content

    def grow(self, n: int) -> int:
        """Append ``n`` heap blocks (new, not all-visible, unhinted); returns the first new block."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ModelUsageError(f"grow({n!r}) is invalid: allowed a positive number of blocks")
        return self.heap.extend(ForkNumber.MAIN, n)

    def __repr__(self) -> str:
        idx = ", ".join(f"{k}={v.nblocks()}" for k, v in self.indexes.items())
        return f"SyntheticRelation({self.heap!r}{', ' + idx if idx else ''})"


def build_relation(instance: Instance, spec: RelationSpec) -> SyntheticRelation:
    """Create ``spec``'s table (and indexes) in ``instance.storage``; see the module docstring."""
    if not isinstance(spec, RelationSpec):
        raise ModelUsageError(f"build_relation needs a RelationSpec, got {type(spec).__name__}")
    persistence = "u" if spec.unlogged else "p"
    heap_content = HeapContent(spec)
    rel = instance.storage.create_relation(
        spec.name, forks=heap_fork_sizes(spec), content=heap_content, persistence=persistence
    )
    heap_content.bind(rel)
    out = SyntheticRelation(rel, spec)
    for position, ispec in enumerate(spec.indexes):
        name = ispec.default_name(spec.name)
        content = make_index_content(heap_content, ispec, name, position)
        forks = {ForkNumber.MAIN: content.nblocks}
        if ispec.kind == "brin" and content.nblocks > 1:
            # brin_getinsertbuffer and terminate_brin_buildstate record the insert pages.
            forks[ForkNumber.FSM] = fsm_nblocks(content.nblocks)
        if spec.unlogged:
            forks[ForkNumber.INIT] = content.init_nblocks
        irel = instance.storage.create_relation(name, forks=forks, content=content, persistence=persistence)
        content.bind(irel)
        out.indexes[name] = irel
    return out
