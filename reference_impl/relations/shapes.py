"""``SHAPES``: named relation specs used by tests, benchmarks and the seed threads' figures.

Each shape is a ``RelationSpec`` named after its key (hyphens become underscores), so several
shapes can live in one instance. Where a seed thread describes its table, the shape follows the
description; what the thread leaves open is chosen and said here, and ``spec.replace(...)``
adapts a shape without renaming it.

* ``tiny`` — 8 blocks, 100-byte rows (61 per page);
* ``small`` — 1,000 blocks with a btree on the rows in heap order;
* ``bulk`` — 4,097 blocks: one more than ``NBuffers / 4`` with the default 128 MB pool, so the
  heap scans use the BULKREAD ring and synchronized scanning;
* ``checksums-thread`` — the online-checksums thread's ~7.5 GiB table of 956,815 blocks
  (100-byte rows; the thread does not say), vacuumed;
* ``sample-thread-64gib`` — the sample-scan thread's 64 GiB table: 8,388,608 blocks, one row per
  page (a 5,000-byte row fills a page alone), never vacuumed (the thread loads and samples);
* ``pgstattuple-thread`` — the streamify thread's ``pgstattuple_small`` table: ~20k rows of
  ~1.4 kB (5 per page) on 4,138 blocks, vacuumed with no page all-visible, so that
  ``pgstattuple_approx`` reads every heap block plus VM page 0 (the thread: 4,139 reads);
* ``hash-vacuum-thread`` — the streamify thread's ``hash_vacuum`` table: 1,000,050 int4 rows
  (226 per page, 4,425 blocks) with 10 % of them deleted and a hash index of 3,258 buckets grown
  by splits, one overflow page on each of buckets 1210..2047 (the layout that reproduces the
  thread's 4,662 → 1,612 reads, docs/scans/maintenance.md);
* ``segment-crossing`` — 131,080 blocks: just over one 1 GiB segment.
"""

from __future__ import annotations

from types import MappingProxyType

from .spec import IndexSpec, RelationSpec

__all__ = ["SHAPES", "shape"]


# The streamify thread's hash index as docs/scans/maintenance.md infers it from the published
# read counts: built before the data was loaded, grown by bucket splits to 3,258 buckets; the 838
# buckets not yet split in the current doubling (1210..2047) hold ~488 entries, one overflow page.
_HASH_THREAD_OVERFLOW = tuple(1 if 1210 <= b <= 2047 else 0 for b in range(3258))


def _named(key: str, **fields: object) -> RelationSpec:
    return RelationSpec(name=key.replace("-", "_"), **fields)  # type: ignore[arg-type]


SHAPES: MappingProxyType[str, RelationSpec] = MappingProxyType(
    {
        "tiny": _named("tiny", nblocks=8, seed=1),
        "small": _named("small", nblocks=1000, seed=2, indexes=(IndexSpec("btree"),)),
        "bulk": _named("bulk", nblocks=4097, seed=3),
        "checksums-thread": _named("checksums-thread", nblocks=956_815, seed=4),
        "sample-thread-64gib": _named(
            "sample-thread-64gib", nblocks=8_388_608, tuple_width=5000, vacuumed=False, seed=5
        ),
        "pgstattuple-thread": _named("pgstattuple-thread", nblocks=4138, tuple_width=1400, seed=6),
        "hash-vacuum-thread": _named(
            "hash-vacuum-thread",
            nblocks=4425,
            tuple_width=4,
            dead_fraction=0.1,
            indexes=(IndexSpec("hash", buckets=3258, overflow=_HASH_THREAD_OVERFLOW),),
            seed=7,
        ),
        "segment-crossing": _named("segment-crossing", nblocks=131_080, seed=8),
    }
)


def shape(name: str) -> RelationSpec:
    """The spec of a named shape (``SettingError`` listing the names when unknown)."""
    from ..errors import SettingError

    try:
        return SHAPES[name]
    except KeyError:
        raise SettingError(f"unknown relation shape {name!r}: allowed {', '.join(SHAPES)}") from None
