"""The I/O worker pool of each version (``method_worker.c``): 18's fixed ``io_workers``, the pool of
19 and later that sizes itself between ``io_min_workers`` and ``io_max_workers``."""

from __future__ import annotations

import pytest

from reference_impl import (
    INVALID_BUFFER,
    DeviceProfile,
    Instance,
    ReadBuffersOperation,
    SettingError,
    Settings,
)
from reference_impl.io.methods import WorkerIOMethod, WorkerIOMethod19
from reference_impl.settings import io_worker_pool

# Reads of 10 ms that the device serves 64 at a time: the workers are the bottleneck.
SLOW = DeviceProfile("slow-10ms", 10_000, 10_000, 100_000.0, 64)


def _reads(inst: Instance, blocks: list[int], gap_us: int = 0) -> list[int]:
    """One-block reads of ``blocks``, started ``gap_us`` apart, then waited for in order:
    their completion times."""
    be = inst.backend()
    rel = inst.relation("t")
    ops = []
    for block in blocks:
        op = ReadBuffersOperation(rel)
        bufs = [INVALID_BUFFER]
        be.start_read_buffers(op, bufs, 0, block, 1, 0)
        assert op.ioh is not None
        ops.append((op, bufs, op.ioh))
        be.cpu(gap_us)
    done = []
    for op, bufs, ioh in ops:
        be.wait_read_buffers(op)
        be.release_buffer(bufs[0])
        done.append(ioh.complete_at)
    return done


def _instance(**settings: object) -> Instance:
    inst = Instance(Settings(debug_io_direct="data", **settings), device=SLOW)  # type: ignore[arg-type]
    inst.create_relation("t", 100_000)
    return inst


def _rounds(done: list[int]) -> int:
    """How many 10 ms rounds a burst of reads took."""
    return len({t // 10_000 for t in done})


def test_18_has_a_fixed_pool_of_io_workers() -> None:
    inst = _instance(version="18")
    assert type(inst.io_method) is WorkerIOMethod and inst.io_method.io_workers == 3
    assert _rounds(_reads(inst, [0, 2, 4, 6, 8, 10])) == 2  # three workers: 3 + 3


def test_19_starts_io_min_workers() -> None:
    for version in ("19", "20devel"):
        inst = _instance(version=version)
        method = inst.io_method
        assert type(method) is WorkerIOMethod19 and method.nworkers == 2
        assert method.launches == [0, 0]
        assert _rounds(_reads(inst, [0, 2, 4, 6, 8, 10])) == 3  # two workers: 2 + 2 + 2
    inst = _instance(version="19", io_min_workers=6, io_max_workers=4)
    assert inst.io_method.nworkers == 4  # never above io_max_workers (maybe_start_io_workers)


def test_19_grows_while_more_reads_wait_than_there_are_workers() -> None:
    """A read every millisecond, each 10 ms on a worker: the queue deepens, the first worker that
    takes a read with more than 2 waiting asks for a worker, and the postmaster launches one at
    io_worker_launch_next_time, 200 ms after start-up (two launches of 100 ms each), then one
    every 100 ms while the request stands, up to io_max_workers."""
    blocks = [2 * i for i in range(1000)]
    inst = _instance(version="19")
    done19 = _reads(inst, blocks, gap_us=1000)
    method = inst.io_method
    assert isinstance(method, WorkerIOMethod19)
    assert method.launches == [0, 0, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000]
    assert method.nworkers == 8
    inst18 = _instance(version="18")
    done18 = _reads(inst18, blocks, gap_us=1000)
    assert max(done19) < max(done18)  # eight workers beat three


def test_19_a_grow_request_lapses_when_the_queue_empties() -> None:
    """Six reads at once ask for a worker (4 wait behind the first two), but they are done in
    30 ms: a worker that finds the queue empty cancels the request, and at 200 ms the postmaster
    launches nothing and clears the signal (maybe_start_io_workers)."""
    inst = _instance(version="19")
    _reads(inst, [0, 2, 4, 6, 8, 10])
    method = inst.io_method
    assert isinstance(method, WorkerIOMethod19)
    # The pool plays its events up to each submission's time (here 100 ms, then 300 ms).
    inst.backend().cpu(100_000 - inst.clock.now)
    _reads(inst, [20])
    assert method.grow_signal_sent and not method.grow
    inst.backend().cpu(200_000)
    _reads(inst, [22])
    assert method.launches == [0, 0] and not method.grow_signal_sent


def test_19_the_highest_worker_times_out_one_after_another() -> None:
    """With io_worker_launch_interval = 0 a grow request takes the pool to io_max_workers at
    once; idle, only the highest worker at or above io_min_workers may time out, and the next
    one's idle time counts from that exit (pgaio_worker_can_timeout)."""
    inst = _instance(
        version="19",
        io_min_workers=1,
        io_max_workers=4,
        io_worker_idle_timeout=1000,
        io_worker_launch_interval=0,
    )
    _reads(inst, [2 * i for i in range(50)], gap_us=1000)
    method = inst.io_method
    assert isinstance(method, WorkerIOMethod19)
    assert method.nworkers == 4 and len(set(method.launches[1:])) == 1
    idle3 = method.free_at[3]  # when the highest worker finished its last read
    inst.backend().cpu(10_000_000)
    _reads(inst, [1001])
    assert method.exits == [idle3 + 1_000_000, idle3 + 2_000_000, idle3 + 3_000_000]
    assert method.nworkers == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"version": "19", "io_workers": 3},
            "io_workers is not a setting of PostgreSQL 19: it has io_min_workers and io_max_workers",
        ),
        (
            {"version": "master", "io_workers": 3},
            "io_workers is not a setting of PostgreSQL 20devel: it has io_min_workers and io_max_workers",
        ),
        (
            {"version": "18", "io_min_workers": 2},
            "io_min_workers is not a setting of PostgreSQL 18: it has io_workers",
        ),
        (
            {"version": "18", "io_worker_idle_timeout": 10},
            "io_worker_idle_timeout is not a setting of PostgreSQL 18: it has io_workers",
        ),
        ({"version": "19", "io_max_workers": 33}, "io_max_workers = 33 is out of range: allowed 1..32"),
    ],
)
def test_a_setting_the_version_lacks_is_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        Settings(**settings)  # type: ignore[arg-type]


def test_each_version_has_its_own_worker_settings() -> None:
    s18 = Settings()
    s19 = Settings(version="19")
    assert (s18.io_workers, s18.io_min_workers) == (3, None)
    assert (s19.io_workers, s19.io_min_workers, s19.io_max_workers) == (None, 2, 8)
    assert (s19.io_worker_idle_timeout, s19.io_worker_launch_interval) == (60_000, 100)
    assert "io_min_workers" not in s18.as_dict() and "io_workers" not in s19.as_dict()
    # A copy for another version takes that version's own worker settings.
    assert s18.replace(version="19") == s19
    assert Settings(version="19", io_max_workers=4).replace(version="18") == s18
    assert Settings.parse_assignments(["version=master", "io_max_workers=4"]).io_max_workers == 4
    assert (
        Settings.from_mapping({"version": "19", "io_worker_idle_timeout": "2s"}).io_worker_idle_timeout
        == 2000
    )


def _cold_sequential_scan(settings: Settings, nblocks: int = 3072) -> tuple[Instance, float]:
    """A cold streamed sequential scan on nvme with direct I/O: the instance and the fraction of
    the device's bandwidth bound it reached."""
    from reference_impl import InvalidBlockNumber, begin_stream

    inst = Instance(settings, device="nvme", seed=1)
    rel = inst.create_relation("t", nblocks)
    be = inst.backend()
    blocks = iter(range(nblocks))
    stream = begin_stream(be, rel, lambda s, p: next(blocks, InvalidBlockNumber))
    t0 = inst.clock.now
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        be.release_buffer(buf)
    stream.end()
    return inst, inst.device.bandwidth_bound_us(nblocks) / (inst.clock.now - t0)


def test_19_default_pool_never_grows_for_one_sequential_stream() -> None:
    """The conformance suite's bandwidth bound (90 %) holds with three workers, 18's default; 19's
    pool starts with io_min_workers = 2 and a single stream never asks for a third, however long
    the server has run: a worker asks only when the queue is deeper than the pool (IoWorkerMain),
    and the default pin limit (94 blocks, six 16-block reads) leaves at most two reads queued."""
    base = {"io_method": "worker", "debug_io_direct": "data", "io_combine_limit": 16}
    _, eff18 = _cold_sequential_scan(Settings(**base))  # type: ignore[arg-type]
    inst19, eff19 = _cold_sequential_scan(Settings(version="19", **base))  # type: ignore[arg-type]
    assert isinstance(inst19.io_method, WorkerIOMethod19)
    assert inst19.io_method.launches == [0, 0] and not inst19.io_method.grow_signal_sent
    assert eff18 >= 0.9 and 0.6 < eff19 < 0.7
    three = Settings(version="19", **base, **io_worker_pool("19", 3))  # type: ignore[arg-type]
    inst3, eff3 = _cold_sequential_scan(three)
    assert inst3.io_method.launches == [0, 0, 0] and eff3 == eff18  # type: ignore[attr-defined]


def test_io_worker_pool_in_each_version_terms() -> None:
    assert io_worker_pool("18", 5) == {"io_workers": 5}
    for version in ("19", "20devel", "master"):
        assert io_worker_pool(version, 5) == {"io_min_workers": 5, "io_max_workers": 5}
    inst = _instance(version="19", **io_worker_pool("19", 5))
    assert inst.io_method.launches == [0] * 5  # type: ignore[attr-defined]
    assert _rounds(_reads(inst, list(range(0, 20, 2)))) == 2  # five workers: 5 + 5, no growth
