"""The hypothesis strategies draw what they promise, and the model accepts it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_readstream import strategies as rs
from reference_impl import RELSEG_SIZE, Fault, FaultPlan, Instance, Settings
from reference_impl.relations import RelationSpec, build_relation

NBLOCKS = 500


@given(rs.sequential_blocks(NBLOCKS))
def test_sequential_blocks_are_one_run(blocks: list[int]) -> None:
    assert blocks == list(range(blocks[0], blocks[0] + len(blocks)))
    assert 0 <= blocks[0] and blocks[-1] < NBLOCKS


@given(rs.random_blocks(NBLOCKS, unique=True))
def test_random_unique_blocks(blocks: list[int]) -> None:
    assert len(set(blocks)) == len(blocks) >= 1
    assert all(0 <= b < NBLOCKS for b in blocks)


@given(rs.clustered_blocks(NBLOCKS))
def test_clustered_blocks_ascend_by_cluster(blocks: list[int]) -> None:
    assert blocks and all(0 <= b < NBLOCKS for b in blocks)
    starts = [b for i, b in enumerate(blocks) if i == 0 or blocks[i - 1] + 1 != b]
    assert starts == sorted(starts)


@given(rs.repeated_blocks(NBLOCKS))
def test_repeated_blocks_repeat(blocks: list[int]) -> None:
    assert len(set(blocks)) <= 4 and len(set(blocks)) < len(blocks) <= 64


@given(rs.segment_boundary_blocks(segments=2))
def test_segment_boundary_blocks_straddle_a_boundary(blocks: list[int]) -> None:
    assert blocks == sorted(set(blocks))
    assert any(blocks[0] < k * RELSEG_SIZE <= blocks[-1] for k in (1, 2))
    assert blocks[-1] < 2 * RELSEG_SIZE + 40


@given(rs.block_sequences(3 * RELSEG_SIZE))
def test_block_sequences_fit_the_relation(blocks: list[int]) -> None:
    assert all(0 <= b < 3 * RELSEG_SIZE for b in blocks)


@given(rs.empty_blocks())
def test_empty_blocks(blocks: list[int]) -> None:
    assert blocks == []


@given(rs.settings(tiny_pool=True))
def test_settings_are_valid(s: Settings) -> None:
    assert isinstance(s, Settings)
    assert Settings.from_mapping(s.as_dict()) == s


@given(rs.tiny_pool_settings())
def test_tiny_pools_give_pin_limit_zero_or_one(s: Settings) -> None:
    assert s.pin_limit in (0, 1)


@pytest.mark.parametrize("limit", [0, 1])
def test_tiny_pool_exact_limit(limit: int) -> None:
    @given(rs.tiny_pool_settings(pin_limit=limit))
    @settings(max_examples=20)
    def check(s: Settings) -> None:
        assert s.pin_limit == limit

    check()


@given(rs.device_profiles(jitter=True))
def test_device_profiles_build_devices(profile: object) -> None:
    inst = Instance(device=profile)  # type: ignore[arg-type]
    assert inst.device.profile is profile


@settings(deadline=None, max_examples=25)
@given(rs.relation_specs(max_blocks=300))
def test_relation_specs_build(spec: RelationSpec) -> None:
    rel = build_relation(Instance(), spec)
    assert rel.heap.nblocks() == spec.nblocks <= 300


@given(rs.fault_plans("t", NBLOCKS, foreign_ios=True, cancel=True))
def test_fault_plans_round_trip(plan: FaultPlan) -> None:
    assert all(isinstance(f, Fault) for f in plan.faults) and len(plan.faults) <= 3
    again = FaultPlan.from_dict(plan.to_dict())
    assert (
        again.faults == plan.faults and again.foreign_ios == plan.foreign_ios and again.cancel == plan.cancel
    )
    assert all(f.block is None or f.block < NBLOCKS for f in plan.faults)


@settings(deadline=None, max_examples=30)
@given(data=st.data(), s=rs.settings(tiny_pool=True, io_methods=("sync", "worker")))
def test_composed_strategies_drive_the_reference_stream(data: st.DataObject, s: Settings) -> None:
    """The strategies compose into a real check: the reference returns exactly the blocks asked."""
    from reference_impl import INVALID_BUFFER, InvalidBlockNumber, begin_stream

    blocks = data.draw(rs.block_sequences(NBLOCKS, max_len=40))
    inst = Instance(s)
    rel = inst.create_relation("t", NBLOCKS)
    be = inst.backend()
    it = iter(blocks)
    stream = begin_stream(be, rel, lambda _s, _p: next(it, InvalidBlockNumber))
    got = []
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        got.append(be.buffer_block(buf))
        be.release_buffer(buf)
    stream.end()
    assert got == blocks
    assert not be.pinned_buffers()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rs.sequential_blocks(0), "nblocks = 0 is invalid"),
        (lambda: rs.tiny_pool_settings(pin_limit=2), "pin_limit = 2 is invalid"),
        (lambda: rs.segment_boundary_blocks(segments=0), "segments = 0 is invalid"),
        (lambda: rs.segment_boundary_blocks(max_before=0), "max_before = 0"),
        (lambda: rs.device_profiles(named=False, custom=False), "needs named=True or custom=True"),
        (lambda: rs.relation_specs(shapes=("nope",)), "unknown relation shapes ['nope']"),
    ],
)
def test_bad_arguments(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()  # type: ignore[operator]


def test_importing_strategies_registers_profiles() -> None:
    from hypothesis import settings as hsettings

    for name in ("ci", "dev", "thorough"):
        assert hsettings.get_profile(name) is not None
