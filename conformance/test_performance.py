"""Performance properties, measured on the virtual clock (so without noise).

What streaming is for, stated as properties an implementation should have in the model:

* on latency storage a streamed scan is never slower than reading the same blocks one at a time
  with ``ReadBuffer`` (the unstreamed code the seed threads replace), beyond 2% for the stream's
  own bookkeeping where it has no latency to hide;
* a cold sequential stream with ``io_combine_limit`` 16 and an asynchronous ``io_method`` reaches
  at least 90% of the device's bandwidth bound (``Device.bandwidth_bound_us``);
* a scattered cold stream with ``effective_io_concurrency`` N keeps at least min(N, device
  channels) reads in flight at some moment (the read log's submit/complete intervals overlap),
  where the device's latency leaves the backend time to submit N reads (on NVMe, 80 µs, at a few
  µs of CPU per submission, a few dozen at most).

They need the ``virtual-time`` capability: elapsed time is the harness clock's, and the reads are
the harness's read log, never the implementation's own figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reference_impl import INVALID_BUFFER, Instance, InvalidBlockNumber
from reference_impl.settings import io_worker_pool

pytestmark = pytest.mark.readstream_requires("stream-api", "virtual-time")


def _run_stream(factory: Any, backend: Any, rel: Any, blocks: list[int]) -> int:
    """Elapsed simulated µs for a consumer that takes every buffer of a stream over ``blocks``."""
    it = iter(blocks)
    stream = factory(rel, lambda s, p: next(it, InvalidBlockNumber))
    clock = backend.clock
    t0 = clock.now
    n = 0
    while True:
        buf = stream.next_buffer()
        if buf == INVALID_BUFFER:
            break
        backend.release_buffer(buf)
        n += 1
    elapsed = clock.now - t0
    stream.end()
    assert n == len(blocks)
    return elapsed


def _run_unstreamed(settings: Any, storage: Any, seed: int, nblocks: int, blocks: list[int]) -> int:
    """The same blocks read one at a time (``ReadBufferExtended``) on an identical fresh instance."""
    inst = Instance(settings, device=storage, seed=seed)
    rel = inst.create_relation("t", nblocks)
    be = inst.backend()
    t0 = inst.clock.now
    for b in blocks:
        be.release_buffer(be.read_buffer(rel, b))
    return inst.clock.now - t0


def _blocks(pattern: str, nblocks: int, n: int, seed: int) -> list[int]:
    if pattern == "sequential":
        return list(range(n))
    rng = np.random.default_rng(seed)
    return [int(b) for b in rng.choice(nblocks, size=n, replace=False)]


def _max_overlap(reads: list[Any]) -> int:
    events = sorted([(r.submit_us, 1) for r in reads] + [(r.complete_us, -1) for r in reads])
    depth = best = 0
    for _, step in events:
        depth += step
        best = max(best, depth)
    return best


# Where streaming cannot hide any latency (io_method=sync with direct I/O and scattered blocks:
# no advice, no overlap) the stream's own per-buffer bookkeeping is all that differs. The
# sample-scan thread measured 1-2% on fully cached data; 2% is the slack allowed.
_SLOWER_TOLERANCE = 1.02

_SLOWER_CASES = [
    pytest.param(
        storage,
        {"io_method": m, "debug_io_direct": dio},
        pattern,
        id=f"{storage}-{m}-{dio or 'buffered'}-{pattern}",
    )
    for storage, m, dio, pattern in [
        ("nvme", "sync", "", "sequential"),
        ("nvme", "worker", "data", "random"),
        ("nvme", "io_uring", "data", "sequential"),
        ("sata-ssd", "sync", "data", "random"),
        ("sata-ssd", "worker", "", "sequential"),
        ("cloud-1ms", "sync", "", "random"),
        ("cloud-1ms", "worker", "data", "sequential"),
        ("cloud-1ms", "io_uring", "", "random"),
        ("hdd", "sync", "data", "sequential"),
        ("hdd", "worker", "", "random"),
    ]
]


@pytest.mark.readstream_invariant("performance", "SHOULD")
@pytest.mark.parametrize(
    ("readstream_storage", "readstream_settings", "pattern"),
    _SLOWER_CASES,
    indirect=["readstream_storage", "readstream_settings"],
)
def test_streamed_never_slower_than_one_block_at_a_time(
    readstream_stream_factory: Any,
    readstream_instance: Any,
    readstream_backend: Any,
    readstream_settings: Any,
    readstream_storage: Any,
    readstream_test_seed: int,
    readstream_stats: Any,
    pattern: str,
) -> None:
    """A cold stream over the blocks takes no longer than ``ReadBuffer`` one at a time (2% slack)."""
    nblocks = 20_000
    blocks = _blocks(pattern, nblocks, 300, readstream_test_seed)
    rel = readstream_instance.create_relation("t", nblocks)
    streamed = _run_stream(readstream_stream_factory, readstream_backend, rel, blocks)
    unstreamed = _run_unstreamed(
        readstream_settings, readstream_storage, readstream_test_seed, nblocks, blocks
    )
    readstream_stats.record(streamed_us=streamed, unstreamed_us=unstreamed, ratio=streamed / unstreamed)
    assert streamed <= unstreamed * _SLOWER_TOLERANCE, f"streamed {streamed} µs, unstreamed {unstreamed} µs"


def _with_pool(workers: int, **gucs: Any) -> Any:
    """``gucs`` and a pool of exactly ``workers`` I/O workers in the terms of the test's version
    (``io_workers`` on 18, ``io_min_workers = io_max_workers`` from 19 on): a function of the
    settings so far, which the ``readstream_settings`` parameter accepts."""

    def settings(base: Any) -> dict[str, Any]:
        return {**gucs, **io_worker_pool(base.version, workers)}

    return settings


# The bound is the stream's: it holds where the I/O method is not the bottleneck. A worker does
# one read at a time, and on these devices a 16-block read takes latency + transfer, about three
# transfers, so three workers keep the device busy: 18's default io_workers. 19's pool sizes
# itself from io_min_workers = 2, and for this scan it never grows (method_worker.c, IoWorkerMain:
# a worker asks for one more only when the queue is deeper than the pool, and the default pin
# limit of 94 blocks keeps at most two reads queued behind two workers), so at the defaults 19
# moves 65 % of the bandwidth; the test states a pool of three in each version's terms.
_BANDWIDTH_POOL = 3

_BANDWIDTH_CASES = [
    pytest.param(
        storage,
        _with_pool(_BANDWIDTH_POOL, io_method=m, debug_io_direct=dio, io_combine_limit=16),
        id=f"{storage}-{m}-{dio or 'buffered'}",
    )
    for storage, m, dio in [
        ("nvme", "worker", "data"),
        ("nvme", "io_uring", ""),
        ("sata-ssd", "worker", ""),
        ("sata-ssd", "io_uring", "data"),
        ("cloud-1ms", "worker", "data"),
        ("cloud-1ms", "io_uring", ""),
    ]
]


@pytest.mark.readstream_invariant("performance", "MAY")
@pytest.mark.parametrize(("readstream_storage", "readstream_settings"), _BANDWIDTH_CASES, indirect=True)
def test_cold_sequential_stream_reaches_the_bandwidth_bound(
    readstream_stream_factory: Any,
    readstream_instance: Any,
    readstream_backend: Any,
    readstream_stats: Any,
) -> None:
    """With ``io_combine_limit`` 16 and asynchronous I/O a cold sequential stream runs at 90% or
    more of the device's bandwidth bound."""
    n = 3072
    rel = readstream_instance.create_relation("t", n)
    elapsed = _run_stream(readstream_stream_factory, readstream_backend, rel, list(range(n)))
    bound = readstream_instance.device.bandwidth_bound_us(n)
    readstream_stats.record(elapsed_us=elapsed, bound_us=bound, efficiency=bound / elapsed)
    assert bound / elapsed >= 0.9, f"{elapsed} µs for {n} blocks; the bandwidth bound is {bound:.0f} µs"


_OVERLAP_CASES = [
    pytest.param(
        storage,
        # 32 workers, so that the pool never limits the overlap to fewer than N reads.
        _with_pool(32, io_method=m, effective_io_concurrency=n, debug_io_direct="data"),
        id=f"{storage}-{m}-eic{n}",
    )
    for storage, m, n in [
        ("nvme", "io_uring", 1),
        ("nvme", "io_uring", 8),
        ("nvme", "worker", 16),
        ("nvme", "io_uring", 16),
        ("cloud-1ms", "worker", 4),
        ("cloud-1ms", "io_uring", 64),
        ("hdd", "io_uring", 8),
        ("sata-ssd", "worker", 32),
    ]
]


@pytest.mark.readstream_invariant("performance", "SHOULD")
@pytest.mark.parametrize(("readstream_storage", "readstream_settings"), _OVERLAP_CASES, indirect=True)
def test_scattered_stream_overlaps_reads(
    readstream_stream_factory: Any,
    readstream_instance: Any,
    readstream_backend: Any,
    readstream_settings: Any,
    readstream_test_seed: int,
    readstream_stats: Any,
) -> None:
    """With ``effective_io_concurrency`` N a scattered cold stream has min(N, channels) reads in
    flight at once at some point, and never more than N."""
    nblocks = 200_000
    blocks = _blocks("random", nblocks, 400, readstream_test_seed)
    rel = readstream_instance.create_relation("t", nblocks)
    _run_stream(readstream_stream_factory, readstream_backend, rel, blocks)
    reads = [r for r in readstream_backend.stats.read_log if r.relation == rel.name]
    depth = _max_overlap(reads)
    n = readstream_settings.effective_io_concurrency
    channels = readstream_instance.device.profile.channels
    readstream_stats.record(max_overlap=depth, eic=n, channels=channels)
    assert min(n, channels) <= depth <= max(1, n), (
        f"at most {depth} reads overlapped (eic {n}, {channels} channels)"
    )
