"""Synthetic relations: tables and indexes described in a few fields, generated lazily.

Scans need relations to read, and the seed threads' relations are large (a 64 GiB table of
8,388,608 blocks, a 7.5 GiB one) or specific (a hash index with its overflow chains). Storing
pages is out of the question, and so is generating them up front. This package describes a
relation declaratively and makes its pages on demand::

    from reference_impl import Instance
    from reference_impl.relations import RelationSpec, IndexSpec, build_relation, SHAPES

    inst = Instance()
    rel = build_relation(inst, RelationSpec(nblocks=10_000, dead_fraction=0.05,
                                            all_visible_fraction=0.5, vm_pattern="runs",
                                            indexes=(IndexSpec("btree", correlation=0.9),)))
    rel.heap                      # the heap Relation, registered in inst.storage as "t"
    rel.content.page(ForkNumber.MAIN, 42)   # HeapPage: nlive, ndead, max_offset, offsets, VM bits
    rel.index("t_btree").content.page(ForkNumber.MAIN, 0)   # the btree metapage
    rel.grow(100)                 # concurrent inserts: 100 new heap blocks

How it fits together::

    RelationSpec ──build_relation──> SyntheticRelation
      (spec.py)       (build.py)       .heap     Relation(main, fsm, vm[, init]) ─ content: HeapContent
      IndexSpec ─────────────────────> .indexes  Relation(main[, init])          ─ content: BTreeContent
                                                                                   / HashContent / GistContent
    layout.py: page arithmetic (tuples per page, VM/FSM sizes, btree and hash sizing)
    mixing.py: counter-based randomness (keyed mixer, windowed permutation)
    heap.py:   heap / VM / FSM pages in chunks of 1024 blocks, seeded by (seed, chunk), LRU-cached
    btree.py, hashindex.py, gist.py: physical layouts as CREATE INDEX produces them
    shapes.py: SHAPES, the named specs (tiny, small, bulk, the seed threads' tables)

Determinism: every number comes from the spec's seed and the block (or chunk, run, bucket) it
concerns, so describing the same relation twice gives the same pages, accessed in any order.
Memory: a heap costs a bounded cache of chunks whatever its size; an index costs a few arrays
proportional to its own page count (and, for hash indexes, its entry count) once it is used.
"""

from .bloom import BloomContent
from .brin import BrinContent
from .btree import BTreeContent, nbtsort_layout, parent_pages, tree_height
from .build import SyntheticRelation, build_relation, heap_fork_sizes
from .gin import GinContent, gin_sorted_build_layout
from .gist import GistContent, gist_sorted_layout
from .hashindex import HashContent
from .heap import CHUNK_BLOCKS, FSMPage, HeapContent, HeapPage, VMPage
from .index_common import EntryMap, IndexContent, IndexPage
from .layout import (
    FSM_SLOTS_PER_PAGE,
    HEAPBLOCKS_PER_VM_PAGE,
    MAX_HEAP_TUPLES_PER_PAGE,
    fsm_leaf_block,
    fsm_logical_to_physical,
    fsm_nblocks,
    hash_build_splits,
    hash_initial_buckets,
    heap_tuples_per_page,
    vm_block,
    vm_nblocks,
)
from .shapes import SHAPES, shape
from .spec import INDEX_KINDS, VM_PATTERNS, IndexSpec, RelationSpec
from .spgist import SpgistContent

__all__ = [
    "RelationSpec",
    "IndexSpec",
    "INDEX_KINDS",
    "VM_PATTERNS",
    "build_relation",
    "SyntheticRelation",
    "heap_fork_sizes",
    "SHAPES",
    "shape",
    "HeapContent",
    "HeapPage",
    "VMPage",
    "FSMPage",
    "CHUNK_BLOCKS",
    "IndexContent",
    "IndexPage",
    "EntryMap",
    "BTreeContent",
    "HashContent",
    "GistContent",
    "SpgistContent",
    "GinContent",
    "BrinContent",
    "BloomContent",
    "gin_sorted_build_layout",
    "nbtsort_layout",
    "parent_pages",
    "tree_height",
    "gist_sorted_layout",
    "heap_tuples_per_page",
    "vm_block",
    "vm_nblocks",
    "fsm_leaf_block",
    "fsm_logical_to_physical",
    "fsm_nblocks",
    "hash_build_splits",
    "hash_initial_buckets",
    "MAX_HEAP_TUPLES_PER_PAGE",
    "HEAPBLOCKS_PER_VM_PAGE",
    "FSM_SLOTS_PER_PAGE",
]
