"""Storage, segments, devices, page cache and fault plans."""

from __future__ import annotations

import heapq
import resource

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    Device,
    Fault,
    FaultPlan,
    ForkNumber,
    Instance,
    ModelUsageError,
    ReadBeyondEOF,
    ReadIOError,
    SettingError,
    Settings,
)
from reference_impl.storage import DEVICE_PROFILES, DeviceProfile, PageCache, md_max_combine


def test_segment_arithmetic() -> None:
    assert md_max_combine(0) == 131072
    assert md_max_combine(131071) == 1
    assert md_max_combine(131072) == 131072


def test_relations_are_lazy() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    inst = Instance()
    rel = inst.create_relation("huge", 8_388_608)
    assert rel.nblocks() == 8_388_608
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 10_000  # kB: no per-block memory


def test_read_past_the_end_fails_like_mdreadv() -> None:
    inst = Instance(Settings(io_method="sync"))
    rel = inst.create_relation("t", 10)
    be = inst.backend()
    with pytest.raises(ReadBeyondEOF, match="could not read block 10"):
        be.read_buffer(rel, 10)
    be.abort()
    be.check_for_buffer_leaks()


def test_device_latency_parallelism_and_bandwidth() -> None:
    d = Device(DeviceProfile("t", 100, 100, 1000.0, 4))
    done = [d.read(0, 1, b, 1) for b in range(8)]
    # four channels: the first four finish together, the next four one latency later
    assert done[0] < 120 and done[4] >= 200
    big = Device(DeviceProfile("bw", 10, 10, 100.0, 1)).read(0, 1, 0, 128)
    assert big >= 10 + 128 * 8192 / (100 * 1.048576) - 1


def test_hdd_sequential_requests_skip_the_seek() -> None:
    d = Device("hdd")
    t1 = d.read(0, 7, 0, 1)
    t2 = d.read(t1, 7, 1, 1)
    assert t2 - t1 < 200 and t1 >= 8000


def test_device_jitter_is_seeded() -> None:
    prof = DEVICE_PROFILES["nvme"].with_changes(jitter=0.5, name="jit")
    a = [Device(prof, seed=1).read(0, 1, b, 1) for b in range(3)]
    b = [Device(prof, seed=1).read(0, 1, b, 1) for b in range(3)]
    assert a == b


def _old_rule(profile: DeviceProfile, requests: list[tuple[int, int, int]]) -> list[int]:
    """The device's former rule: channels and transfer stage served in arrival order."""
    channels = [0] * profile.channels
    bus_free = 0
    per_block = profile.transfer_us(1)
    out = []
    for at, latency, nblocks in requests:
        start = max(at, channels[0])
        xfer = max(start + latency, bus_free)
        done = max(int(xfer + nblocks * per_block + 0.999999), at + 1)
        bus_free = done
        heapq.heapreplace(channels, done)
        out.append(done)
    return out


class _ByTime:
    """A brute-force device: the earliest start from which a channel is free for the whole
    service, the transfer in the earliest long-enough gap of the stage after the latency."""

    def __init__(self, profile: DeviceProfile) -> None:
        self.profile = profile
        self.service: list[tuple[int, int]] = []
        self.bus: list[tuple[float, int]] = []

    def _busy(self, t: int) -> int:
        return sum(1 for s, e in self.service if s <= t < e)

    def _transfer(self, lat_done: float, nblocks: int, at: int) -> tuple[float, int]:
        x = lat_done
        for s, e in sorted(self.bus):
            end = max(int(x + self.profile.transfer_us(nblocks) + 0.999999), at + 1)
            if e > x and s < end:
                x = e
        return x, max(int(x + self.profile.transfer_us(nblocks) + 0.999999), at + 1)

    def submit(self, at: int, latency: int, nblocks: int) -> int:
        # A start can only become possible where a service ends (or at submission).
        for start in sorted({at} | {e for _, e in self.service if e > at}):
            x, done = self._transfer(start + latency, nblocks, at)
            points = [start] + [s for s, _ in self.service if start < s < done]
            if all(self._busy(t) < self.profile.channels for t in points):
                self.service.append((start, done))
                self.bus.append((x, done))
                return done
        raise AssertionError("unreachable: the last end always frees a channel")


def test_device_an_earlier_request_is_not_delayed_by_a_future_one() -> None:
    # An I/O worker's read handed over for t=1,850 µs, then a backend's write at t=100 µs.
    d = Device(DeviceProfile("t", 1000, 20, 100.0, 4))
    read_done = d.read(1850, 1, 0, 16)
    assert read_done == 1850 + 1000 + 1250  # 16 blocks at 100 MB/s: 1,250 µs
    assert d.write(100, 2, 0, 1) == 100 + 20 + 79  # not after the read's transfer
    # One channel: a request that ends before a booked future service starts runs at once ...
    one = Device(DeviceProfile("one", 1000, 100, 1000.0, 1))
    assert one.read(5000, 1, 0, 1) == 5000 + 1000 + 8
    assert one.write(100, 2, 0, 1) == 100 + 100 + 8
    # ... and one that would overlap it waits for the channel to free.
    assert one.write(4950, 3, 0, 1) == 6008 + 100 + 8


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4),
    st.sampled_from([10, 100, 1000]),
    st.sampled_from([5, 100, 300]),
    st.sampled_from([50.0, 500.0, 5000.0]),
    st.lists(st.tuples(st.integers(0, 3000), st.booleans(), st.integers(1, 16)), min_size=1, max_size=25),
)
def test_device_schedules_by_time_in_any_arrival_order(
    channels: int, read_us: int, write_us: int, mb_s: float, requests: list[tuple[int, bool, int]]
) -> None:
    prof = DeviceProfile("t", read_us, write_us, mb_s, channels)
    d = Device(prof)
    ref = _ByTime(prof)
    for k, (at, is_read, n) in enumerate(requests):
        got = d.read(at, k, 100 * k, n) if is_read else d.write(at, k, 100 * k, n)
        assert got == ref.submit(at, read_us if is_read else write_us, n)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 8),
    st.sampled_from([50.0, 500.0, 5000.0]),
    st.lists(st.tuples(st.integers(0, 300), st.integers(1, 16)), min_size=1, max_size=300),
)
def test_device_monotone_arrivals_keep_the_old_times(
    channels: int, mb_s: float, requests: list[tuple[int, int]]
) -> None:
    prof = DeviceProfile("t", 200, 200, mb_s, channels)
    d = Device(prof)
    at = 0
    timed = []
    got = []
    for k, (gap, n) in enumerate(requests):
        at += gap
        timed.append((at, 200, n))
        got.append(d.read(at, k, 0, n) if k % 2 else d.write(at, k, 0, n))
    assert got == _old_rule(prof, timed)


def test_device_single_channel_hdd_keeps_the_old_times() -> None:
    # Different latencies (sequential vs seek) cannot reorder anything behind one channel.
    prof = DEVICE_PROFILES["hdd"]
    d = Device(prof)
    timed = []
    got = []
    at = 0
    for k in range(200):
        at += (k * 7919) % 9000
        block = k if k % 3 else 10 * k
        latency = prof.sequential_latency_us if k and block == timed[-1][2] else prof.read_latency_us
        got.append(d.read(at, 1, block, 1))
        timed.append((at, latency, block + 1))
    assert got == _old_rule(prof, [(a, lat, 1) for a, lat, _ in timed])


def test_device_bandwidth_and_channels_still_bound_out_of_order_arrivals() -> None:
    order = [(k * 37) % 64 for k in range(64)]  # arrival order is not time order
    bw = Device(DeviceProfile("bw", 10, 10, 100.0, 64))
    ends = [bw.read(10 * k, k, 0, 32) for k in order]
    assert max(ends) >= 64 * bw.bandwidth_bound_us(32)
    ch = Device(DeviceProfile("ch", 1000, 1000, 100_000.0, 4))
    ends = [ch.read(k, k, 0, 1) for k in order]
    assert max(ends) >= 16 * 1000  # 64 requests, 4 at a time, 1 ms each
    # The i-th service to start cannot start before (i // 4) ms; submissions are all before 64 µs.
    assert ch.stats.queue_wait_us >= 4 * 1000 * sum(range(16)) - 64 * 63


def test_device_jitter_is_reproducible_in_any_arrival_order() -> None:
    prof = DEVICE_PROFILES["nvme"].with_changes(jitter=0.5, name="jit", channels=2)
    times = [(k * 7919) % 2000 for k in range(100)]

    def run(seed: int) -> list[int]:
        d = Device(prof, seed=seed)
        return [d.read(t, k, 0, 4) for k, t in enumerate(times)]

    assert run(3) == run(3)
    assert run(3) != run(4)


class _Clock:
    def __init__(self) -> None:
        self.now = 0


def test_device_forgets_intervals_behind_the_clock() -> None:
    clock = _Clock()
    d = Device(DeviceProfile("t", 100, 100, 1000.0, 4), clock=clock)
    for k in range(20_000):
        clock.now = 50 * k
        d.read(clock.now + (3000 if k % 5 == 0 else 0), 1, k, 1)
    # Only the requests still in flight stay booked (pruned when the lists double).
    assert len(d._svc_start) < 2 * 256 and len(d._bus_start) < 2 * 256
    with pytest.raises(ModelUsageError, match="earlier than the clock's"):
        d.write(clock.now - 500, 1, 0, 1)
    with pytest.raises(ModelUsageError, match="already follows another clock"):
        d.attach_clock(_Clock())
    inst = Instance(device=Device("nvme"))
    assert inst.device._clock is inst.clock


def test_bad_device_profile_is_rejected() -> None:
    with pytest.raises(SettingError, match="channels = 0 is out of range"):
        DeviceProfile("x", 10, 10, 10.0, 0)
    with pytest.raises(SettingError, match="unknown device profile 'ssd'"):
        Instance(device="ssd")


def test_page_cache_readahead_and_advice() -> None:
    dev = Device(DeviceProfile("t", 1000, 1000, 1000.0, 8))
    pc = PageCache(dev, readahead_kb=128)
    t = pc.read(0, 1, 0, 1, 1000)
    assert t >= 1000
    # the kernel read ahead: the next sequential page arrives without a new full wait
    t2 = pc.read(t, 1, 1, 1, 1000)
    assert t2 - t < 1000
    pc.advise(t2, 1, 500, 4, 1000)
    assert pc.read(t2 + 5000, 1, 500, 4, 1000) == t2 + 5000


def test_fault_plan_validation_and_ledger() -> None:
    with pytest.raises(SettingError, match="exactly one of block"):
        Fault("eio")
    with pytest.raises(SettingError, match="fault kind 'boom' is invalid"):
        Fault("boom", block=1)
    plan = FaultPlan([Fault("eio", relation="t", block=3)])
    inst = Instance(Settings(io_method="sync"), faults=plan)
    rel = inst.create_relation("t", 10)
    be = inst.backend()
    with pytest.raises(ReadIOError, match=r"could not read blocks 3\.\.3"):
        be.read_buffer(rel, 3)
    assert plan.ledger and plan.ledger[0]["fault"] == "eio"
    be.abort()
    # times=1: the retry succeeds
    assert be.buffer_block(be.read_buffer(rel, 3)) == 3
    assert FaultPlan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()


def test_random_fault_plans_are_seeded() -> None:
    a = FaultPlan.random(5, relation="t", nblocks=100, count=4).to_dict()
    b = FaultPlan.random(5, relation="t", nblocks=100, count=4).to_dict()
    assert a == b and len(a["faults"]) == 4


def test_forks_exist_and_sizes() -> None:
    inst = Instance()
    rel = inst.create_relation("t", forks={ForkNumber.MAIN: 10, ForkNumber.VM: 1})
    assert rel.exists(ForkNumber.VM) and not rel.exists(ForkNumber.FSM)
    assert rel.extend(ForkNumber.MAIN, 5) == 10 and rel.nblocks() == 15
