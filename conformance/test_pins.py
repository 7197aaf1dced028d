"""Pins: a stream never holds more buffers than its limit, nor more than the backend's budget.

``read_stream.md`` §2 and §9.1–§9.2: ``max_pinned_buffers`` is ``(max_ios + 1) ×
io_combine_limit`` capped by the strategy's pin limit and ``GetPinLimit()``, and at least 1; the
stream's pins (everything the backend pins that the consumer does not own) never exceed it.
``buffers_and_strategies.md`` §4.1: before each read the stream asks ``GetAdditionalPinLimit()``
(the fair share minus an estimate of what the backend already pins, at least 8), so the consumer's
own pins shrink the stream's reads; with a pool so small that the share is 0 the stream still
progresses one buffer at a time.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_impl import READ_STREAM_FULL, READ_STREAM_MAINTENANCE

from . import _oracle
from ._fixtures import drive_fixture, relation_fixture  # noqa: F401
from ._harness import make_strategy

pytestmark = pytest.mark.readstream_requires("stream-api")


def _case(eic: int, icl: int, method: str, strategy: Any, flags: int) -> Any:
    settings = {
        "effective_io_concurrency": eic,
        "maintenance_io_concurrency": max(0, eic - 1),
        "io_combine_limit": icl,
        "io_max_combine_limit": max(16, icl),
        "io_method": method,
    }
    sid = "none" if strategy is None else f"{strategy[0]}{strategy[1] or ''}"
    return pytest.param(settings, strategy, flags, id=f"eic{eic}-icl{icl}-{method}-{sid}-flags{flags}")


_LIMIT_CASES = [
    _case(0, 1, "sync", None, 0),
    _case(0, 16, "worker", ("bulkread", None), READ_STREAM_FULL),
    _case(1, 4, "worker", None, 0),
    _case(1, 32, "sync", ("vacuum", 64), READ_STREAM_MAINTENANCE),
    _case(4, 16, "io_uring", ("bulkread", 48), 0),
    _case(4, 1, "worker", ("vacuum", 64), READ_STREAM_FULL | READ_STREAM_MAINTENANCE),
    _case(16, 16, "worker", None, 0),
    _case(16, 16, "sync", ("bulkread", None), READ_STREAM_FULL),
    _case(16, 32, "io_uring", None, READ_STREAM_FULL),
    _case(16, 4, "worker", ("vacuum", 64), READ_STREAM_MAINTENANCE),
]


@pytest.mark.readstream_invariant("pins", "MUST", kind="implementation")
@pytest.mark.parametrize(
    ("readstream_settings", "strategy", "flags"), _LIMIT_CASES, indirect=["readstream_settings"]
)
def test_stream_pins_never_exceed_its_limit(
    drive: Any, relation: Any, readstream_instance: Any, strategy: Any, flags: int
) -> None:
    """A cold sequential stream and a scattered one stay within ``max_pinned_buffers`` (§2, §9.2)."""
    rel = relation(1200)
    strat = make_strategy(readstream_instance, strategy)
    d = drive(rel, [*range(0, 400), *((b * 613) % 1200 for b in range(1, 100))], strategy=strat, flags=flags)
    d.consume()
    assert d.max_stream_pins <= d.limit
    d.end()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        # GetPinLimit() = shared_buffers // (MaxBackends + 38): 0, 1 and 2.
        pytest.param({"shared_buffers": 16}, id="pin-limit-0"),
        pytest.param({"shared_buffers": 200}, id="pin-limit-1"),
        pytest.param({"shared_buffers": 400, "io_method": "sync"}, id="pin-limit-2-sync"),
        pytest.param(
            {"shared_buffers": 20, "max_connections": 1, "effective_io_concurrency": 0}, id="pool-20-eic0"
        ),
    ],
    indirect=True,
)
@pytest.mark.parametrize("consumer_keeps", [0, 2])
def test_tiny_pool_still_makes_progress(
    drive: Any, relation: Any, readstream_instance: Any, consumer_keeps: int
) -> None:
    """With a pool so small that the backend's share is 0 or 1 pins the stream pins one buffer at
    a time and delivers every block (§2 step 3.5 "at least 1"; §4.3 step 2)."""
    rel = relation(120)
    blocks = [*range(60), 5, 90, 91, 17, 3]
    d = drive(rel, blocks)
    got = []
    for i in range(len(blocks)):
        d.next(keep=i < consumer_keeps)
        got.append(d.returned[-1])
    assert got == blocks
    assert d.max_stream_pins <= max(1, d.limit)
    d.end()
    while d.held:
        d.release_held()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param({"io_combine_limit": 128, "io_max_combine_limit": 128}, id="icl128"),
        pytest.param(
            {"io_combine_limit": 128, "io_max_combine_limit": 128, "io_method": "sync"}, id="icl128-sync"
        ),
        pytest.param(
            {"io_combine_limit": 64, "io_max_combine_limit": 64, "effective_io_concurrency": 1},
            id="icl64-eic1",
        ),
    ],
    indirect=True,
)
def test_reads_respect_the_backends_additional_pin_limit(
    drive: Any, relation: Any, readstream_backend: Any
) -> None:
    """No read asks for more blocks than ``GetAdditionalPinLimit()`` allows: with at most 8 pins
    held, no read exceeds ``GetPinLimit() - 8`` (§4.3 step 2; ``buffers_and_strategies.md`` §4.1,
    confirmed on PostgreSQL 18.6 with ``io_combine_limit`` 128: 86-block reads)."""
    rel = relation(1000)
    d = drive(rel, list(range(1000)))
    d.consume()
    pin_limit = _oracle.max_proportional_pins(readstream_backend.settings)
    biggest = max(r.nblocks for r in d.reads)
    assert biggest <= pin_limit - 8, f"a read of {biggest} blocks with GetPinLimit() = {pin_limit}"
    d.end()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize("held", [8, 40, 80])
@pytest.mark.parametrize("readstream_settings", [{}, {"io_method": "sync"}], indirect=True)
def test_consumer_pins_shrink_the_streams_budget(
    drive: Any, relation: Any, readstream_backend: Any, held: int
) -> None:
    """Pins the consumer holds on other buffers count against the stream: the backend's distinct
    pins stay within ``GetPinLimit()`` (plus the one buffer a stream may always take)."""
    other = relation(200, name="other")
    kept = [readstream_backend.read_buffer(other, b) for b in range(held)]
    rel = relation(600)
    d = drive(rel, list(range(600)), held=kept)
    pin_limit = _oracle.max_proportional_pins(readstream_backend.settings)
    worst = 0
    for _ in range(600):
        d.next()
        worst = max(worst, readstream_backend.refs.distinct())
    assert worst <= max(pin_limit, held + 1), f"the backend pinned {worst} buffers (limit {pin_limit})"
    d.end()
    while d.held:
        d.release_held()


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
@pytest.mark.parametrize(
    "readstream_settings",
    [
        pytest.param(
            {
                "io_combine_limit": icl,
                "io_max_combine_limit": imcl,
                "effective_io_concurrency": eic,
                "io_method": m,
            },
            id=f"icl{icl}-max{imcl}-eic{eic}-{m}",
        )
        for icl, imcl, eic, m in (
            (32, 4, 1, "worker"),
            (128, 16, 0, "sync"),
            (16, 1, 2, "io_uring"),
            (64, 8, 4, "worker"),
            (128, 2, 1, "sync"),
        )
    ],
    indirect=True,
)
@pytest.mark.parametrize("flags", [0, READ_STREAM_FULL])
def test_limits_follow_the_effective_io_combine_limit(
    drive: Any, relation: Any, readstream_settings: Any, flags: int
) -> None:
    """With ``io_combine_limit`` set above ``io_max_combine_limit`` (PostgreSQL 18 accepts it), the
    stream follows the effective limit ``Min(io_combine_limit, io_max_combine_limit)``
    (``assign_io_combine_limit``, ``read_stream_begin_impl``): its ``max_pinned_buffers`` is
    ``(max_ios + 1) × effective limit`` (capped as usual), it never holds more pins, and no read is
    longer than the effective limit."""
    effective = _oracle.effective_io_combine_limit(readstream_settings)
    assert effective < readstream_settings.io_combine_limit
    rel = relation(600)
    d = drive(rel, list(range(600)), flags=flags)
    assert d.limit <= (d.max_ios + 1) * effective
    d.consume()
    assert d.max_stream_pins <= d.limit, f"the stream held {d.max_stream_pins} pins, its limit is {d.limit}"
    longest = max(r.nblocks for r in d.reads)
    assert longest <= effective, f"a read of {longest} blocks; the effective io_combine_limit is {effective}"


@pytest.mark.readstream_invariant("pins", "MUST", kind="contract")
def test_a_split_read_forwards_its_pinned_buffer(drive: Any, relation: Any, readstream_instance: Any) -> None:
    """§8.4: a ``FULL`` stream over blocks 0..7 with block 3 cached starts [0-7]; the buffer
    manager splits the read at the cached block, which stays pinned and is forwarded to the next
    start ([3-7], 3 at its head). Every block comes back once, in order, and the end leaves no pin
    (the driver checks after every call): a stream that loses the forwarded buffer leaks its pin
    and pins block 3 a second time. Which reads it makes is the SHOULD test below."""
    rel = relation(8)
    readstream_instance.prewarm(rel, [3])
    d = drive(rel, list(range(8)), flags=READ_STREAM_FULL)
    assert d.consume() == list(range(8))
    d.end()


@pytest.mark.readstream_invariant("reads", "SHOULD")
def test_a_split_read_reads_around_the_cached_block(
    drive: Any, relation: Any, readstream_instance: Any
) -> None:
    """§8.4 with PostgreSQL's combining: the split read around cached block 3 makes exactly the
    reads [0-2] and [4-7] (an implementation that does not combine reads still conforms)."""
    rel = relation(8)
    readstream_instance.prewarm(rel, [3])
    d = drive(rel, list(range(8)), flags=READ_STREAM_FULL)
    assert d.consume() == list(range(8))
    assert [(r.start, r.nblocks) for r in d.reads] == [(0, 3), (4, 4)]
    d.end()
