"""Temporary relations read through the backend's local buffers (``localbuf.c``), in every
version, through the buffer manager's API: ``StartReadBuffers``/``WaitReadBuffers``,
``ReadBuffer``, the local pin limits a stream on a temporary relation uses, and
``RELATION_IS_OTHER_TEMP``."""

from __future__ import annotations

import pytest

from reference_impl import (
    INVALID_BUFFER,
    Instance,
    ModelUsageError,
    PgError,
    ReadBuffersOperation,
    Settings,
)
from reference_impl.buffers.bufmgr import Backend

VERSIONS = ["18", "19", "20devel"]
METHODS = ["sync", "worker", "io_uring"]


def _setup(version: str, io_method: str = "worker", **settings: object) -> tuple[Instance, Backend]:
    inst = Instance(Settings(version=version, io_method=io_method, **settings), debug=True)  # type: ignore[arg-type]
    be = inst.backend()
    inst.create_relation("tmp", 300, temp_of=be)
    return inst, be


def _read(be: Backend, block: int, n: int) -> tuple[ReadBuffersOperation, list[int], int, bool]:
    op = ReadBuffersOperation(be.instance.relation("tmp"))  # type: ignore[attr-defined]
    bufs = [INVALID_BUFFER] * n
    got, need_wait = be.start_read_buffers(op, bufs, 0, block, n, 0)
    return op, bufs, got, need_wait


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("io_method", METHODS)
def test_a_temporary_relation_is_read_through_local_buffers(version: str, io_method: str) -> None:
    inst, be = _setup(version, io_method)
    op, bufs, got, need_wait = _read(be, 0, 8)
    assert (got, need_wait) == (8, True)
    assert all(b < -1 for b in bufs)  # local buffer numbers: -2, -3, ...
    be.wait_read_buffers(op)
    assert [be.buffer_block(b) for b in bufs] == list(range(8))
    for b in bufs:
        be.release_buffer(b)
    st = be.stats
    assert (st.io_temp.reads, st.io_temp.read_bytes, st.local_blks_read) == (1, 8 * 8192, 8)
    assert st.reads == 0 and st.shared_blks_read == 0 and inst.pool.mapping == {}
    assert be.local_resident_blocks(inst.relation("tmp")) == set(range(8))
    # Again: hits in the local buffers.
    buf = be.read_buffer(inst.relation("tmp"), 3)
    assert (st.local_blks_hit, st.io_temp.hits, st.relation("tmp").blks_hit) == (1, 1, 1)
    be.release_buffer(buf)
    be.check_for_buffer_leaks()


@pytest.mark.parametrize("version", VERSIONS)
def test_io_workers_cannot_read_local_buffers(version: str) -> None:
    """``pgaio_worker_needs_synchronous_execution``: a read of local buffers is done by the
    backend itself under io_method=worker; io_uring submits it as any other."""
    for io_method, in_backend in (("worker", True), ("io_uring", False)):
        inst, be = _setup(version, io_method)
        op, bufs, _, _ = _read(be, 0, 4)
        assert be.stats.read_log[0].synchronous is in_backend
        assert (op.ioh is not None and op.ioh.done) is in_backend
        be.wait_read_buffers(op)
        for b in bufs:
            be.release_buffer(b)
        assert getattr(inst.io_method, "dispatched", 0) == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_local_pin_limits(version: str) -> None:
    """``GetLocalPinLimit`` is temp_buffers / 4, and ``GetAdditionalLocalPinLimit`` counts the
    local pins exactly (``NLocalPinnedBuffers``), where the shared limit estimates them."""
    inst, be = _setup(version, temp_buffers=200)
    assert be.get_local_pin_limit() == 50 and be.get_additional_local_pin_limit() == 50
    op, bufs, _, _ = _read(be, 0, 16)
    be.wait_read_buffers(op)
    assert be.get_additional_local_pin_limit() == 34
    be.incr_buffer_refcount(bufs[0])  # a second pin of one buffer is no new buffer
    assert be.get_additional_local_pin_limit() == 34
    more = [be.read_buffer(inst.relation("tmp"), 20 + i) for i in range(40)]
    assert be.get_additional_local_pin_limit() == 0
    assert be.limit_additional_local_pins(500) == 200 - 56
    assert be.get_additional_pin_limit() == Settings().pin_limit - 8  # shared: untouched
    for b in [*bufs, bufs[0], *more]:
        be.release_buffer(b)
    assert be.get_additional_local_pin_limit() == 50
    be.check_for_buffer_leaks()


@pytest.mark.parametrize("version", VERSIONS)
def test_another_sessions_temporary_relation_is_refused(version: str) -> None:
    inst, _ = _setup(version)
    other = inst.backend()
    rel = inst.relation("tmp")
    with pytest.raises(PgError, match="cannot access temporary tables of other sessions"):
        other.read_buffer(rel, 0)
    op = ReadBuffersOperation(rel)
    with pytest.raises(PgError, match="cannot access temporary tables of other sessions"):
        other.start_read_buffers(op, [INVALID_BUFFER] * 4, 0, 0, 4, 0)
    other.check_for_buffer_leaks()


def test_a_temporary_relation_names_its_backend() -> None:
    inst = Instance()
    with pytest.raises(ModelUsageError, match="temp_owner"):
        inst.storage.create_relation("t", 10, persistence="t")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_local_clock_sweep_evicts_and_writes_dirty_pages(version: str) -> None:
    inst, be = _setup(version, "sync", temp_buffers=100)
    rel = inst.relation("tmp")
    for block in range(100):
        buf = be.read_buffer(rel, block)
        if block == 0:
            be.mark_buffer_dirty(buf)
        be.release_buffer(buf)
    assert be.stats.io_temp.evictions == 0
    # Every buffer has usage 1: the sweep clears them all, then takes buffer 0, dirty.
    be.release_buffer(be.read_buffer(rel, 100))
    assert (be.stats.io_temp.evictions, be.stats.io_temp.writes, be.stats.local_blks_written) == (1, 1, 1)
    assert 0 not in be.local_resident_blocks(rel) and 100 in be.local_resident_blocks(rel)


@pytest.mark.parametrize("io_method", ["io_uring"])
def test_the_same_block_twice_joins_or_waits_for_its_own_local_io(io_method: str) -> None:
    """004_read_stream.pl's temp-table case (19): a block missed twice in a row. 18 waits for
    its own read inside the second StartReadBuffers; 19 joins it."""
    for version, joined in (("18", False), ("19", True)):
        inst, be = _setup(version, io_method)
        op1, bufs1, _, _ = _read(be, 2, 1)
        t0 = inst.clock.now
        op2, bufs2, _, wait2 = _read(be, 2, 1)
        assert bufs1 == bufs2 and wait2 is joined and op2.foreign_io is joined
        assert (inst.clock.now == t0) is joined
        be.wait_read_buffers(op1)
        if wait2:
            be.wait_read_buffers(op2)
        assert be.stats.local_blks_read == 1 and be.stats.local_blks_hit == 1
        for b in bufs1 + bufs2:
            be.release_buffer(b)
        be.check_for_buffer_leaks()
