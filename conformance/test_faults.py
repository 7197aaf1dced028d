"""Faults: I/O errors, short reads, checksum failures, and other backends' reads in progress.

What PostgreSQL does (``buffers_and_strategies.md`` §3.3, ``read_stream.md`` §4.1 and §9.13):

* an I/O error is reported by ``WaitReadBuffers``, i.e. when the consumer reaches the **first
  block of the I/O** that covers the failing block, never earlier (look-ahead does not raise) and
  never for a block the consumer already received; the transaction abort that follows leaves no
  pin;
* a short read leaves the rest of the I/O undone, and ``WaitReadBuffers`` issues a follow-up read
  for it: the consumer sees nothing but its blocks, in order;
* a page failing verification is an error, unless ``zero_damaged_pages`` (the page comes back
  zeroed) or ``ignore_checksum_failure`` (it comes back as read);
* a block another backend is reading is waited for, not read again; if that backend's read fails,
  the stream reads the block itself (PostgreSQL's ``004_read_stream.pl``: succeeding and failing
  foreign I/O, two blocks of one foreign I/O, the same block missed twice).
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL, ChecksumFailure, Fault, ForeignIO, PgError, ReadIOError

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import make_the_consumer_wait

pytestmark = pytest.mark.readstream_requires("stream-api")

_METHODS = ["sync", "worker", "io_uring"]


def _settings_grid() -> list[Any]:
    return [
        pytest.param({"io_method": m, "io_combine_limit": icl}, id=f"{m}-icl{icl}")
        for m in _METHODS
        for icl in (1, 4, 16)
    ]


def _covering_start(d: Any, block: int) -> Any:
    for ev in d.observer.starts:
        if ev.need_wait and ev.blocknum <= block < ev.blocknum + ev.accepted:
            return ev
    return None


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", _settings_grid(), indirect=True)
@pytest.mark.parametrize("fault_block", [0, 6, 37])
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL])
def test_io_error_surfaces_when_the_consumer_reaches_its_read(
    drive: Any,
    relation: Any,
    readstream_faults: Any,
    readstream_instance: Any,
    fault_block: int,
    flags: int,
) -> None:
    """EIO on block k is raised by the ``next_buffer()`` call that is due the first block of the
    read covering k — every earlier block is delivered — and the abort leaves no pin."""
    rel = relation(80)
    readstream_faults.faults.append(Fault("eio", relation=rel.name, block=fault_block, times=None))
    d = drive(rel, list(range(80)), flags=flags)
    got: list[int] = []
    with pytest.raises(ReadIOError) as info:
        while True:
            d.next()
            got.append(d.returned[-1])
    err = info.value
    assert err.start <= fault_block < err.start + err.nblocks
    ev = _covering_start(d, fault_block)
    assert ev is not None, "no started read covered the failing block"
    assert got == list(range(ev.blocknum)), (
        f"the error of the read starting at block {ev.blocknum} surfaced after blocks {got[-3:]}"
    )
    d.abort()
    readstream_instance.clock.advance(10_000_000)
    readstream_instance.pool.poll()
    assert readstream_instance.pool.pinned_buffers() == {}


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize("short_at", [1, 5, 15])
def test_short_read_is_completed_by_a_follow_up_read(
    drive: Any, relation: Any, readstream_faults: Any, short_at: int
) -> None:
    """A read that returns fewer blocks than asked is finished by a follow-up read of the rest;
    the consumer receives every block, valid and in order."""
    rel = relation(64)
    readstream_faults.faults.append(Fault("short_read", relation=rel.name, block=short_at))
    d = drive(rel, list(range(64)), flags=READ_STREAM_FULL)
    assert d.consume() == list(range(64))
    shortened = [e for e in readstream_faults.ledger if e["fault"] == "short_read"]
    if not shortened:
        pytest.skip(f"no read of more than one block covered block {short_at}, so none could come back short")
    ranges = [(r.start, r.nblocks) for r in d.reads]
    assert any(start == short_at for start, _ in ranges), f"no follow-up read from block {short_at}: {ranges}"
    assert all(d.read_counts[b] == 1 for b in range(64)), "every block is delivered by exactly one read"
    d.end()


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize(
    ("readstream_settings", "outcome"),
    [pytest.param({"io_method": m}, "error", id=f"{m}-default-error") for m in _METHODS]
    + [
        pytest.param({"io_method": m, "zero_damaged_pages": True}, "zeroed", id=f"{m}-zero_damaged_pages")
        for m in _METHODS
    ]
    + [
        pytest.param({"io_method": m, "ignore_checksum_failure": True}, "accepted", id=f"{m}-ignore_checksum")
        for m in _METHODS
    ],
    indirect=["readstream_settings"],
)
def test_checksum_failure(drive: Any, relation: Any, readstream_faults: Any, outcome: str) -> None:
    """A page failing verification: an error at its read's first block by default; zeroed with
    ``zero_damaged_pages``; accepted as read with ``ignore_checksum_failure``."""
    rel = relation(40)
    bad = 9
    readstream_faults.faults.append(Fault("checksum", relation=rel.name, block=bad, times=None))
    d = drive(rel, list(range(40)))
    if outcome == "error":
        got: list[int] = []
        with pytest.raises(ChecksumFailure):
            while True:
                d.next()
                got.append(d.returned[-1])
        ev = _covering_start(d, bad)
        assert ev is not None and got == list(range(ev.blocknum))
        d.abort()
        return
    for block in range(40):
        buf = d.next(keep=True)
        assert d.returned[-1] == block
        assert d.buffer_is_zeroed(buf) == (outcome == "zeroed" and block == bad)
        d.release_held()
    d.end()


def _foreign_params() -> list[Any]:
    return [pytest.param({"io_method": m, "io_combine_limit": 1}, id=m) for m in _METHODS]


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", _foreign_params(), indirect=True)
def test_foreign_io_in_progress_is_waited_for_not_repeated(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """``004_read_stream.pl``: block 5 is being read by another backend; the stream over
    0, 2, 5, 7 waits for that read and returns 0, 2, 5, 7 without reading 5 itself."""
    rel = relation(20)
    readstream_instance.start_foreign_io(ForeignIO(rel.name, 5, 1, duration_us=20_000))
    d = drive(rel, [0, 2, 5, 7])
    assert d.consume() == [0, 2, 5, 7]
    assert 5 not in d.read_counts
    d.end()


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", _foreign_params(), indirect=True)
def test_failing_foreign_io_is_retried_by_the_stream(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """``004_read_stream.pl``: the other backend's read of block 5 fails; the stream, which waited
    for it, reads block 5 itself and returns 0, 2, 5, 7 without an error."""
    rel = relation(20)
    readstream_instance.start_foreign_io(ForeignIO(rel.name, 5, 1, duration_us=20_000, fails=True))
    d = drive(rel, [0, 2, 5, 7])
    assert d.consume() == [0, 2, 5, 7]
    assert d.read_counts[5] == 1
    d.end()


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", _foreign_params(), indirect=True)
def test_two_blocks_of_one_foreign_io(drive: Any, relation: Any, readstream_instance: Any) -> None:
    """``004_read_stream.pl``: another backend reads blocks 2..4 in one I/O; the stream over 0, 2,
    4 returns them without reading 2 or 4."""
    rel = relation(20)
    readstream_instance.start_foreign_io(ForeignIO(rel.name, 2, 3, duration_us=20_000))
    d = drive(rel, [0, 2, 4])
    assert d.consume() == [0, 2, 4]
    assert 2 not in d.read_counts and 4 not in d.read_counts
    d.end()


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
def test_failed_read_is_retried_by_the_next_stream(drive: Any, relation: Any, readstream_faults: Any) -> None:
    """A failed read does not poison its buffers: after the abort, a new stream over the same
    blocks reads the failed ones again and succeeds once the fault is gone."""
    rel = relation(30)
    readstream_faults.faults.append(Fault("eio", relation=rel.name, block=12, times=1))
    d = drive(rel, list(range(30)))
    with pytest.raises(PgError):
        d.consume()
    d.abort()
    again = drive(rel, list(range(30)))
    assert again.consume() == list(range(30))
    again.end()


# (id, settings) of the two ways a page failing verification is let through.
_DOWNGRADES: list[tuple[str, dict[str, Any]]] = [
    ("zero_damaged_pages", {"zero_damaged_pages": True}),
    ("ignore_checksum_failure", {"ignore_checksum_failure": True}),
]


def _scattered(nblocks: int, count: int) -> list[int]:
    return [(b * 4099) % nblocks for b in range(1, count + 1)]


@pytest.mark.readstream_invariant("faults", "MUST")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({**gucs, "io_method": m, "effective_io_concurrency": 1}, id=f"{name}-{m}")
        for name, gucs in _DOWNGRADES
        for m in _METHODS
    ],
    indirect=True,
)
def test_downgraded_page_error_finishes_its_read(drive: Any, relation: Any, readstream_faults: Any) -> None:
    """A read whose page failed verification but was let through (``zero_damaged_pages`` zeroed
    it, ``ignore_checksum_failure`` accepted it) is finished like any other once waited for
    (``WaitReadBuffers`` completes it; the stream's ``ios_in_progress`` drops by one): with
    ``effective_io_concurrency`` 1 a scattered cold stream still delivers every block."""
    rel = relation(5000)
    blocks = _scattered(5000, 120)
    bad = blocks[2]
    readstream_faults.faults.append(Fault("checksum", relation=rel.name, block=bad, times=None))
    d = drive(rel, blocks)
    assert d.consume() == blocks
    assert any(e["fault"] == "checksum" for e in readstream_faults.ledger), "the damaged page was never read"
    d.end()


@pytest.mark.readstream_invariant("faults", "SHOULD")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({**gucs, "io_method": m, "effective_io_concurrency": e}, id=f"{name}-eic{e}-{m}")
        for name, gucs in _DOWNGRADES
        for e in (2, 8)
        for m in _METHODS
    ],
    indirect=True,
)
def test_downgraded_page_error_leaves_max_ios_reads_in_flight(
    drive: Any, relation: Any, readstream_faults: Any, readstream_settings: Any
) -> None:
    """After a read whose page error was downgraded (zeroed or ignored), a scattered cold stream
    whose consumer waits for its reads still has ``max_ios`` reads started and not yet waited
    for at some point (``read_stream.md`` §4.2: look-ahead runs until ``max_ios`` reads are in
    progress; the downgraded read is no longer one of them). The reads after the damaged page are
    slow (:func:`make_the_consumer_wait`): from 19 on the distance grows only after a real wait."""
    rel = relation(5000)
    blocks = _scattered(5000, 200)
    bad = blocks[0]
    readstream_faults.faults.append(Fault("checksum", relation=rel.name, block=bad, times=None))
    make_the_consumer_wait(readstream_faults, rel.name, blocks[1:], readstream_settings)
    d = drive(rel, blocks)
    assert d.consume(1) == [bad]
    # Count reads in flight only from the moment the consumer has the damaged page.
    d.observer.restart_max_outstanding()
    assert d.consume() == blocks[1:]
    assert any(e["fault"] == "checksum" for e in readstream_faults.ledger), "the damaged page was never read"
    assert d.observer.max_outstanding == d.max_ios, (
        f"after the downgraded read at most {d.observer.max_outstanding} reads were in flight, "
        f"max_ios is {d.max_ios}"
    )
    d.end()
