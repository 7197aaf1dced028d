"""Injected storage faults, as the implementation under test meets them."""

import pytest

from reference_impl import (
    INVALID_BUFFER,
    BlockRangeReadStreamPrivate,
    Fault,
    ReadIOError,
    block_range_read_stream_cb,
)


def read_all(relation, backend, stream_factory):
    nblocks = relation.heap.nblocks()
    stream = stream_factory(
        relation.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, nblocks)
    )
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        backend.release_buffer(buf)
    stream.end()


@pytest.mark.readstream_relation("tiny", nblocks=40)
@pytest.mark.readstream_faults(Fault("eio", relation="tiny", block=17))
def test_io_error_names_the_failed_read(
    readstream_relation, readstream_faults, readstream_backend, readstream_stream_factory
):
    with pytest.raises(ReadIOError, match="tiny"):
        read_all(readstream_relation, readstream_backend, readstream_stream_factory)
    # As a transaction abort would: the resource owner drops the pins the stream still held.
    readstream_backend.abort()
    assert readstream_backend.pinned_buffers() == {}
    [fired] = readstream_faults.ledger
    assert fired["read_start"] <= 17 < fired["read_start"] + fired["read_nblocks"]


@pytest.mark.readstream_relation("tiny", nblocks=40)
def test_a_latency_spike_only_costs_time(
    readstream_relation, readstream_faults, readstream_backend, readstream_stream_factory, readstream_clock
):
    read_all(readstream_relation, readstream_backend, readstream_stream_factory)
    baseline = readstream_clock.now
    readstream_backend.instance.evict(readstream_relation.heap)
    readstream_faults.faults.append(Fault("latency", relation="tiny", block=5, extra_us=50_000))
    start = readstream_clock.now
    read_all(readstream_relation, readstream_backend, readstream_stream_factory)
    assert readstream_clock.now - start >= 50_000 > baseline
