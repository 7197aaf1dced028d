"""Unit tests of reference_impl.sampling against the vectors of sampling.md.

The oracles here are the specification's test vectors (several confirmed on a live
server) and small, independent transcriptions written in the tests themselves.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.sampling import (
    INVALID_BLOCK_NUMBER,
    BlockSampler,
    PgPrng,
    ReservoirState,
    RowReservoir,
    SamplingError,
    StrideSampler,
    SystemRowsSampler,
    SystemTimeSampler,
    analyze_sample_blocks,
    analyze_targrows,
    bernoulli_cutoff,
    bernoulli_sample_tids,
    bernoulli_tuple_selected,
    hash_block_offset_seed,
    hash_block_seed,
    hash_bytes_uint32,
    hashfloat8,
    percent_as_float4,
    random_relative_prime,
    sample_method_switches,
    sampler_prng,
    stride_plan,
    stride_visit_order,
    system_block_selected,
    system_cutoff,
    system_rows_ntuples,
    system_sample_block_chunks,
    system_sample_blocks,
    system_time_millis,
)

U32 = st.integers(0, 2**32 - 1)
PERCENT = st.floats(0, 100, width=32)  # SQL real


def _unsigned(signed: int) -> int:
    return signed & 0xFFFFFFFF


# --------------------------------------------------------------------------
# hash_bytes and hashfloat8 (sampling.md sections 1 and 2)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([0, 0], 4017521692),
        ([1, 0], 1656029872),
        ([2, 0], 1255784394),
        ([3, 0], 3470302067),
        ([1, 2, 3], 1738594973),
        ([5, 376496956], 1473079828),
    ],
)
def test_hash_vectors(words: list[int], expected: int) -> None:
    assert hash_bytes_uint32(words) == expected


def test_vectorised_hash_matches_vectors() -> None:
    got = hash_block_seed(np.arange(4, dtype=np.uint32), 0)
    assert got.dtype == np.uint32
    assert got.tolist() == [4017521692, 1656029872, 1255784394, 3470302067]
    assert hash_block_offset_seed(1, [2], 3).tolist() == [1738594973]


@settings(max_examples=60, deadline=None)
@given(st.lists(U32, min_size=1, max_size=50), U32)
def test_hash_block_seed_equals_scalar(blocks: list[int], seed: int) -> None:
    got = hash_block_seed(np.array(blocks, dtype=np.uint64), seed)
    assert got.tolist() == [hash_bytes_uint32([b, seed]) for b in blocks]


@settings(max_examples=60, deadline=None)
@given(U32, st.lists(st.integers(0, 2048), min_size=1, max_size=40), U32)
def test_hash_block_offset_seed_equals_scalar(block: int, offs: list[int], seed: int) -> None:
    got = hash_block_offset_seed(block, offs, seed)
    assert got.tolist() == [hash_bytes_uint32([block, o, seed]) for o in offs]


def test_hash_rejects_values_outside_uint32() -> None:
    with pytest.raises(SamplingError, match="4294967296"):
        hash_bytes_uint32([1, 2**32])
    with pytest.raises(SamplingError, match="-1"):
        hash_block_seed(np.array([0, -1]), 0)
    with pytest.raises(SamplingError, match="dtype"):
        hash_block_seed(np.array([0.5]), 0)
    with pytest.raises(SamplingError, match="seed"):
        hash_block_seed([1], -3)


@pytest.mark.parametrize(
    ("x", "signed"),
    [
        (0.0, 0),
        (-0.0, 0),
        (1.0, 376496956),
        (2.0, 1216037193),
        (3.0, -1954644132),
        (0.4, 1879225839),
        (123.5, 1777334152),
        (-1.0, 1360688392),
        (math.nan, -1275764840),
        (math.inf, -2133226302),
    ],
)
def test_hashfloat8_table(x: float, signed: int) -> None:
    assert hashfloat8(x) == _unsigned(signed)


def test_hashfloat8_canonicalises_every_nan_and_accepts_ints() -> None:
    import struct

    payload_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF0000000000123))[0]
    assert math.isnan(payload_nan)
    assert hashfloat8(payload_nan) == hashfloat8(math.nan) == 3019202456
    assert hashfloat8(3) == hashfloat8(3.0)
    for bad in ("1", True, None):
        with pytest.raises(SamplingError):
            hashfloat8(bad)  # type: ignore[arg-type]
    with pytest.raises(SamplingError, match="float8"):
        hashfloat8(10**400)


# --------------------------------------------------------------------------
# PRNG (section 4)
# --------------------------------------------------------------------------


def test_prng_vectors() -> None:
    prng = PgPrng(0)
    assert [prng.next_u64() for _ in range(3)] == [
        0xDEC90D521E93E35D,
        0x6D33AC6F18895E08,
        0xAB21904EEC6FA48A,
    ]
    prng = PgPrng(12345)
    assert [prng.double() for _ in range(3)] == [
        0.538891489821298,
        0.4761989761121803,
        0.8786398136099147,
    ]
    prng = PgPrng()
    prng.fseed(0.5)
    assert [prng.double() for _ in range(3)] == [
        0.9851677175347999,
        0.825301858027981,
        0.12974610012450416,
    ]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_prng_derived_outputs(seed: int) -> None:
    a, b, c = PgPrng(seed), PgPrng(seed), PgPrng(seed)
    raw = a.next_u64()
    assert b.uint32() == raw >> 32
    assert c.double() == (raw >> 12) / 2.0**52
    assert 0.0 <= c.double() < 1.0


def test_sampler_random_fract_skips_zero() -> None:
    # With s0 = 0 the first output is exactly 0, so pg_prng_double returns 0.0.
    zero_first = PgPrng.from_state(0, 1)
    assert zero_first.double() == 0.0
    second = zero_first.double()
    assert PgPrng.from_state(0, 1).sampler_random_fract() == second > 0.0


def test_prng_all_zero_state_replaced() -> None:
    assert PgPrng.from_state(0, 0).state == (0x5851F42D4C957F2D, 0x14057B7EF767814F)


def test_prng_validation() -> None:
    with pytest.raises(SamplingError, match="18446744073709551616"):
        PgPrng(2**64)
    for bad in (1.5, math.nan, -1.0000001):
        with pytest.raises(SamplingError, match=r"\[-1, 1\]"):
            PgPrng().fseed(bad)
    with pytest.raises(SamplingError, match="sampler seed"):
        sampler_prng(2**32)


def test_fseed_negative_seed_wraps_to_uint64() -> None:
    negative = PgPrng()
    negative.fseed(-0.5)
    expected = PgPrng((-int((2**52 - 1) * 0.5)) & (2**64 - 1))
    assert negative.state == expected.state


# --------------------------------------------------------------------------
# SYSTEM and BERNOULLI (section 3)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "cutoff"),
    [
        (50, 2147483648),
        (100.0 / 11, 390451569),
        (0.1, 4294967),
        (1, 42949673),
        (100, 2**32),
        (0, 0),
        (-0.0, 0),
        (100.000001, 2**32),  # rounds to real 100
        # 2**32*p/100 lands exactly on .5: rint rounds half to even.
        (25 / 2**31, 0),
        (150 / 2**32, 2),
        (250 / 2**32, 2),
    ],
)
def test_cutoffs(percent: float, cutoff: int) -> None:
    assert system_cutoff(percent) == cutoff
    assert bernoulli_cutoff(percent) == cutoff


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "between 0 and 100"),
        (-0.5, "between 0 and 100"),
        (100.1, "between 0 and 100"),
        (math.inf, "between 0 and 100"),
        (1e39, "overflows type real"),
        (1e-50, "underflows type real"),
        ("50", "real number"),
        (True, "real number"),
    ],
)
def test_percent_errors(value: object, message: str) -> None:
    with pytest.raises(SamplingError, match=message):
        system_cutoff(value)  # type: ignore[arg-type]


def test_percent_is_a_float4() -> None:
    assert percent_as_float4(100.0 / 11) == 9.090909004211426
    assert percent_as_float4(0.99999999) == 1.0


def test_system_regression_cases() -> None:
    assert system_sample_blocks(4, 50, hashfloat8(0)).tolist() == [1, 2]
    assert system_sample_blocks(4, 100.0 / 11, 0).size == 0
    blocks = system_sample_blocks(3000, 7.3, hashfloat8(42.25))
    assert blocks.size == 218
    assert blocks[:7].tolist() == [29, 76, 92, 104, 105, 112, 124]


def test_system_extremes() -> None:
    assert system_sample_blocks(1000, 100, 99).tolist() == list(range(1000))
    assert system_sample_blocks(1000, 0, 99).size == 0
    assert system_sample_blocks(0, 50, 1).size == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3000), PERCENT, U32, st.integers(1, 700))
def test_system_chunked_equals_unchunked_and_scalar(
    nblocks: int, percent: float, seed: int, chunk: int
) -> None:
    whole = system_sample_blocks(nblocks, percent, seed, chunk_blocks=1 << 20)
    chunks = list(system_sample_block_chunks(nblocks, percent, seed, chunk_blocks=chunk))
    assert all(0 < c.size <= chunk for c in chunks)
    joined = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint32)
    assert joined.tolist() == whole.tolist()
    cutoff = system_cutoff(percent)
    assert whole.tolist() == [b for b in range(nblocks) if system_block_selected(b, seed, cutoff)]


def test_system_chunks_are_lazy_for_the_largest_relation() -> None:
    chunks = system_sample_block_chunks(0xFFFFFFFF, 1, 5, chunk_blocks=4096)
    first = next(chunks)
    assert first.dtype == np.uint32 and first.size and int(first.max()) < 4096


def test_system_argument_errors_are_raised_at_call_time() -> None:
    with pytest.raises(SamplingError, match="nblocks"):
        system_sample_block_chunks(2**32, 10, 0)
    with pytest.raises(SamplingError, match="chunk_blocks"):
        system_sample_block_chunks(10, 10, 0, chunk_blocks=0)
    with pytest.raises(SamplingError, match="cutoff"):
        system_block_selected(1, 1, 2**32 + 1)


def test_bernoulli_regression_cases() -> None:
    layout = [3, 3, 3, 1]
    got = bernoulli_sample_tids(layout, 50, hashfloat8(0)).tolist()
    assert got == [[1, 2], [1, 3], [2, 1], [2, 2], [2, 3]]
    assert bernoulli_sample_tids(layout, 5.5, 0).tolist() == [[2, 2]]
    assert len(bernoulli_sample_tids(np.ones(3000, dtype=int), 3.7, hashfloat8(-17))) == 112


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=30), PERCENT, U32)
def test_bernoulli_vectorised_equals_scalar(max_offsets: list[int], percent: float, seed: int) -> None:
    cutoff = bernoulli_cutoff(percent)
    expected = [
        [b, o]
        for b, top in enumerate(max_offsets)
        for o in range(1, top + 1)
        if hash_bytes_uint32([b, o, seed]) < cutoff
    ]
    got = bernoulli_sample_tids(np.array(max_offsets, dtype=np.int64), percent, seed)
    assert got.tolist() == expected
    for b, top in enumerate(max_offsets):
        per_block = bernoulli_tuple_selected(b, top, seed, cutoff)
        assert per_block.tolist() == [o for bb, o in expected if bb == b]


def test_bernoulli_validation() -> None:
    with pytest.raises(SamplingError, match="max_offset"):
        bernoulli_tuple_selected(0, 2049, 0, 10)
    with pytest.raises(SamplingError, match="max_offsets"):
        bernoulli_sample_tids([1, -1], 10, 0)
    with pytest.raises(SamplingError, match="1-D"):
        bernoulli_sample_tids([[1]], 10, 0)


@pytest.mark.parametrize(
    ("method", "percent", "bulkread", "pagemode", "sync"),
    [
        ("SYSTEM", 1, True, True, False),
        ("system", 0.9, False, True, False),
        ("system", 0.99999999, True, True, False),  # float4 rounds it to 1
        ("bernoulli", 24.9, True, False, True),
        ("bernoulli", 25, True, True, True),
        ("system_rows", None, True, True, False),
        ("system_time", None, True, True, False),
    ],
)
def test_switches(method: str, percent: float | None, bulkread: bool, pagemode: bool, sync: bool) -> None:
    sw = sample_method_switches(method, percent)
    assert (sw.use_bulkread, sw.use_pagemode, sw.allow_sync) == (
        bulkread,
        pagemode,
        sync,
    )


def test_switch_errors() -> None:
    with pytest.raises(SamplingError, match="unknown sampling method"):
        sample_method_switches("random", 1)
    with pytest.raises(SamplingError, match="percentage argument"):
        sample_method_switches("system")
    with pytest.raises(SamplingError, match="takes no percentage"):
        sample_method_switches("system_rows", 5)
    with pytest.raises(SamplingError, match="between 0 and 100"):
        sample_method_switches("bernoulli", 200)


# --------------------------------------------------------------------------
# SYSTEM_ROWS / SYSTEM_TIME (sections 5 and 6)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "nblocks", "plan", "visits"),
    [
        (0, 3000, (2610, 1279), [889, 2168, 447, 1726, 5, 1284]),
        (12345, 3000, (1616, 1489), [105, 1594, 83, 1572]),
        (4294967295, 17, (1, 7), [8, 15, 5, 12, 2]),
        (77, 1, (0, 1), [0]),
    ],
)
def test_stride_vectors(seed: int, nblocks: int, plan: tuple[int, int], visits: list[int]) -> None:
    assert stride_plan(seed, nblocks) == plan
    assert stride_visit_order(seed, nblocks)[: len(visits)].tolist() == visits
    sampler = StrideSampler(seed)
    got = [sampler.next_block(nblocks) for _ in visits]
    assert got == visits
    assert (sampler.firstblock, sampler.step, sampler.nblocks) == (*plan, nblocks)


def _drain(sampler: StrideSampler, nblocks: int) -> list[int]:
    out = []
    while (blk := sampler.next_block(nblocks)) != INVALID_BLOCK_NUMBER:
        out.append(blk)
    return out


@settings(max_examples=40, deadline=None)
@given(U32, st.integers(1, 2500))
def test_stride_visits_a_permutation(seed: int, nblocks: int) -> None:
    visited = _drain(StrideSampler(seed), nblocks)
    assert sorted(visited) == list(range(nblocks))
    assert visited == stride_visit_order(seed, nblocks).tolist()
    first, step = stride_plan(seed, nblocks)
    assert math.gcd(step, nblocks) == 1 and 0 <= first < nblocks


def test_stride_rescan_reuses_plan_and_ignores_growth() -> None:
    sampler = StrideSampler(42)
    first_scan = _drain(sampler, 100)
    sampler.begin_scan()
    assert _drain(sampler, 100) == first_scan
    sampler.begin_scan()
    assert _drain(sampler, 150) == first_scan  # blocks added later are never visited
    sampler.begin_scan()
    shrunk = _drain(sampler, 60)
    # Blocks >= 60 are stepped over, but doneblocks still counts to the planned
    # 100, so the shrunken relation's blocks come round a second time.
    assert shrunk[:60] == [b for b in first_scan if b < 60]
    assert len(shrunk) == 100 and shrunk[60:] == shrunk[:40]


def test_stride_empty_relation_then_growth() -> None:
    sampler = StrideSampler(9)
    assert sampler.next_block(0) == INVALID_BLOCK_NUMBER
    assert sampler.step == 0 and sampler.doneblocks == 0
    assert sampler.next_block(10) == stride_visit_order(9, 10)[0]


def test_stride_shrink_to_zero_is_an_error_not_a_hang() -> None:
    sampler = StrideSampler(3)
    _drain(sampler, 5)
    sampler.begin_scan()
    with pytest.raises(SamplingError, match="shrank to 0 blocks"):
        sampler.next_block(0)


def test_stride_stop_is_evaluated_after_doneblocks_test() -> None:
    calls: list[int] = []
    sampler = StrideSampler(5)

    def stop() -> bool:
        calls.append(sampler.doneblocks)
        return False

    blocks = []
    while (blk := sampler.next_block(3, stop)) != INVALID_BLOCK_NUMBER:
        blocks.append(blk)
    # Called once per returned block (with doneblocks already incremented), and
    # not on the final call where doneblocks > nblocks ends the scan.
    assert calls == [1, 2, 3] and len(blocks) == 3
    assert sampler.doneblocks == 4


def test_from_plan_validation() -> None:
    assert _drain(StrideSampler.from_plan(10, 4, 3), 10) == [
        7,
        0,
        3,
        6,
        9,
        2,
        5,
        8,
        1,
        4,
    ]
    with pytest.raises(SamplingError, match="coprime"):
        StrideSampler.from_plan(10, 0, 4)
    with pytest.raises(SamplingError, match="firstblock"):
        StrideSampler.from_plan(10, 10, 3)


def test_system_rows_limit() -> None:
    rows = SystemRowsSampler(11)
    rows.begin_scan(0)
    assert rows.next_block(50, donetuples=0) == INVALID_BLOCK_NUMBER
    assert rows.plan.step != 0  # the plan is drawn even when nothing is read
    rows.begin_scan(3)
    got = [rows.next_block(50, donetuples=i) for i in range(4)]
    assert got[:3] == stride_visit_order(11, 50)[:3].tolist()
    assert got[3] == INVALID_BLOCK_NUMBER
    assert rows.tuples_exhausted(3) and not rows.tuples_exhausted(2)


def test_system_rows_requires_begin_scan() -> None:
    with pytest.raises(SamplingError, match="begin_scan"):
        SystemRowsSampler(1).next_block(5, 0)


class _VirtualClock:
    def __init__(self) -> None:
        self.now = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


def _time_scan(millis: float, per_block_us: int, nblocks: int = 100) -> tuple[list[int], int]:
    clock = _VirtualClock()
    sampler = SystemTimeSampler(21, clock)
    sampler.begin_scan(millis)
    out = []
    while (blk := sampler.next_block(nblocks)) != INVALID_BLOCK_NUMBER:
        out.append(blk)
        clock.now += per_block_us
    return out, clock.reads


def test_system_time_deadline() -> None:
    assert _time_scan(0, 1000)[0] == []
    blocks, _ = _time_scan(2.5, 1000)
    assert blocks == stride_visit_order(21, 100)[:3].tolist()  # 0.0, 1.0, 2.0 ms < 2.5
    assert len(_time_scan(3.0, 1000)[0]) == 3  # 3.0 ms >= 3.0 ends the scan
    everything, reads = _time_scan(1e9, 1)
    assert sorted(everything) == list(range(100))
    # One read for the start time, one per returned block; none on the call where
    # doneblocks exceeds nblocks.
    assert reads == 1 + 100


def test_system_time_rescan_keeps_order() -> None:
    clock = _VirtualClock()
    sampler = SystemTimeSampler(8, clock)
    sampler.begin_scan(1e6)
    first = [sampler.next_block(30) for _ in range(30)]
    sampler.begin_scan(1e6)
    assert [sampler.next_block(30) for _ in range(30)] == first


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, "3"])
def test_system_rows_ntuples_errors(bad: object) -> None:
    with pytest.raises(SamplingError, match="SYSTEM_ROWS sample size"):
        system_rows_ntuples(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.001, math.nan, -math.inf, "1"])
def test_system_time_millis_errors(bad: object) -> None:
    with pytest.raises(SamplingError, match="SYSTEM_TIME milliseconds"):
        system_time_millis(bad)  # type: ignore[arg-type]


def test_system_time_millis_accepts_infinity_and_zero() -> None:
    assert system_time_millis(math.inf) == math.inf
    assert system_time_millis(0) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 100000), U32)
def test_random_relative_prime(n: int, seed: int) -> None:
    prng = sampler_prng(seed)
    before = prng.state
    step = random_relative_prime(n, prng)
    if n <= 1:
        assert step == 1 and prng.state == before
    else:
        assert 1 <= step < n and math.gcd(step, n) == 1


# --------------------------------------------------------------------------
# ANALYZE (section 7)
# --------------------------------------------------------------------------


def _naive_algorithm_s(nblocks: int, n: int, seed: int) -> list[int]:
    """Knuth's algorithm S exactly as sampling.md states it, one block at a time."""
    prng = sampler_prng(seed)
    t = m = 0
    out = []
    while t < nblocks and m < n:
        big_k, k = nblocks - t, n - m
        if k < big_k:
            v = prng.sampler_random_fract()
            p = 1.0 - k / big_k
            while v < p:
                t += 1
                big_k -= 1
                p *= 1.0 - k / big_k
        out.append(t)
        m += 1
        t += 1
    return out


@pytest.mark.parametrize(
    ("seed", "nblocks", "n", "expected"),
    [
        (1, 100, 10, [8, 11, 12, 15, 50, 54, 59, 62, 73, 80]),
        (2024, 1000, 7, [252, 354, 461, 697, 771, 773, 797]),
        (5, 6, 10, [0, 1, 2, 3, 4, 5]),
        (5, 0, 10, []),
        (5, 10, 0, []),
    ],
)
def test_block_sampler_vectors(seed: int, nblocks: int, n: int, expected: list[int]) -> None:
    assert analyze_sample_blocks(nblocks, n, seed).tolist() == expected
    sampler = BlockSampler(nblocks, n, seed)
    assert sampler.sample_count == len(expected)
    got = []
    while sampler.has_more():
        got.append(sampler.next())
    assert got == expected
    with pytest.raises(SamplingError, match="exhausted"):
        sampler.next()


def test_block_sampler_takes_everything_without_drawing() -> None:
    sampler = BlockSampler(50, 50, 3)
    before = sampler.prng.state
    assert [sampler.next() for _ in range(50)] == list(range(50))
    assert sampler.prng.state == before


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200_000), st.integers(1, 60), U32)
def test_block_sampler_long_skips_equal_naive(nblocks: int, n: int, seed: int) -> None:
    got = analyze_sample_blocks(nblocks, n, seed).tolist()
    assert got == _naive_algorithm_s(nblocks, n, seed)
    assert len(got) == min(n, nblocks) and got == sorted(set(got))


def test_block_sampler_large_relation() -> None:
    blocks = analyze_sample_blocks(1_048_576, 300, 77)
    assert blocks.size == 300 and np.all(np.diff(blocks.astype(np.int64)) > 0)
    assert blocks.tolist() == _naive_algorithm_s(1_048_576, 300, 77)


def test_analyze_targrows() -> None:
    assert analyze_targrows(100) == 30000
    with pytest.raises(SamplingError, match="statistics target"):
        analyze_targrows(0)


def _naive_algorithm_x(prng: PgPrng, t: float, n: int) -> float:
    v = prng.sampler_random_fract()
    s = 0.0
    t += 1
    quot = (t - n) / t
    while quot > v:
        s += 1
        t += 1
        quot *= (t - n) / t
    return s


def test_reservoir_initial_w_and_algorithm_x() -> None:
    state = ReservoirState(1234, 10)
    shadow = sampler_prng(1234)
    assert state.W == math.exp(-math.log(shadow.sampler_random_fract()) / 10)
    for t in (10.0, 50.0, 219.0, 220.0):
        assert state.get_next_s(t, 10) == _naive_algorithm_x(shadow, t, 10)
    assert state.prng.state == shadow.state


def test_reservoir_algorithm_z_is_deterministic_and_sane() -> None:
    a, b = ReservoirState(99, 10), ReservoirState(99, 10)
    skips_a = [a.get_next_s(1000.0 + 50 * i, 10) for i in range(200)]
    skips_b = [b.get_next_s(1000.0 + 50 * i, 10) for i in range(200)]
    assert skips_a == skips_b
    assert all(s >= 0 and s == int(s) for s in skips_a)
    # Mean skip at t rows is about t/n - 1: here t averages ~6000, n = 10.
    assert 400 < float(np.mean(skips_a)) < 800


def test_row_reservoir_is_roughly_uniform() -> None:
    # Over many seeds, every stretch of the input should land in the final
    # reservoir about equally often (Vitter X, then Z after 22n rows).
    n, rows, seeds = 5, 1000, 120
    hits = np.zeros(10)
    for seed in range(seeds):
        res = RowReservoir(n, seed)
        slots = [-1] * n
        for row in range(rows):
            slot = res.offer()
            if slot is not None:
                assert 0 <= slot < n
                slots[slot] = row
        for row in slots:
            hits[row * 10 // rows] += 1
    expected = seeds * n / 10
    assert np.all(np.abs(hits - expected) < 0.4 * expected), hits


def test_row_reservoir_fills_first() -> None:
    res = RowReservoir(4, 1)
    assert [res.offer() for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(SamplingError, match="targrows"):
        RowReservoir(0, 1)
