"""Storage, segments, devices, page cache and fault plans."""

from __future__ import annotations

import resource

import pytest

from reference_impl import (
    Device,
    Fault,
    FaultPlan,
    ForkNumber,
    Instance,
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
