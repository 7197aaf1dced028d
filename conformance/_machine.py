"""The stateful test of the stream API: random scenarios, random operations, checks after each.

A hypothesis ``RuleBasedStateMachine`` begins one stream on a random :class:`Scenario` (settings
with tiny pools included, a relation, which of its blocks are cached, blocks another backend
keeps pinned, a callback plan of sequential / random / clustered / repeated / segment-crossing
blocks, stream flags, a strategy, per-buffer data, pause points) and then applies random
operations: ``next_buffer`` (releasing the buffer or keeping it pinned), releasing kept buffers,
``reset``, ``end``, ``set_strategy`` on an idle stream, ``resume`` after the callback paused,
another backend pinning and releasing blocks, eviction, the relation growing, the callback
getting more blocks. After every operation the :class:`StreamDriver` checks every invariant
visible from outside (``_harness.py``).

Hypothesis shrinks a failure to a short sequence. It is printed twice, ready to paste: as
hypothesis' own ``state.begin(scenario=Scenario(...))`` / ``state.next_buffer(keep=True)`` steps,
and, in the failure message, as the driver's ``d = Scenario(...).start(readstream_impl)`` /
``d.next()`` lines with a comment in plain words on each.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import note as _hypothesis_note
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis import target as _hypothesis_target
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from pytest_readstream import strategies as rs
from pytest_readstream.harness_errors import harness_error_line
from pytest_readstream.scenario import default_settings, model_versions
from reference_impl import (
    INVALID_BUFFER,
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_SEQUENTIAL,
    READ_STREAM_USE_BATCHING,
    RELSEG_SIZE,
    Settings,
)

from ._harness import Scenario, StreamDriver, has_capability

__all__ = ["HarnessAbort", "StreamMachine", "scenarios", "fit_scenario", "machine_for"]

_STRATEGY_SPECS: tuple[tuple[str, int | None] | None, ...] = (
    None,
    ("bulkread", None),
    ("bulkread", 8),
    ("bulkread", 32),
    ("bulkread", 128),
    ("vacuum", 8),
    ("vacuum", 16),
    ("vacuum", 64),
    ("vacuum", None),
)
_FLAGS = (READ_STREAM_FULL, READ_STREAM_SEQUENTIAL, READ_STREAM_MAINTENANCE, READ_STREAM_USE_BATCHING)
_SEGMENT_RELATION = 131072 + 96
_SIZES = (1, 6, 40, 100, 160, _SEGMENT_RELATION)
# Built once: hypothesis describes every new strategy object it meets, which is slow.
_MORE_BLOCKS = {n: rs.block_sequences(n, max_len=24) for n in _SIZES}


# MaxBackends + NUM_AUXILIARY_PROCS with the default connection settings: GetPinLimit() is
# shared_buffers // 174.
_PIN_DIVISOR = 174


@st.composite
def _settings(draw: Any, versions: tuple[str, ...]) -> Settings:
    """Settings where queues wrap often; the pool's pin limit is drawn first, so that tiny pools
    (limit 0 or 1) are common but do not crowd out pools where the stream can look ahead."""
    # Weighted towards pools whose additional-pin budget (GetPinLimit() - 8) binds a read: 9 to
    # 20 pins leave 1 to 12 (issue 26, class 10: found on every seed, not on lucky ones).
    pin_limit = draw(st.sampled_from((0, 1, 2, 4, 8, 9, 10, 12, 20, 20, 94)))
    shared_buffers = max(16, pin_limit * _PIN_DIVISOR + draw(st.integers(0, _PIN_DIVISOR - 1)))
    # io_combine_limit and io_max_combine_limit are drawn apart: PostgreSQL 18 accepts an
    # io_combine_limit above io_max_combine_limit, and the stream must then follow the smaller.
    icl = draw(st.sampled_from((1, 2, 3, 4, 8, 16, 16, 32, 128)))
    version = draw(st.sampled_from(versions))
    workers = draw(st.integers(1, 4))
    # PostgreSQL 18's fixed pool of io_workers; 19 and later size theirs between two bounds.
    pool = {"io_workers": workers} if version == "18" else {"io_min_workers": workers, "io_max_workers": 4}
    return Settings(
        version=version,
        shared_buffers=shared_buffers,
        io_combine_limit=icl,
        io_max_combine_limit=draw(st.sampled_from((1, 2, 4, 16, 32, 128))),
        # Small concurrencies most of the time (where max_ios binds), the GUC's whole range too.
        effective_io_concurrency=draw(st.one_of(st.integers(0, 8), st.integers(0, 1000))),
        maintenance_io_concurrency=draw(st.one_of(st.integers(0, 8), st.integers(0, 1000))),
        io_method=draw(st.sampled_from(("sync", "worker", "io_uring"))),
        **pool,
        debug_io_direct=draw(st.sampled_from(("", "data"))),
    )


def _target(value: float, label: str) -> None:
    """``hypothesis.target`` when hypothesis runs the machine."""
    if currently_in_test_context():
        _hypothesis_target(value, label=label)


def _can_force_pin_limit(stream: Any) -> bool:
    """Whether the harness can choose ``GetAdditionalPinLimit()``'s answer for ``stream``."""
    can = getattr(stream, "can_force_pin_limit", None)
    if isinstance(can, bool):
        return can
    return callable(getattr(stream, "_additional_pin_limit", None))


def note(text: str) -> None:
    """``hypothesis.note`` when hypothesis runs the machine; nothing when a test drives it by hand."""
    if currently_in_test_context():
        _hypothesis_note(text)


_SHAPES = ("sequential", "random", "clustered", "repeated", "runs-and-jumps", "descending")
# Weighted: the shapes that make reads combine, split and wrap the queue come up most often
# (issue 26, class 10: the planted bugs must be found on every seed, not on lucky ones).
_SHAPE_CHOICES = ("sequential", "sequential", "clustered", "runs-and-jumps", "runs-and-jumps", *_SHAPES)


def _block_plan(shape: str, nblocks: int, length: int, rng: np.random.Generator) -> list[int]:
    """A callback's block list of one shape, generated from a seeded generator.

    Drawing a shape, a length and a seed (rather than every block) keeps hypothesis' choice
    sequence short, which is what makes shrinking a failing stateful example fast; the scenario
    still prints the explicit list.
    """
    if length == 0:
        return []
    if nblocks >= RELSEG_SIZE and shape != "random":
        # Around the segment boundary: the place where reads must be cut.
        base = RELSEG_SIZE - int(rng.integers(1, 40))
    else:
        base = int(rng.integers(0, nblocks))
    if shape == "sequential":
        return [(base + i) % nblocks for i in range(length)]
    if shape == "random":
        return [int(b) for b in rng.integers(0, nblocks, size=length)]
    if shape == "descending":
        # A backward scan: descending runs with jumps (nothing combines in 18, 19 or master).
        down: list[int] = []
        b = base
        while len(down) < length:
            run = int(rng.integers(1, 18))
            down.extend((b - i) % nblocks for i in range(min(run, length - len(down))))
            b = (b - run - int(rng.integers(0, 30))) % nblocks
        return down
    if shape == "repeated":
        pool = rng.integers(0, nblocks, size=max(1, length // 3))
        return [int(pool[int(i)]) for i in np.sort(rng.integers(0, len(pool), size=length))]
    out: list[int] = []
    b = base
    while len(out) < length:
        run = int(rng.integers(1, 18))
        out.extend((b + i) % nblocks for i in range(min(run, length - len(out))))
        b = (b + run + int(rng.integers(1 if shape == "clustered" else -run, 60))) % nblocks
    return out


@st.composite
def scenarios(draw: Any) -> Scenario:
    """A random :class:`Scenario` (:func:`fit_scenario` drops what an implementation cannot run)."""
    settings = draw(_settings(model_versions()))
    nblocks = draw(st.sampled_from(_SIZES))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    blocks = _block_plan(draw(st.sampled_from(_SHAPE_CHOICES)), nblocks, draw(st.integers(0, 90)), rng)
    nbuffers = settings.nbuffers
    cached_fraction = draw(st.sampled_from((0.0, 0.0, 0.25, 0.5, 0.9, 1.0)))
    candidates = sorted(set(blocks)) or [0]
    ncached = min(round(cached_fraction * len(candidates)), nbuffers // 2)
    cached = sorted(int(b) for b in rng.choice(candidates, size=ncached, replace=False)) if ncached else []
    stride = draw(st.sampled_from((0, 0, 2, 3, 5)))
    if stride and cached_fraction < 1.0:
        # Every stride-th block cached: reads split at the cached ones and forward their buffers.
        cached = sorted({*cached, *(b for b in candidates if b % stride == 0)})[: nbuffers // 2]
    nothers = draw(st.integers(0, min(4, nbuffers // 8)))
    others = sorted({int(b) for b in rng.integers(0, nblocks, size=nothers)})
    flags = 0
    for f in _FLAGS:
        if draw(st.booleans()):
            flags |= f
    strategy = draw(st.sampled_from(_STRATEGY_SPECS))
    pbd = draw(st.booleans())
    npauses = draw(st.integers(0, 2))
    pause_at = sorted({int(p) for p in rng.integers(0, len(blocks) + 1, size=npauses)})
    return Scenario(
        settings=settings,
        relation_blocks=nblocks,
        blocks=blocks,
        cached=cached,
        other_pins=others,
        flags=flags,
        strategy=strategy,
        per_buffer_data=pbd,
        pause_at=pause_at,
        seed=seed,
    )


def fit_scenario(scenario: Scenario, impl: Any) -> Scenario:
    """``scenario`` without the features ``impl`` lacks (master settings, per-buffer data, pauses)."""
    settings = default_settings(**scenario.settings)  # type: ignore[arg-type]
    native = getattr(impl, "model_version", None)
    if isinstance(native, str):
        # A PostgreSQL server runs the model of its own version only.
        settings = settings.replace(version=native)
    elif settings.version != "18" and not has_capability(impl, settings, "pause-resume"):
        settings = settings.replace(version="18")
    fitted = dataclasses.replace(scenario, settings=settings)
    if not has_capability(impl, settings, "per-buffer-data"):
        fitted.per_buffer_data = False
    if not has_capability(impl, settings, "pause-resume"):
        fitted.pause_at = []
    return fitted


class StreamMachine(RuleBasedStateMachine):
    """Random operations on one stream of the implementation under test (see module docstring)."""

    impl: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.d: StreamDriver | None = None
        self.scenario: Scenario | None = None
        self.other_pins = 0
        self.setting_changes = 0

    # ------------------------------------------------------------------ helpers
    def _caps(self, capability: str) -> bool:
        assert self.d is not None
        return has_capability(self.impl, self.d.settings, capability)

    def _open(self) -> bool:
        return self.d is not None and not self.d.ended

    def _base_nblocks(self) -> int:
        assert self.scenario is not None
        return self.scenario.relation_blocks

    def _held_cap(self) -> int:
        assert self.d is not None
        return min(6, self.d.settings.nbuffers // 8)

    # ------------------------------------------------------------------ rules
    @initialize(scenario=scenarios())
    def begin(self, scenario: Scenario) -> None:
        scenario = fit_scenario(scenario, self.impl)
        self.scenario = scenario
        note(scenario.code())
        try:
            self.d = scenario.start(self.impl)
        except pytest.skip.Exception as why:
            # A scenario this implementation cannot run (a server built without io_uring, a
            # postmaster setting it cannot change) is not an example: draw another.
            note(f"not runnable by {getattr(self.impl, 'name', self.impl)}: {why}")
            reject()

    @precondition(lambda self: self.d is not None and self.d.ended)
    @rule(data=st.data())
    def begin_again(self, data: st.DataObject) -> None:
        assert self.d is not None
        blocks = data.draw(_MORE_BLOCKS[self._base_nblocks()], label="blocks")
        note(f"d = d.begin_again({blocks!r})")
        self.d = self.d.begin_again(blocks)

    @precondition(lambda self: self._open())
    @rule(count=st.integers(1, 40), keep=st.booleans())
    def next_buffers(self, count: int, keep: bool) -> None:
        """``count`` calls of next_buffer (fewer at the end of the stream); with ``keep`` the
        consumer keeps the first buffer's pin, as a scan holding its current page does."""
        assert self.d is not None
        keep = keep and sum(self.d.held.values()) < self._held_cap()
        for i in range(count):
            k = keep and i == 0
            note("d.next(keep=True)" if k else "d.next()")
            if self.d.next(keep=k) == INVALID_BUFFER:
                break

    @precondition(lambda self: self._open() and bool(self.d.held))
    @rule(index=st.integers(0, 16))
    def release_held(self, index: int) -> None:
        assert self.d is not None
        note(f"d.release_held({index})")
        self.d.release_held(index)

    @precondition(lambda self: self._open())
    @rule()
    def reset(self) -> None:
        assert self.d is not None
        note("d.reset()")
        self.d.reset()

    @precondition(lambda self: self._open())
    @rule()
    def end(self) -> None:
        assert self.d is not None
        note("d.end()")
        self.d.end()

    @precondition(lambda self: self._open() and self.d.idle and self._caps("set-strategy"))
    @rule(spec=st.sampled_from(_STRATEGY_SPECS))
    def set_strategy(self, spec: tuple[str, int | None] | None) -> None:
        assert self.d is not None
        note(f"d.set_strategy_spec({spec!r})")
        self.d.set_strategy_spec(spec)

    @precondition(lambda self: self._open() and self.d.source.paused and self._caps("pause-resume"))
    @rule()
    def resume(self) -> None:
        assert self.d is not None
        note("d.resume()")
        self.d.resume()

    @precondition(lambda self: self._open() and self._caps("pause-resume") and not self.d.source.ended)
    @rule(ahead=st.integers(0, 6))
    def pause_later(self, ahead: int) -> None:
        assert self.d is not None
        pos = self.d.source.pos + ahead
        note(f"d.source.pause_at.add({pos})")
        self.d.source.pause_at.add(pos)
        self.d._step(f"d.source.pause_at.add({pos})", f"the callback will pause after {pos} blocks")

    @precondition(lambda self: self._open() and self.other_pins < min(4, self.d.settings.nbuffers // 8))
    @rule(fraction=st.floats(0, 1, exclude_max=True))
    def other_backend_pins(self, fraction: float) -> None:
        assert self.d is not None
        block = int(fraction * self.d.rel.nblocks(self.d.fork))
        self.other_pins += 1
        note(f"d.other_pin({block})")
        self.d.other_pin(block)

    @precondition(lambda self: self._open() and self.other_pins > 0)
    @rule()
    def other_backend_releases(self) -> None:
        assert self.d is not None
        self.other_pins = 0
        note("d.other_release()")
        self.d.other_release()

    @precondition(lambda self: self._open() and self.d.idle and self.setting_changes < 2)
    @rule(icl=st.sampled_from((1, 2, 4, 8, 16, 32)))
    def change_io_combine_limit(self, icl: int) -> None:
        """``SET io_combine_limit`` in the stream's session while it is idle (after a reset or its
        end): the stream keeps the limit it began with (class 1)."""
        assert self.d is not None
        self.setting_changes += 1
        note(f"d.change_setting('io_combine_limit', {icl})")
        self.d.change_setting("io_combine_limit", icl)

    @precondition(lambda self: self._open() and self.d.idle and _can_force_pin_limit(self.d.stream))
    @rule(limit=st.sampled_from((0, 1, 3, 32767, 65536 + 3, 1 << 20)))
    def choose_pin_budget(self, limit: int) -> None:
        """``GetAdditionalPinLimit()`` answers ``limit`` from now on: budgets of none, a few, and
        beyond int16 (class 2)."""
        assert self.d is not None
        note(f"d.force_additional_pin_limit({limit})")
        self.d.force_additional_pin_limit(limit)

    @precondition(lambda self: self._open())
    @rule()
    def evict(self) -> None:
        assert self.d is not None
        note("d.evict()")
        self.d.evict()

    @precondition(lambda self: self._open())
    @rule(n=st.integers(1, 8))
    def grow(self, n: int) -> None:
        assert self.d is not None
        note(f"d.grow({n})")
        self.d.grow(n)

    @precondition(lambda self: self._open())
    @rule(data=st.data())
    def more_blocks(self, data: st.DataObject) -> None:
        assert self.d is not None
        blocks = data.draw(_MORE_BLOCKS[self._base_nblocks()], label="blocks")
        note(f"d.add_blocks({blocks!r})")
        self.d.add_blocks(blocks)

    def teardown(self) -> None:
        if self.d is not None:
            d = self.d
            # Steer hypothesis towards the shapes where streams break (each label once per
            # example, as hypothesis requires): pins near the limit, reads split with buffers
            # forwarded, reads in flight near max_ios.
            _target(d.max_stream_pins / max(1, d.limit), "stream pins / pin limit")
            starts = d.observer._starts
            _target(float(sum(1 for e in starts if e.accepted < e.requested)), "split starts")
            _target(d.observer.max_outstanding / max(1, d.max_ios), "reads in flight / max_ios")
            if not d.ended:
                note("d.end()")
            d.close()


class HarnessAbort(BaseException):
    """A harness error raised inside a rule (the server did not accept a connection in time, the
    probe did not build), carried out of hypothesis untouched.

    Hypothesis treats every ``Exception`` of a rule as a failure to shrink and replay; a harness
    error judged nothing, and replayed on a machine less loaded it does not happen again, which
    hypothesis would report as a ``FlakyFailure``. As a ``BaseException`` it ends the run at once;
    ``test_stream_api_state_machine`` raises the harness error itself (``.error``), which the
    plugin reports as a harness error, never as a failure (issue 26, class 11).
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _stop_on_harness_errors(fn: Any) -> Any:
    @functools.wraps(fn)  # keeps hypothesis' rule markers (the function's __dict__)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except Exception as err:
            if harness_error_line(err) is not None:
                raise HarnessAbort(err) from err
            raise

    return run


for _name, _fn in list(vars(StreamMachine).items()):
    if _name == "teardown" or any(k.startswith("hypothesis_stateful") for k in getattr(_fn, "__dict__", {})):
        setattr(StreamMachine, _name, _stop_on_harness_errors(_fn))


def machine_for(impl: Any) -> type[StreamMachine]:
    """A :class:`StreamMachine` subclass bound to ``impl``."""
    return type("StreamMachineFor" + type(impl).__name__, (StreamMachine,), {"impl": impl})
