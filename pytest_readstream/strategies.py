"""Hypothesis strategies for read-stream tests: block sequences, settings, devices, relations, faults.

Each strategy draws plain model objects (``list[int]`` of block numbers, ``reference_impl.Settings``,
``DeviceProfile``, ``RelationSpec``, ``FaultPlan``) so a failing example prints as something that
can be pasted into a test. They compose::

    from hypothesis import given
    from pytest_readstream import strategies as rs

    @given(blocks=rs.block_sequences(nblocks=1000), settings=rs.settings(tiny_pool=True))
    def test_stream_returns_every_block(blocks, settings): ...

Block sequences come in the shapes a stream's look-ahead treats differently: sequential runs
(combined into large reads), random blocks (one read each), clusters (short runs at scattered
places, as a bitmap heap scan produces), repeats (the same block again and again, which must not
be read twice), the empty sequence (a stream that ends at once), and runs that cross a 1 GiB
segment boundary (block 131072 and its multiples), where a read must be split.

``settings(tiny_pool=True)`` also draws pools so small that a backend's pin limit is 0 or 1
(``shared_buffers // (MaxBackends + auxiliary processes)``), the corner where a stream must still
make progress with one pin.

Importing this module registers the plugin's hypothesis profiles (``ci``, ``dev``, ``thorough``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .hypothesis_profiles import register_profiles

__all__ = [
    "SEGMENT_BLOCKS",
    "block_numbers",
    "sequential_blocks",
    "random_blocks",
    "clustered_blocks",
    "repeated_blocks",
    "empty_blocks",
    "segment_boundary_blocks",
    "block_sequences",
    "settings",
    "all_settings",
    "tiny_pool_settings",
    "device_profiles",
    "relation_specs",
    "faults",
    "fault_plans",
]

register_profiles()

SEGMENT_BLOCKS = 131072  # RELSEG_SIZE: blocks per 1 GiB segment file
_MAX_BLOCK = 0xFFFFFFFE


# ------------------------------------------------------------------------------------ blocks
def _check_nblocks(nblocks: int) -> None:
    if not isinstance(nblocks, int) or not 1 <= nblocks <= _MAX_BLOCK + 1:
        raise ValueError(f"nblocks = {nblocks!r} is invalid: allowed 1..{_MAX_BLOCK + 1}")


def block_numbers(nblocks: int) -> st.SearchStrategy[int]:
    """One block number of a relation of ``nblocks`` blocks."""
    _check_nblocks(nblocks)
    return st.integers(0, nblocks - 1)


def sequential_blocks(nblocks: int, *, max_len: int = 256) -> st.SearchStrategy[list[int]]:
    """One run of consecutive blocks ``[start, start + n)`` inside the relation (``n >= 1``)."""
    _check_nblocks(nblocks)

    @st.composite
    def run(draw: Any) -> list[int]:
        length = draw(st.integers(1, min(max_len, nblocks)))
        start = draw(st.integers(0, nblocks - length))
        return list(range(start, start + length))

    return run()


def random_blocks(nblocks: int, *, max_len: int = 128, unique: bool = False) -> st.SearchStrategy[list[int]]:
    """Blocks in any order (``unique``: no block twice)."""
    _check_nblocks(nblocks)
    return st.lists(
        block_numbers(nblocks),
        min_size=1,
        max_size=min(max_len, nblocks) if unique else max_len,
        unique=unique,
    )


def clustered_blocks(
    nblocks: int, *, max_clusters: int = 12, max_cluster_len: int = 32, ascending: bool = True
) -> st.SearchStrategy[list[int]]:
    """Short runs of consecutive blocks at scattered places (a bitmap heap scan's pattern)."""
    _check_nblocks(nblocks)

    @st.composite
    def clusters(draw: Any) -> list[int]:
        count = draw(st.integers(1, max_clusters))
        runs = []
        for _ in range(count):
            length = draw(st.integers(1, min(max_cluster_len, nblocks)))
            start = draw(st.integers(0, nblocks - length))
            runs.append((start, length))
        if ascending:
            runs.sort()
        out: list[int] = []
        for start, length in runs:
            out.extend(range(start, start + length))
        return out

    return clusters()


def repeated_blocks(nblocks: int, *, max_len: int = 64) -> st.SearchStrategy[list[int]]:
    """A few distinct blocks, each repeated, consecutively or not (``004_read_stream.pl``)."""
    _check_nblocks(nblocks)

    if max_len < 2:
        raise ValueError(f"max_len = {max_len!r} is invalid: a repeat needs at least 2 blocks")

    @st.composite
    def repeats(draw: Any) -> list[int]:
        distinct = draw(st.lists(block_numbers(nblocks), min_size=1, max_size=4, unique=True))
        seq = draw(st.lists(st.sampled_from(distinct), min_size=1, max_size=max_len - 1))
        # At least one block comes twice: right after itself (the same buffer again) or later.
        seq.insert(draw(st.integers(0, len(seq))), draw(st.sampled_from(seq)))
        return seq

    return repeats()


def empty_blocks() -> st.SearchStrategy[list[int]]:
    """The empty sequence: the callback ends at once."""
    return st.just([])


def segment_boundary_blocks(
    *, segments: int = 2, max_before: int = 40, max_after: int = 40, gaps: bool = True
) -> st.SearchStrategy[list[int]]:
    """An ascending run across a segment boundary (a multiple of 131072), possibly with holes.

    The run starts before the boundary and ends at or after it; with ``gaps``, up to three blocks
    inside it (the boundary block included) are left out, so reads must both split at the boundary
    and restart after a hole. The relation needs ``segments * 131072 + max_after`` blocks.
    """
    if segments < 1:
        raise ValueError(f"segments = {segments!r} is invalid: allowed >= 1")
    if max_before < 1 or max_after < 1:
        raise ValueError(f"max_before = {max_before!r}, max_after = {max_after!r}: allowed >= 1 each")

    @st.composite
    def around(draw: Any) -> list[int]:
        boundary = SEGMENT_BLOCKS * draw(st.integers(1, segments))
        before = draw(st.integers(1, max_before))
        after = draw(st.integers(1, max_after))
        blocks = list(range(boundary - before, boundary + after))
        if gaps and len(blocks) > 2:
            inner = blocks[1:-1]
            holes = draw(st.sets(st.sampled_from(inner), max_size=min(3, len(inner))))
            blocks = [b for b in blocks if b not in holes]
        return blocks

    return around()


def block_sequences(
    nblocks: int, *, max_len: int = 128, include_empty: bool = True
) -> st.SearchStrategy[list[int]]:
    """Any of the shapes above that fits in ``nblocks`` (segment runs only if the relation has them)."""
    _check_nblocks(nblocks)
    options = [
        sequential_blocks(nblocks, max_len=max_len),
        random_blocks(nblocks, max_len=max_len),
        clustered_blocks(nblocks),
        repeated_blocks(nblocks, max_len=max_len),
    ]
    if include_empty:
        options.append(empty_blocks())
    segments = (nblocks - 41) // SEGMENT_BLOCKS
    if segments >= 1:
        options.append(segment_boundary_blocks(segments=segments))
    return st.one_of(options)


# ------------------------------------------------------------------------------------ settings
_OTHER_BACKENDS = 16 + 8 + 10 + 2 + 38  # autovacuum slots, workers, WAL senders, special, auxiliary


def tiny_pool_settings(*, pin_limit: int | None = None, versions: tuple[str, ...] = ("18", "master")) -> Any:
    """``Settings`` whose pool leaves each backend a pin limit of 0 or 1 (or exactly ``pin_limit``).

    ``GetPinLimit() = shared_buffers // (MaxBackends + NUM_AUXILIARY_PROCS)``: the draw picks
    ``max_connections``, then the range of ``shared_buffers`` that gives the wanted limit.
    """
    from reference_impl import Settings

    if pin_limit is not None and pin_limit not in (0, 1):
        raise ValueError(f"pin_limit = {pin_limit!r} is invalid: allowed 0, 1 or None (either)")

    @st.composite
    def tiny(draw: Any) -> Any:
        limit = pin_limit if pin_limit is not None else draw(st.sampled_from((0, 1)))
        max_connections = draw(st.integers(1, 200))
        total = max_connections + _OTHER_BACKENDS
        low = max(16, limit * total)
        high = (limit + 1) * total - 1
        shared_buffers = draw(st.integers(low, high))
        return Settings(
            version=draw(st.sampled_from(versions)),
            shared_buffers=shared_buffers,
            max_connections=max_connections,
            io_method=draw(st.sampled_from(("sync", "worker"))),
            # Drawn apart: io_combine_limit above io_max_combine_limit is a valid setting.
            io_combine_limit=draw(st.integers(1, 128)),
            io_max_combine_limit=draw(st.sampled_from((1, 4, 16, 128, draw(st.integers(1, 128))))),
            effective_io_concurrency=draw(st.integers(0, 16)),
        )

    return tiny()


def _io_worker_settings(draw: Any, version: str, counts: Any) -> dict[str, Any]:
    """The I/O worker pool's size as ``version`` has it: PostgreSQL 18's ``io_workers``, or 19's
    ``io_min_workers`` and ``io_max_workers`` (both drawn from ``counts``, in either order)."""
    from reference_impl.settings import VERSION_SETTINGS
    from reference_impl.versions import canonical_version

    if "io_workers" in VERSION_SETTINGS[canonical_version(version)]:
        return {"io_workers": draw(counts)}
    return {"io_min_workers": draw(counts), "io_max_workers": draw(counts)}


def _guc_integers(name: str, *, high: int | None = None) -> Any:
    """A GUC's whole range (``GUC_RANGES``, PostgreSQL 18's GUC table), its ends and small values
    weighted up: ranges run to millions, and the interesting values sit at the ends."""
    from reference_impl.settings import GUC_RANGES

    lo, hi = (int(v) for v in GUC_RANGES[name][:2])
    if high is not None:
        hi = min(hi, high)
    return st.one_of(
        st.sampled_from(sorted({lo, min(lo + 1, hi), hi})),
        st.integers(lo, min(hi, lo + 64)),
        st.integers(lo, hi),
    )


def all_settings(
    *, versions: tuple[str, ...] = ("18", "master"), max_shared_buffers: int | None = None
) -> Any:
    """``Settings`` over PostgreSQL's whole space: every GUC the model has, over its whole range
    (``reference_impl.settings.GUC_RANGES``), with the relations between related GUCs kept.

    The relations: ``io_combine_limit`` and ``io_max_combine_limit`` are drawn independently (the
    first may exceed the second; the server then uses the smaller); ``max_connections +
    autovacuum_worker_slots + max_worker_processes + max_wal_senders`` stays within
    ``MaxBackends``' 262143; ``vacuum_buffer_usage_limit`` is 0 or 128 kB .. 16 GB. These are
    settings objects only: a pool of a billion buffers is never built from them (pass
    ``max_shared_buffers`` to draw pools a test can afford to simulate).
    """
    from reference_impl import Settings

    @st.composite
    def whole(draw: Any) -> Any:
        # MaxBackends = their sum + 2 special workers must stay at most 262143.
        backends = {}
        budget = 262141
        for name, keep in (
            ("max_connections", 1),
            ("autovacuum_worker_slots", 0),
            ("max_worker_processes", 0),
            ("max_wal_senders", 0),
        ):
            value = draw(_guc_integers(name, high=budget - keep))
            backends[name] = value
            budget -= value
        vbul = draw(st.one_of(st.just(0), st.integers(128, 16777216), st.sampled_from((128, 256, 2048))))
        version = draw(st.sampled_from(versions))
        return Settings(
            version=version,
            shared_buffers=draw(_guc_integers("shared_buffers", high=max_shared_buffers)),
            io_combine_limit=draw(_guc_integers("io_combine_limit")),
            io_max_combine_limit=draw(_guc_integers("io_max_combine_limit")),
            effective_io_concurrency=draw(_guc_integers("effective_io_concurrency")),
            maintenance_io_concurrency=draw(_guc_integers("maintenance_io_concurrency")),
            io_method=draw(st.sampled_from(("sync", "worker", "io_uring"))),
            **_io_worker_settings(draw, version, _guc_integers("io_workers")),
            debug_io_direct=draw(st.sampled_from(("", "data"))),
            vacuum_buffer_usage_limit=vbul,
            synchronize_seqscans=draw(st.booleans()),
            zero_damaged_pages=draw(st.booleans()),
            ignore_checksum_failure=draw(st.booleans()),
            **backends,
        )

    return whole()


def settings(
    *,
    versions: tuple[str, ...] = ("18", "master"),
    io_methods: tuple[str, ...] = ("sync", "worker", "io_uring"),
    tiny_pool: bool = False,
    max_shared_buffers: int = 65536,
) -> Any:
    """Valid ``reference_impl.Settings`` over the GUCs that shape a stream.

    Draws ``io_combine_limit`` / ``io_max_combine_limit`` (1..128 each, so the effective limit is
    sometimes capped), both I/O concurrencies (0 included: synchronous streams), the pool size,
    ``io_method``, ``io_workers`` and ``debug_io_direct``. With ``tiny_pool``, also pools where the
    pin limit is 0 or 1 (:func:`tiny_pool_settings`).
    """
    from reference_impl import Settings

    if not 16 <= max_shared_buffers:
        raise ValueError(f"max_shared_buffers = {max_shared_buffers!r} is invalid: allowed >= 16")

    @st.composite
    def general(draw: Any) -> Any:
        version = draw(st.sampled_from(versions))
        return Settings(
            version=version,
            shared_buffers=draw(st.integers(16, max_shared_buffers)),
            io_combine_limit=draw(st.integers(1, 128)),
            io_max_combine_limit=draw(st.sampled_from((16, 32, 128, draw(st.integers(1, 128))))),
            effective_io_concurrency=draw(st.integers(0, 64)),
            maintenance_io_concurrency=draw(st.integers(0, 64)),
            io_method=draw(st.sampled_from(io_methods)),
            **_io_worker_settings(draw, version, st.integers(1, 8)),
            debug_io_direct=draw(st.sampled_from(("", "data"))),
        )

    if tiny_pool:
        return st.one_of(general(), tiny_pool_settings(versions=versions))
    return general()


def device_profiles(*, named: bool = True, custom: bool = True, jitter: bool = False) -> Any:
    """``DeviceProfile`` objects: the named ones and/or random latency/bandwidth/channels."""
    from reference_impl import DEVICE_PROFILES, DeviceProfile

    options = []
    if named:
        options.append(st.sampled_from(sorted(DEVICE_PROFILES.values(), key=lambda p: p.name)))
    if custom:
        options.append(
            st.builds(
                DeviceProfile,
                name=st.just("custom"),
                read_latency_us=st.integers(1, 20_000),
                write_latency_us=st.integers(1, 20_000),
                bandwidth_mb_s=st.floats(10.0, 5000.0, allow_nan=False),
                channels=st.integers(1, 128),
                sequential_latency_us=st.one_of(st.none(), st.integers(0, 200)),
                jitter=st.floats(0.0, 1.0) if jitter else st.just(0.0),
            )
        )
    if not options:
        raise ValueError("device_profiles() needs named=True or custom=True")
    return st.one_of(options)


# ------------------------------------------------------------------------------------ relations
def relation_specs(*, shapes: tuple[str, ...] | None = None, max_blocks: int = 4096) -> Any:
    """``reference_impl.relations.RelationSpec`` objects of at most ``max_blocks`` blocks.

    Half are named shapes (``shapes``, default all of ``SHAPES``) resized and reseeded; half are
    drawn field by field: row width, dead tuples, visibility-map coverage and pattern, a btree.
    Pass ``shapes=()`` for drawn fields only.
    """
    from ._relations import spec_strategy

    return spec_strategy(shapes=shapes, max_blocks=max_blocks)


# ------------------------------------------------------------------------------------ faults
def faults(
    relation: str | None,
    nblocks: int,
    *,
    kinds: tuple[str, ...] = ("eio", "short_read", "checksum", "latency"),
) -> Any:
    """One ``reference_impl.Fault`` on a block of the relation (or on the k-th read)."""
    from reference_impl import Fault

    _check_nblocks(nblocks)

    @st.composite
    def one(draw: Any) -> Any:
        kind = draw(st.sampled_from(kinds))
        by_block = kind == "checksum" or draw(st.booleans())
        where: dict[str, Any] = (
            {"block": draw(block_numbers(nblocks))} if by_block else {"nth_read": draw(st.integers(1, 64))}
        )
        return Fault(
            kind,
            relation=relation,
            times=draw(st.sampled_from((1, 1, 2, None))),
            short_blocks=draw(st.integers(1, 8)),
            extra_us=draw(st.integers(1, 50_000)) if kind == "latency" else 0,
            **where,
        )

    return one()


def fault_plans(
    relation: str,
    nblocks: int,
    *,
    max_faults: int = 3,
    kinds: tuple[str, ...] = ("eio", "short_read", "checksum", "latency"),
    foreign_ios: bool = False,
    cancel: bool = False,
    seed: int | None = None,
) -> Any:
    """A ``reference_impl.FaultPlan`` for ``relation``: faults, optionally foreign I/Os and a cancel."""
    from reference_impl import CancelAt, FaultPlan, ForeignIO

    _check_nblocks(nblocks)

    @st.composite
    def plan(draw: Any) -> Any:
        fs = draw(st.lists(faults(relation, nblocks, kinds=kinds), max_size=max_faults))
        fios = []
        if foreign_ios:
            for _ in range(draw(st.integers(0, 2))):
                n = draw(st.integers(1, min(4, nblocks)))
                fios.append(
                    ForeignIO(
                        relation,
                        draw(st.integers(0, nblocks - n)),
                        n,
                        starts_at_us=draw(st.integers(0, 500)),
                        duration_us=draw(st.integers(1, 5000)),
                        fails=draw(st.booleans()),
                    )
                )
        cancel_at = CancelAt(draw(st.integers(0, nblocks))) if cancel and draw(st.booleans()) else None
        return FaultPlan(fs, foreign_ios=fios, cancel=cancel_at, seed=seed)

    return plan()
