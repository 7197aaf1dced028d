"""A hash index as ``_hash_init`` and later inserts lay it out (``hashpage.c``, ``hashovfl.c``).

Physical layout of an index whose buckets all exist since the build (no split since):

* block 0: the metapage;
* blocks 1 .. B: the primary page of bucket *b* at ``BUCKET_TO_BLKNO(b) = b + 1``;
* block B + 1: the first (only, below 32768 overflow pages) bitmap page, which is overflow bit 0;
* blocks B + 2 ...: overflow pages in the order they were allocated, each appended to the end of
  its bucket's chain (``hasho_nextblkno``). ``grouped`` allocates bucket 0's chain first, then
  bucket 1's, ... (a build that sorted by bucket, or chains grown one bucket at a time);
  ``interleaved`` allocates them in a seeded random order of buckets, as inserts spread over
  time do.

Entries: every heap line pointer of the table as built goes to bucket ``mix(tuple) mod B`` (a
hash of the key, uniform over buckets); a bucket's entries are spread evenly over its primary page
and its overflow pages. The assignment is computed once, on first use, for the whole index (an
index is sized by the heap it indexes, so this is proportional to what it describes).

With ``key_hash`` (``hashint4``/``hashint8``) the bucket of an entry is PostgreSQL's own: the
hash of its key (the key rank, which is the ``id`` a server's table holds, or the value of the
index's ``expression`` of it, e.g. ``(id % 100)``) mapped by
``_hash_hashkey2bucket``, so with a bucket count that is not a power of two the buckets below
the split point take twice the keys. With ``overflow="build"`` the chains are those ``CREATE
INDEX`` makes (``hashbuild`` inserts in heap order below its sort threshold of
``maintenance_work_mem`` in blocks): a page takes ``HASH_ITEMS_PER_PAGE`` int4 entries
(``PageGetFreeSpace`` must leave room for one more 16-byte tuple), the entry that finds its
bucket's last page full makes ``_hash_addovflpage`` allocate the next overflow block (the first
free bitmap bit), and each chain page holds its bucket's entries in insertion order. This is
the layout of a build that does not split: with more entries than 307 times the buckets
``_hash_init`` sizes (``layout.hash_build_splits``, e.g. 615 to 920 entries for 2 buckets),
``CREATE INDEX`` splits buckets while it inserts, which is not modelled (the server builder
refuses to verify such a spec).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..errors import SettingError
from ..storage.relation import InvalidBlockNumber
from .heap import HeapContent
from .index_common import IndexContent, IndexPage
from .layout import hash_initial_buckets
from .mixing import mix64, seed_words
from .spec import IndexSpec

__all__ = ["HashContent", "HASH_INIT_FORK_BLOCKS", "HASH_ITEMS_PER_PAGE"]

HASH_INIT_FORK_BLOCKS = 4  # metapage, 2 buckets, bitmap page (_hash_init for 0 tuples)
#: int4 (or int8 hash) entries a hash page takes: (8192 - 24 - 16 - 4) // 20 = 407.
HASH_ITEMS_PER_PAGE = 407
_MAX_OVERFLOW = 32767  # overflow bits one bitmap page tracks, minus the bitmap page itself


class HashContent(IndexContent):
    """A synthetic hash index (``hash``): metapage, buckets, bitmap page, overflow chains."""

    kind = "hash"

    def __init__(self, heap: HeapContent, spec: IndexSpec, name: str, seed: int) -> None:
        super().__init__(heap, spec, name, seed)
        total = self.entries.total
        self.nbuckets = spec.buckets if spec.buckets is not None else hash_initial_buckets(total)
        self._assigned: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        built_owners: npt.NDArray[np.int64] | None = None
        ov = spec.overflow
        if ov == "build":
            built_owners = self._build_chains()
            self.overflow_counts = np.bincount(built_owners, minlength=self.nbuckets).astype(np.int64)
        elif isinstance(ov, tuple) and ov and ov[0] == "blocks":
            # The numbering given: overflow page k (block B + 2 + k) belongs to bucket ov[k + 1]
            # and follows that bucket's earlier overflow pages in its chain.
            built_owners = np.asarray(ov[1:], dtype=np.int64)
            if built_owners.size and int(built_owners.max()) >= self.nbuckets:
                raise SettingError(
                    f"IndexSpec.overflow names bucket {int(built_owners.max())} but the index has "
                    f"{self.nbuckets} buckets: allowed 0..{self.nbuckets - 1}"
                )
            self.overflow_counts = np.bincount(built_owners, minlength=self.nbuckets).astype(np.int64)
        else:
            self.overflow_counts = self._overflow_counts(spec, self.nbuckets, seed)
        novfl = int(self.overflow_counts.sum())
        if novfl > _MAX_OVERFLOW:
            raise SettingError(
                f"IndexSpec.overflow gives {novfl} overflow pages: allowed at most {_MAX_OVERFLOW} "
                "(one bitmap page)"
            )
        self.bitmap_block = self.nbuckets + 1
        self.nblocks = self.nbuckets + 2 + novfl
        self.init_nblocks = HASH_INIT_FORK_BLOCKS
        # chain_blocks[b]: overflow blocks of bucket b in chain order.
        owners = np.repeat(np.arange(self.nbuckets, dtype=np.int64), self.overflow_counts)
        if built_owners is not None:
            owners = built_owners
        elif spec.overflow_layout == "interleaved" and owners.size > 1:
            rng = np.random.default_rng([seed & 0xFFFFFFFF, seed >> 32, 0x4F56])
            owners = owners[rng.permutation(owners.size)]
        self._owner = owners  # bucket owning overflow page k (block nbuckets + 2 + k)
        order = np.argsort(owners, kind="stable")
        starts = np.concatenate(([0], np.cumsum(self.overflow_counts)))
        self._chain_start = starts
        self._chain_blocks = (order + self.nbuckets + 2).astype(np.int64)
        # position of overflow page k within its bucket's chain (1-based; 0 = primary page)
        self._chain_pos = np.empty(owners.size, dtype=np.int64)
        self._chain_pos[order] = np.arange(owners.size) - starts[owners[order]] + 1

    @staticmethod
    def _overflow_counts(spec: IndexSpec, nbuckets: int, seed: int) -> npt.NDArray[np.int64]:
        ov = spec.overflow
        if isinstance(ov, tuple) and ov and all(isinstance(v, int) for v in ov):
            if len(ov) != nbuckets:
                raise SettingError(
                    f"IndexSpec.overflow lists {len(ov)} per-bucket counts but the index has {nbuckets} buckets"
                )
            return np.asarray(ov, dtype=np.int64)
        if isinstance(ov, int):
            return np.full(nbuckets, ov, dtype=np.int64)
        rng = np.random.default_rng([seed & 0xFFFFFFFF, seed >> 32, 0x4F43])
        if ov[0] == "poisson":
            return np.minimum(rng.poisson(float(ov[1]), nbuckets), _MAX_OVERFLOW).astype(np.int64)
        return rng.integers(int(ov[1]), int(ov[2]) + 1, nbuckets).astype(np.int64)

    # ------------------------------------------------------------------------------ structure
    def bucket_block(self, bucket: int) -> int:
        """``BUCKET_TO_BLKNO`` for an index whose buckets all date from the build."""
        if not 0 <= bucket < self.nbuckets:
            raise SettingError(f"bucket {bucket} is out of range: allowed 0..{self.nbuckets - 1}")
        return bucket + 1

    def chain(self, bucket: int) -> list[int]:
        """The bucket's pages in chain order: primary page, then its overflow pages."""
        s, e = self._chain_start[bucket], self._chain_start[bucket + 1]
        return [self.bucket_block(bucket), *(int(b) for b in self._chain_blocks[s:e])]

    def _build_chains(self) -> npt.NDArray[np.int64]:
        """``CREATE INDEX``'s chains: each bucket's entries in heap (insertion) order, and the
        bucket owning each overflow page in allocation order (see the module docstring)."""
        from .hashfuncs import HASH_FUNCTIONS, hashkey_to_bucket

        total = self.entries.total
        ranks = np.arange(total, dtype=np.int64)
        assert self.spec.key_hash is not None
        buckets = hashkey_to_bucket(
            HASH_FUNCTIONS[self.spec.key_hash](self.entries.keys(ranks)), self.nbuckets
        )
        inserted = ranks[np.argsort(self.entries.heap_positions(ranks), kind="stable")]
        ins_buckets = buckets[inserted]
        order = np.argsort(ins_buckets, kind="stable")  # by bucket, insertion order within
        starts = np.searchsorted(ins_buckets[order], np.arange(self.nbuckets + 1)).astype(np.int64)
        within = np.empty(total, dtype=np.int64)
        within[order] = np.arange(total, dtype=np.int64) - starts[ins_buckets[order]]
        self._assigned = (inserted[order], starts)
        # The entry that finds its bucket's last page full allocates the next overflow page.
        allocating = np.flatnonzero((within > 0) & (within % HASH_ITEMS_PER_PAGE == 0))
        return ins_buckets[allocating].astype(np.int64)

    def _assignment(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(ranks sorted by bucket, start index of each bucket) over all entries."""
        if self._assigned is None and self.spec.key_hash is not None:
            from .hashfuncs import HASH_FUNCTIONS, hashkey_to_bucket

            ranks = np.arange(self.entries.total, dtype=np.int64)
            keys = self.entries.keys(ranks)
            buckets = hashkey_to_bucket(HASH_FUNCTIONS[self.spec.key_hash](keys), self.nbuckets)
            order = np.argsort(buckets, kind="stable")
            starts = np.searchsorted(buckets[order], np.arange(self.nbuckets + 1))
            self._assigned = (order, starts.astype(np.int64))
        if self._assigned is None:
            total = self.entries.total
            ranks = np.arange(total, dtype=np.int64)
            # Equal keys (an index on an expression) hash alike, so they share a bucket.
            hashed = self.entries.keys(ranks).astype(np.uint64)
            buckets = (mix64(hashed, seed_words(self.seed, 0x4255434B)) % np.uint64(self.nbuckets)).astype(
                np.int64
            )
            order = np.argsort(buckets, kind="stable")
            starts = np.searchsorted(buckets[order], np.arange(self.nbuckets + 1))
            self._assigned = (order, starts.astype(np.int64))
        return self._assigned

    def bucket_ranks(self, bucket: int) -> npt.NDArray[np.int64]:
        order, starts = self._assignment()
        return order[starts[bucket] : starts[bucket + 1]]

    # ------------------------------------------------------------------------------ pages
    def _chain_page(self, bucket: int, pos: int, block: int, kind: str) -> IndexPage:
        chain = self.chain(bucket)
        ranks = self.bucket_ranks(bucket)
        npages = len(chain)
        if self.spec.overflow == "build":
            # Filled in insertion order: every page but the last is full.
            lo = min(pos * HASH_ITEMS_PER_PAGE, ranks.size)
            hi = min((pos + 1) * HASH_ITEMS_PER_PAGE, ranks.size)
        else:
            lo = pos * ranks.size // npages
            hi = (pos + 1) * ranks.size // npages
        mine = ranks[lo:hi]
        return IndexPage(
            self,
            block,
            kind,
            bucket=bucket,
            left=chain[pos - 1] if pos > 0 else InvalidBlockNumber,
            right=chain[pos + 1] if pos + 1 < npages else InvalidBlockNumber,
            nentries=int(mine.size),
            ranks=mine,
        )

    def _page(self, block: int) -> IndexPage:
        if block == 0:
            return IndexPage(self, 0, "meta")
        if block <= self.nbuckets:
            return self._chain_page(block - 1, 0, block, "bucket")
        if block == self.bitmap_block:
            return IndexPage(self, block, "bitmap")
        k = block - self.nbuckets - 2
        bucket = int(self._owner[k])
        return self._chain_page(bucket, int(self._chain_pos[k]), block, "overflow")

    def _init_page(self, block: int) -> IndexPage:
        kinds = {0: "meta", 1: "bucket", 2: "bucket", 3: "bitmap"}
        return IndexPage(None, block, kinds[block], bucket=block - 1 if block in (1, 2) else -1)
