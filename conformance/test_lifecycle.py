"""Lifecycle: reset, end and transaction abort.

``read_stream.md`` §4.4, §7, §7.1 and §9.9: ``read_stream_reset`` and ``read_stream_end`` stop
looking ahead before they drain (the callback is not called, no block it had not produced is
read), wait for every read they started, release every pin, and a reset stream can be used
again; every version still reads the pending read while draining (confirmed on 18.6 and
master; 18's ``read_stream_look_ahead`` and 19's ``read_stream_should_issue_now`` start it once
the distance is 0). An error of
a read the stream had started surfaces from ``end()`` as from ``next_buffer()``; the transaction
abort that follows drops every pin. A transaction abort without ``end()`` drops the pins as well:
reads already issued to an asynchronous I/O method still complete, reads staged under
``io_method=sync`` never run.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL, Fault, PgError

from ._fixtures import drive_fixture, relation_fixture  # noqa: F401

pytestmark = pytest.mark.readstream_requires("stream-api")

_METHODS = ["sync", "worker", "io_uring"]


@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize("consumed", [0, 1, 2, 5, 33])
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL])
def test_end_releases_every_pin_and_reads_nothing_new(
    drive: Any, relation: Any, readstream_backend: Any, consumed: int, flags: int
) -> None:
    """After ``end()`` the backend pins nothing; ``end()`` neither calls the callback nor reads a
    block it had not produced (§4.4, §9.9)."""
    rel = relation(300)
    d = drive(rel, list(range(300)), flags=flags)
    d.consume(consumed)
    calls = d.source.calls
    produced = len(d.source.produced)
    d.end()
    assert d.source.calls == calls
    assert len(d.source.produced) == produced
    assert readstream_backend.pinned_buffers() == {}


@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
def test_reset_releases_everything_and_the_stream_is_reusable(
    drive: Any, relation: Any, readstream_backend: Any
) -> None:
    """``reset()`` releases every pin and starts nothing new; the same stream then serves a second
    pass (a rescan), also after it had reported its end (§4.4)."""
    rel = relation(200)
    d = drive(rel, list(range(100)))
    d.consume(10)
    d.reset()
    assert readstream_backend.pinned_buffers() == {}
    rest = d.consume()
    assert rest == d.source.blocks[len(d.source.produced) - len(rest) :]
    d.reset()
    d.add_blocks(list(range(100, 200)))
    assert d.consume() == list(range(100, 200))
    d.end()


@pytest.mark.readstream_invariant("lifecycle", "SHOULD")
@pytest.mark.parametrize(
    ("readstream_settings", "expected"),
    [
        # 19+ under an asynchronous method: the distance grows only if WaitReadBuffers() had to
        # wait, which on a server depends on timing; under sync every wait counts.
        pytest.param({"version": v, "io_method": m}, [(0, 0), (1, 2), (3, 5)], id=f"pg{v}-{m}")
        for v, m in (("18", "worker"), ("18", "sync"), ("19", "sync"), ("20devel", "sync"))
    ],
    indirect=["readstream_settings"],
)
def test_end_reads_the_pending_read(drive: Any, relation: Any, expected: list[Any]) -> None:
    """§8.6 (confirmed on PostgreSQL 18.6, 19beta1 and master): taking blocks 0 and 1 of a
    cold sequential stream and ending it reads [0] [1-2] and then the pending [3-5] while
    draining. §11.3 of the specification said master discards the pending read: its
    ``read_stream_reset`` drains through ``read_stream_next_buffer`` with
    ``readahead_distance = 0``, which makes ``read_stream_should_issue_now`` true."""
    rel = relation(100)
    d = drive(rel, list(range(100)))
    d.consume(2)
    d.end()
    assert [(r.start, r.start + r.nblocks - 1) for r in d.reads] == expected


@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize("consumed", [1, 4, 20])
def test_abort_without_end_drops_every_pin(
    drive: Any, relation: Any, readstream_instance: Any, readstream_backend: Any, consumed: int
) -> None:
    """A transaction abort with the stream open (no ``end()``) leaves no pin, and once issued
    reads complete nobody pins anything (§7.1)."""
    rel = relation(300)
    d = drive(rel, list(range(300)))
    d.consume(consumed)
    d.abort()
    readstream_instance.clock.advance(10_000_000)
    readstream_instance.pool.poll()
    assert readstream_instance.pool.pinned_buffers() == {}
    if readstream_backend.settings.io_method == "sync":
        # Reads staged under io_method=sync never ran: their blocks are mapped but invalid.
        read = {b for r in d.reads for b in range(r.start, r.start + r.nblocks)}
        started = {
            b for e in d.observer.starts if e.need_wait for b in range(e.blocknum, e.blocknum + e.accepted)
        }
        assert readstream_instance.pool.mapped_invalid_blocks(rel) == started - read


@pytest.mark.readstream_invariant("lifecycle", "MUST", kind="implementation")
@pytest.mark.parametrize("readstream_settings", [{"io_method": m} for m in _METHODS], indirect=True)
@pytest.mark.parametrize(
    ("consumed", "fault_block"),
    [
        pytest.param(1, 2, id="in-started-read-1-2"),
        pytest.param(3, 5, id="in-started-read-3-6"),
        pytest.param(2, 4, id="in-pending-read-3-5"),
        pytest.param(3, 250, id="never-produced"),
    ],
)
def test_end_surfaces_errors_of_started_reads_only(
    drive: Any,
    relation: Any,
    readstream_faults: Any,
    readstream_backend: Any,
    consumed: int,
    fault_block: int,
) -> None:
    """``end()`` waits for the reads the stream started: an I/O error of one of them is raised by
    ``end()`` (and the abort that follows drops every pin); a failing block that was never read
    is never touched (§4.4, §7)."""
    rel = relation(300)
    readstream_faults.faults.append(Fault("eio", relation=rel.name, block=fault_block, times=None))
    d = drive(rel, list(range(300)))
    d.consume(consumed)
    started_unwaited = any(
        e.blocknum <= fault_block < e.blocknum + e.accepted for e in d.observer.outstanding.values()
    )
    produced = fault_block in d.source.produced_set
    if started_unwaited:
        with pytest.raises(PgError):
            d.end()
        d.abort()
    elif not produced:
        d.end()
        assert not any(r.start <= fault_block < r.start + r.nblocks for r in d.reads)
    else:
        # Produced but not started (the pending read): every version reads it while draining;
        # either way every pin is gone afterwards.
        try:
            d.end()
        except PgError:
            d.abort()
    assert readstream_backend.pinned_buffers() == {}
