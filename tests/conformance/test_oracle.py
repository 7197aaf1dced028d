"""The harness's own formulas (``readstream_conformance._oracle``) against the model, and the
harness catching a buffer manager or a stream whose limits are wrong in the model's way.

The formulas restate PostgreSQL's definitions; here they are held against the model's buffer
manager over PostgreSQL's whole settings space (``strategies.all_settings``). The scan family's
ring-size and bulk-read-threshold tests hold the same formulas against a real server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from readstream_conformance import ConformanceViolation, Scenario, _oracle
from readstream_conformance._harness import expected_max_pinned, make_strategy

import reference_impl.buffers.strategy as strategy_mod
from pytest_readstream import strategies as rs
from pytest_readstream.implementations import ReferenceImplementation
from reference_impl import READ_STREAM_FULL, Instance, Settings
from reference_impl.buffers.strategy import BufferAccessStrategyType, get_access_strategy


@hsettings(max_examples=300, deadline=None)
@given(rs.all_settings())
def test_oracle_matches_the_models_derived_settings(s: Settings) -> None:
    assert _oracle.effective_io_combine_limit(s) == s.effective_io_combine_limit
    assert _oracle.max_proportional_pins(s) == s.pin_limit
    for kind in ("bulkread", "bulkwrite", "vacuum"):
        ring = get_access_strategy(BufferAccessStrategyType(kind), s)
        assert _oracle.ring_buffers(kind, None, s) == (0 if ring is None else ring.nbuffers), kind


@pytest.mark.parametrize(
    ("gucs", "ring"),
    [
        ({}, 94),  # GetPinLimit 94 x 8 kB = 752 kB < 256 + 8 x 16 x 16 kB
        ({"effective_io_concurrency": 1}, 48),  # 256 + 128 kB
        ({"shared_buffers": 4096}, 32),  # GetPinLimit 23: Max(256, 184) = 256 kB
        ({"effective_io_concurrency": 0}, 32),  # 256 kB, no room for I/O concurrency
        ({"io_combine_limit": 128, "io_max_combine_limit": 4, "effective_io_concurrency": 2}, 40),
        ({"shared_buffers": 128}, 16),  # NBuffers / 8
    ],
)
def test_bulkread_ring_follows_getaccessstrategy(gucs: dict[str, Any], ring: int) -> None:
    s = Settings(**gucs)
    assert _oracle.ring_buffers("bulkread", None, s) == ring
    assert get_access_strategy(BufferAccessStrategyType.BULKREAD, s).nbuffers == ring  # type: ignore[union-attr]


@pytest.mark.parametrize("held", [0, 3, 8, 9, 20, 60, 100])
def test_additional_pin_limit_is_the_estimate_from_the_overflow(held: int) -> None:
    inst = Instance(Settings())
    rel = inst.create_relation("t", 200)
    be = inst.backend("b")
    for b in range(held):
        be.read_buffer(rel, b)
    assert _oracle.additional_pin_limit(be.settings, len(be.refs.ovf)) == be.get_additional_pin_limit()
    assert _oracle.additional_pin_limit(be.settings, 0) == 86


@pytest.mark.parametrize(
    ("gucs", "strategy", "flags"),
    [
        ({}, None, 0),
        ({"io_combine_limit": 64, "io_max_combine_limit": 8, "effective_io_concurrency": 3}, None, 0),
        ({"shared_buffers": 2048}, ("bulkread", None), READ_STREAM_FULL),
        ({"effective_io_concurrency": 0}, ("vacuum", 128), 0),
        ({"max_connections": 5000, "shared_buffers": 40000}, None, 0),
    ],
)
def test_expected_max_pinned_matches_the_models_stream(
    gucs: dict[str, Any], strategy: Any, flags: int
) -> None:
    inst = Instance(Settings(**gucs))
    rel = inst.create_relation("t", 10)
    strat = make_strategy(inst, strategy)
    stream = ReferenceImplementation().begin_stream(
        inst.backend("b"), rel, lambda s, p: 0xFFFFFFFF, flags=flags, strategy=strat
    )
    assert expected_max_pinned(inst.settings, rel, flags, strat) == stream.max_pinned_buffers
    stream.end()


# ------------------------------------------------------------------------------ wrong in the model's way
def _ring_without_block_size(btype: Any, settings: Any, **kwargs: Any) -> Any:
    """``GetAccessStrategy`` whose BULKREAD cap lost its x 8 kB factor (GetPinLimit() kB)."""
    if btype is not BufferAccessStrategyType.BULKREAD:
        return _ORIGINAL_GET_ACCESS_STRATEGY(btype, settings, **kwargs)
    eic = settings.effective_io_concurrency
    ring_kb = min(256 + 8 * settings.effective_io_combine_limit * eic, max(256, settings.pin_limit))
    return strategy_mod.get_access_strategy_with_size(btype, ring_kb, settings.nbuffers)


_ORIGINAL_GET_ACCESS_STRATEGY = get_access_strategy


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def test_a_ring_of_the_wrong_size_is_caught_by_the_harness() -> None:
    """The buffer manager's BULKREAD ring lost its x 8 kB factor (94 buffers become 32): the
    harness, which used to take the ring as the buffer manager built it, now refuses it."""
    import reference_impl.instance as instance_mod

    inst = Instance(Settings())
    target = instance_mod if hasattr(instance_mod, "get_access_strategy") else strategy_mod
    with _patched(target, "get_access_strategy", _ring_without_block_size):
        assert inst.strategy(BufferAccessStrategyType.BULKREAD).nbuffers == 32  # type: ignore[union-attr]
        with pytest.raises(ConformanceViolation, match=r"BULKREAD ring of 32 buffers .* give 94"):
            make_strategy(inst, ("bulkread", None))


def _counting_additional_pin_limit(self: Any) -> int:
    """``GetAdditionalPinLimit()`` that counts the pins held instead of estimating them (no
    ``REFCOUNT_ARRAY_ENTRIES`` of slack): a stream trusting it reads over 90 blocks at once."""
    return int(self.get_pin_limit() - self.refs.distinct())


def test_a_wrong_additional_pin_limit_is_caught_by_the_harness() -> None:
    """The buffer manager's ``GetAdditionalPinLimit`` forgets the estimate. The harness's budget
    check used to call that same function, so a stream trusting it went unnoticed; now the budget
    comes from the definition, and a read past ``GetPinLimit() - 8`` is a violation."""
    import reference_impl.buffers.bufmgr as bufmgr

    scenario = Scenario(
        settings={"io_combine_limit": 128, "io_max_combine_limit": 128},
        relation_blocks=400,
        blocks=list(range(400)),
    )
    with _patched(bufmgr.Backend, "get_additional_pin_limit", _counting_additional_pin_limit):
        d = scenario.start(ReferenceImplementation())
        with pytest.raises(ConformanceViolation, match=r"asked for 9\d blocks .* at most 86 were allowed"):
            d.consume()


def test_a_stream_claiming_the_models_wrong_pin_limit_is_caught() -> None:
    """``stream.max_pinned_buffers`` is a claim, never the yardstick: a model whose MaxBackends
    forgets the two special worker processes (``GetPinLimit()`` = 16530 // 172 = 96, not
    16530 // 174 = 95) gives a stream that claims and holds 96 pins. The harness used to take
    the model's pin limit too and agreed; now it derives 95 from the definition."""
    import reference_impl.settings as settings_mod

    with _patched(settings_mod, "NUM_SPECIAL_WORKER_PROCS", 0):
        settings = Settings(shared_buffers=16530)
        assert settings.pin_limit == 96
        with pytest.raises(ConformanceViolation, match=r"stream\.max_pinned_buffers claims 96; .* give 95"):
            Scenario(settings=settings, relation_blocks=50, blocks=list(range(50))).start(
                ReferenceImplementation()
            )
    assert _oracle.max_proportional_pins(Settings(shared_buffers=16530)) == 95
