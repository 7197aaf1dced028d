"""A full scan of a synthetic table through the implementation under test, on several devices."""

import pytest

from reference_impl import INVALID_BUFFER, BlockRangeReadStreamPrivate, block_range_read_stream_cb


def scan(relation, backend, begin):
    """Read every block of the table with one stream; the block numbers in the order returned."""
    nblocks = relation.heap.nblocks()
    stream = begin(relation.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, nblocks))
    seen = []
    while (buf := stream.next_buffer()) != INVALID_BUFFER:
        seen.append(backend.buffer_block(buf))
        backend.release_buffer(buf)
    stream.end()
    return seen


@pytest.mark.readstream_relation("tiny", nblocks=64)
@pytest.mark.parametrize("readstream_storage", ["nvme", "cloud-1ms", "hdd"], indirect=True)
def test_every_block_once_in_order(
    readstream_relation, readstream_storage, readstream_backend, readstream_stream_factory, readstream_stats
):
    assert scan(readstream_relation, readstream_backend, readstream_stream_factory) == list(range(64))
    readstream_stats.record_backend(readstream_backend, device=readstream_storage.name)


@pytest.mark.readstream_storage("nvme")
def test_hdd_costs_more_simulated_time(
    readstream_relation,
    readstream_backend,
    readstream_stream_factory,
    readstream_clock,
    readstream_impl,
    hdd_instance,
    orders,
):
    scan(readstream_relation, readstream_backend, readstream_stream_factory)
    nvme_us = readstream_clock.now
    # The HDD-backed instance from conftest.py, driven through the implementation directly.
    backend = hdd_instance.backend()
    blocks = scan(orders, backend, lambda *args: readstream_impl.begin_stream(backend, *args))
    assert len(blocks) == orders.heap.nblocks() > readstream_relation.heap.nblocks()
    assert hdd_instance.clock.now > nvme_us
