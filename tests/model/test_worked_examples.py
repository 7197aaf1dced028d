"""The worked examples of the spec (read_stream.md §8), reproduced exactly: reads, order, sizes."""

from __future__ import annotations

import pytest

from reference_impl import READ_STREAM_FULL, READ_STREAM_SEQUENTIAL, Instance, Settings
from reference_impl.scans import run_scan

from ._streams import drive


@pytest.mark.parametrize("io_method", ["sync", "worker", "io_uring"])
def test_8_1_twenty_sequential_uncached_blocks(io_method: str) -> None:
    reads, out, _ = drive(nblocks=20, flags=READ_STREAM_SEQUENTIAL, settings=Settings(io_method=io_method))
    assert reads == [(0, 0), (1, 2), (3, 6), (7, 14), (15, 19)]
    assert out == list(range(20))


def test_8_1_two_hundred_blocks_ramp_then_full_reads() -> None:
    reads, _, _ = drive(nblocks=200, flags=READ_STREAM_SEQUENTIAL)
    sizes = [b - a + 1 for a, b in reads]
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert all(s == 16 for s in sizes[4:-1]) and sizes[-1] == 200 - 15 - 16 * (len(sizes) - 5)


def test_8_2_all_cached_no_io_and_one_buffer_pinned() -> None:
    reads, out, inst = drive(nblocks=6, cached=range(6))
    assert reads == [] and out == list(range(6))
    assert inst.backends[0].stats.hits == 6


def test_8_3_alternating_misses_and_hits() -> None:
    reads, _, _ = drive(nblocks=10, cached=[1, 3, 5, 7, 9])
    assert reads == [(0, 0), (2, 2), (4, 4), (6, 6), (8, 8)]


def test_8_4_hit_in_the_middle_of_a_full_range() -> None:
    reads, out, _ = drive(nblocks=8, flags=READ_STREAM_FULL, cached=[3])
    assert reads == [(0, 2), (4, 7)]
    assert out == list(range(8))


def test_8_5_random_pattern_with_advice_under_sync() -> None:
    inst_reads, _, inst = drive([10, 42, 43, 44, 60], settings=Settings(io_method="sync"))
    assert inst_reads == [(10, 10), (42, 43), (44, 44), (60, 60)]
    # fadvise(60) only: one advice call, for the jump made while buffers were pinned.
    assert inst.storage.prefetch_calls == 1


def test_8_5_with_full_flag_merges_44() -> None:
    reads, _, _ = drive([10, 42, 43, 44, 60], settings=Settings(io_method="sync"), flags=READ_STREAM_FULL)
    assert reads == [(10, 10), (42, 44), (60, 60)]


@pytest.mark.parametrize("take, expected", [(1, [(0, 0), (1, 2)]), (2, [(0, 0), (1, 2), (3, 5)])])
def test_8_6_early_end_reads_what_was_pinned_and_pending(take: int, expected) -> None:
    reads, _, _ = drive(nblocks=100, flags=READ_STREAM_SEQUENTIAL, take=take)
    assert reads == expected


def test_8_7_segment_boundary() -> None:
    reads, _, _ = drive(list(range(131060, 131091)), flags=READ_STREAM_FULL)
    assert reads == [(131060, 131071), (131072, 131087), (131088, 131090)]


def test_8_8_effective_io_concurrency_zero_still_ramps() -> None:
    reads, _, _ = drive(
        nblocks=40, settings=Settings(effective_io_concurrency=0), flags=READ_STREAM_SEQUENTIAL
    )
    assert reads == [(0, 0), (1, 2), (3, 6), (7, 14), (15, 30), (31, 39)]


def test_8_9_skipping_callback() -> None:
    reads, _, _ = drive([0, 1, 2, 3, 40, 41, 42, 43, 44, 45, 90])
    assert reads == [(0, 0), (1, 2), (3, 3), (40, 45), (90, 90)]


def test_8_10_large_io_combine_limit_is_cut_by_the_pin_budget() -> None:
    inst = Instance(Settings(io_combine_limit=128, io_max_combine_limit=128), debug=True)
    rel = inst.create_relation("t", 4000)
    be = inst.backend()
    r = run_scan("seqscan", be, rel)
    assert r.read_sizes[:7] == [1, 2, 4, 8, 16, 32, 64]
    steady = r.read_sizes[7:-1]
    assert steady and set(steady) == {86}  # MaxProportionalPins 94 - 8
    assert r.pinned_after == 0


def test_scans_2_3_example_ten_thousand_blocks_629_reads() -> None:
    inst = Instance(Settings(), debug=True)
    rel = inst.create_relation("t", 10000)
    r = run_scan("seqscan", inst.backend(), rel)
    assert r.read_count == 629 and r.read_blocks == 10000
    assert set(r.io) == {"bulkread"}


# ------------------------------------------------------------------ per version, from the servers
def _stored() -> dict:
    import json

    from ._worked_examples import STORE

    return json.loads(STORE.read_text())


def _version_cases() -> list:
    from ._worked_examples import CASES

    return [pytest.param(v, c, id=f"{v}-{c.name}") for v in ("18", "19", "20devel") for c in CASES]


def test_worked_examples_were_measured_on_every_version() -> None:
    from ._worked_examples import CASES

    doc = _stored()
    assert sorted(doc["servers"]) == ["18", "19", "20devel"]
    assert doc["servers"]["18"].startswith("18.") and doc["servers"]["19"].startswith("19")
    assert sorted(doc["cases"]) == sorted(c.name for c in CASES)
    assert all(sorted(v) == ["18", "19", "20devel"] for v in doc["cases"].values())


@pytest.mark.parametrize(("version", "case"), _version_cases())
def test_worked_example_of_each_version_is_the_servers(version: str, case) -> None:
    """The model of each version reads what a server of that version read (stored: the
    server's reads as block ranges, or a scan's read count)."""
    from ._worked_examples import model

    assert model(case, version) == _stored()["cases"][case.name][version]
