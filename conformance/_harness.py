"""The conformance harness: drive a stream from the consumer's side and watch the buffer manager.

Every check here is made from **outside** the implementation under test, the way PostgreSQL's
own reviewers reason about ``read_stream.c``: through what the buffer manager sees.

* :class:`BufferManagerObserver` instruments the harness's :class:`reference_impl.Backend` (the
  object handed to the implementation) so that every ``StartReadBuffers`` and
  ``WaitReadBuffers`` a stream makes is recorded with the pin budget in force at that moment.
  Pins are read from the backend's private reference counts, reads from its read log (the
  model's ``strace``), buffer validity from the shared pool.
* :class:`BlockSource` is the callback: it hands out a planned list of block numbers, remembers
  what it produced (and, with per-buffer data, a unique token per production), and notices when
  it is called at a moment PostgreSQL never calls it.
* :class:`StreamDriver` is the consumer. Each call (``next``, ``reset``, ``end``,
  ``set_strategy``, ``resume``) is followed by a check of every invariant of
  ``read_stream.md`` §9 that can be seen from outside; the first violation raises
  :class:`ConformanceViolation` with the steps so far, written as Python that can be pasted into
  a regression test.
* :class:`Scenario` describes an instance, a relation, its cache state and a callback plan in
  plain data, and starts a :class:`StreamDriver` on it: the stateful tests are built from it and
  the reproduction they print is a ``Scenario(...)`` followed by driver calls.

The limits a stream must respect are computed here from the settings, independently of the
implementation (``read_stream_begin_impl``, ``GetAccessStrategyPinLimit``,
``GetAdditionalPinLimit``), so that an implementation's own counters are never trusted.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import reference_impl
from pytest_readstream.scenario import default_settings
from reference_impl import (
    INVALID_BUFFER,
    READ_STREAM_MAINTENANCE,
    RELSEG_SIZE,
    BufferAccessStrategy,
    Fault,
    ForkNumber,
    Instance,
    InvalidBlockNumber,
    PgError,
    ReadPathObserver,
    Relation,
    Settings,
)
from reference_impl.buffers.strategy import BufferAccessStrategyType, get_access_strategy_with_size

from . import _oracle
from ._observation import ModelObservation, StreamObservation, observation_for

__all__ = [
    "ConformanceViolation",
    "ImplementationExpectation",
    "StartEvent",
    "BufferManagerObserver",
    "BlockSource",
    "StreamDriver",
    "Scenario",
    "expected_max_ios",
    "expected_max_pinned",
    "strategy_pin_limit",
    "io_context",
    "make_strategy",
    "describe_strategy",
    "open_driver",
    "has_capability",
]

_INT16_MAX = _oracle.INT16_MAX


#: How long each of the first reads of :func:`make_the_consumer_wait` takes: far longer than a
#: consumer needs to reach it, wherever it runs (a server's consumer is a probe call away).
SLOW_READ_US = 100_000
#: How many of a stream's first reads :func:`make_the_consumer_wait` slows: enough for the
#: read-ahead distance to double from 1 past any ``max_ios`` the suite uses (1 -> 2 -> ... -> 256).
SLOW_READS = 9


def make_the_consumer_wait(faults: Any, relation: str, blocks: list[int], settings: Settings) -> None:
    """Slow the reads of the first :data:`SLOW_READS` distinct blocks of a cold stream so that
    its consumer waits for each one (latency faults, which a server's read interposer imposes).

    From 19 on the read-ahead distance grows only after the consumer really waited
    (``read_stream_next_buffer``: ``needed_wait``, which ``WaitReadBuffers`` returns); reads that
    a worker finished from the machine's page cache before the consumer got there need no wait,
    and then a distance of 1 is what 19 means to keep. Only ``io_method=worker`` needs this:
    under ``sync`` every read counts as a wait (``WaitReadBuffers`` performs it), and under
    ``io_uring`` the interposer cannot delay a read (the kernel performs it).
    """
    if settings.io_method != "worker":
        return
    first: list[int] = []
    for b in blocks:
        if b not in first:
            first.append(b)
        if len(first) == SLOW_READS:
            break
    for b in first:
        faults.faults.append(Fault("latency", relation=relation, block=b, times=1, extra_us=SLOW_READ_US))


class ConformanceViolation(AssertionError):
    """An invariant of the stream API was violated (the message says which, and how to replay)."""

    #: What the broken check states (docs/conformance.md, "Contract and implementation"): a
    #: promise PostgreSQL makes its callers ("contract"), or what a version merely does
    #: ("implementation"). A test's own kind is its marker's; this is the kind of the check
    #: that failed, which the plugin reports beside it.
    readstream_kind = "contract"


class ImplementationExpectation(ConformanceViolation):
    """A per-version expectation did not hold: what PostgreSQL 18 (or 19, or master) does, not what
    it promises its callers (e.g. that ``reset`` and ``end`` wait for every started read, or that a
    read is waited for when the consumer reaches its first block). A patch may change it on purpose;
    such a failure is a changed expectation to review, not a broken invariant."""

    readstream_kind = "implementation"


# ------------------------------------------------------------------------------ limits (oracle)
def strategy_pin_limit(strategy: BufferAccessStrategy | None, nbuffers: int) -> int:
    """``GetAccessStrategyPinLimit`` of a ring the harness made (its size checked by
    :func:`make_strategy` against ``GetAccessStrategy``'s formula): ``NBuffers`` without a ring,
    a BULKREAD ring whole, half of others."""
    if strategy is None:
        return _oracle.strategy_pin_limit(None, 0, nbuffers)
    return _oracle.strategy_pin_limit(strategy.btype.value, strategy.nbuffers, nbuffers)


def expected_max_ios(settings: Settings, rel: Relation, flags: int) -> int:
    """``max_ios`` of a new stream (``read_stream_begin_impl``; 0 becomes 1, synchronous)."""
    return _oracle.stream_max_ios(settings, rel, flags, READ_STREAM_MAINTENANCE)


def expected_max_pinned(
    settings: Settings, rel: Relation, flags: int, strategy: BufferAccessStrategy | None
) -> int:
    """``max_pinned_buffers`` of a new stream, in the order ``read_stream_begin_impl`` applies caps."""
    limit = strategy_pin_limit(strategy, int(settings.shared_buffers))
    return _oracle.stream_max_pinned_buffers(settings, rel, flags, READ_STREAM_MAINTENANCE, limit)


def io_context(strategy: BufferAccessStrategy | None) -> str:
    """The ``pg_stat_io`` context reads with this strategy are counted in (``IOContextForStrategy``)."""
    return "normal" if strategy is None else strategy.btype.value


def make_strategy(instance: Instance, spec: tuple[str, int | None] | None) -> BufferAccessStrategy | None:
    """A strategy from ``(type, ring_kb)`` (``ring_kb`` None: ``GetAccessStrategy``'s default size)."""
    if spec is None:
        return None
    kind, ring_kb = spec
    btype = BufferAccessStrategyType(kind)
    if ring_kb is None:
        strategy = instance.strategy(btype)
    else:
        strategy = get_access_strategy_with_size(btype, ring_kb, int(instance.settings.shared_buffers))
    # The buffer manager builds the ring; its size is checked against PostgreSQL's formula
    # here, so that every limit derived from the ring rests on the definition, not on the model.
    want = _oracle.ring_buffers(btype.value, ring_kb, instance.settings)
    got = 0 if strategy is None else strategy.nbuffers
    if got != want:
        size = "the default size" if ring_kb is None else f"{ring_kb} kB"
        raise ConformanceViolation(
            f"the buffer manager made a {kind.upper()} ring of {got} buffers for {size}; "
            f"GetAccessStrategy/GetAccessStrategyWithSize give {want} (shared_buffers "
            f"{instance.settings.shared_buffers}, io_combine_limit {_oracle.effective_io_combine_limit(instance.settings)}, "
            f"effective_io_concurrency {instance.settings.effective_io_concurrency})"
        )
    return strategy


def describe_strategy(strategy: BufferAccessStrategy | None) -> str:
    if strategy is None:
        return "no strategy"
    return (
        f"a {strategy.btype.value.upper()} ring of {strategy.nbuffers} buffers "
        f"(pin limit {strategy_pin_limit(strategy, 1 << 30)})"
    )


# ------------------------------------------------------------------------------ buffer manager side
@dataclass
class StartEvent:
    """One ``StartReadBuffers`` call a stream made, as the buffer manager saw it."""

    op: Any
    rel: str
    fork: int
    blocknum: int
    requested: int
    accepted: int
    need_wait: bool
    additional_limit: int
    forwarded_in: int
    at_us: int
    call: int
    waited: bool = False
    #: The ``READ_BUFFERS_*`` flags passed (``None`` where the observation source does not say).
    flags: int | None = None


@dataclass
class WaitEvent:
    """One ``WaitReadBuffers`` call: which started read it waited for, during which consumer call."""

    start: StartEvent | None
    call: int
    at_us: int


class BufferManagerObserver(ReadPathObserver):
    """Records every read a stream starts and waits for through the harness's backend.

    It is a :class:`reference_impl.ReadPathObserver` of one backend: it hears every
    ``StartReadBuffers`` and ``WaitReadBuffers`` on that backend's relation and fork (the
    model's ``ReadBuffer`` goes through them as well). Checks made on the spot go to
    :attr:`violations`:

    * a start asking for more blocks than ``GetAdditionalPinLimit()`` plus the buffers forwarded
      into the request allows (``read_stream_start_pending_read``), beyond the one block a stream
      may always take;
    * more started-but-not-waited reads than ``max_ios``;
    * a read operation started again before it was waited for, or a wait for a read that was not
      started.
    """

    def __init__(self, backend: reference_impl.Backend, rel: Relation, fork: ForkNumber) -> None:
        self.backend = backend
        self.rel = rel
        self.fork = fork
        self._starts: list[StartEvent] = []
        self._waits: list[WaitEvent] = []
        self._outstanding: dict[int, StartEvent] = {}
        self._max_outstanding = 0
        self.max_ios: int | None = None
        #: GetAdditionalPinLimit()'s answer as a test chose it (None: the definition's).
        self.forced_additional: int | None = None
        self.violations: list[str] = []
        self.call = 0
        # Why the starts and waits of the stream cannot be seen (its observation source says so).
        self.blind: str | None = None
        self._ignore = 0
        # The start being made: (operation, GetAdditionalPinLimit(), buffers forwarded into it).
        self._pending: list[tuple[int, int]] = []
        backend.add_observer(self)

    def _seen(self) -> None:
        if self.blind is not None:
            import pytest

            pytest.skip(f"this test needs every read the stream started and waited for: {self.blind}")

    @property
    def starts(self) -> list[StartEvent]:
        """Every ``StartReadBuffers`` of the stream (skips the test where they cannot be seen)."""
        self._seen()
        return self._starts

    @property
    def waits(self) -> list[WaitEvent]:
        """Every ``WaitReadBuffers`` of the stream (skips the test where they cannot be seen)."""
        self._seen()
        return self._waits

    @property
    def outstanding(self) -> dict[int, StartEvent]:
        """Reads started and not yet waited for, by operation."""
        self._seen()
        return self._outstanding

    @property
    def max_outstanding(self) -> int:
        """The most reads in flight at once so far."""
        self._seen()
        return self._max_outstanding

    def restart_max_outstanding(self) -> None:
        """Count the most reads in flight from now on (from those in flight at this moment)."""
        self._max_outstanding = len(self.outstanding)

    def uninstall(self) -> None:
        """Stop observing the backend."""
        self.backend.remove_observer(self)

    def ignoring(self) -> _Ignoring:
        """A context in which the harness's own reads are not attributed to the stream."""
        return _Ignoring(self)

    def _mine(self, op: Any) -> bool:
        return self._ignore == 0 and op.rel is self.rel and op.fork == self.fork

    def read_buffers_starting(
        self,
        backend: Any,
        op: Any,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        allow_forwarding: bool,
    ) -> None:
        if not self._mine(op):
            self._pending.append((-1, -1))
            return
        be = self.backend
        # GetAdditionalPinLimit() from its definition and the backend's private refcount hash
        # (not the buffer manager's own function, which an implementation could get wrong too).
        additional = _oracle.additional_pin_limit(be.settings, len(be.refs.ovf))
        if self.forced_additional is not None:
            # The test chose GetAdditionalPinLimit()'s answer (StreamDriver.force_additional_pin_limit).
            additional = self.forced_additional
        forwarded = 0
        if allow_forwarding:
            for i in range(nblocks):
                if index + i < len(buffers) and buffers[index + i] != INVALID_BUFFER:
                    forwarded += 1
        self._before_start(id(op), blocknum, nblocks, additional, forwarded)
        self._pending.append((additional, forwarded))

    def read_buffers_started(
        self,
        backend: Any,
        op: Any,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks_asked: int,
        flags: int,
        nblocks: int,
        need_wait: bool,
        start_us: int,
    ) -> None:
        additional, forwarded = self._pending.pop()
        if additional < 0:
            return
        self.record_start(
            id(op),
            op,
            blocknum,
            nblocks_asked,
            nblocks,
            need_wait,
            additional,
            forwarded,
            start_us,
            flags=flags,
        )

    def _before_start(self, key: int, blocknum: int, nblocks: int, additional: int, forwarded: int) -> None:
        if key in self._outstanding:
            prev = self._outstanding[key]
            self.violations.append(
                f"the read operation of blocks {prev.blocknum}..{prev.blocknum + prev.accepted - 1} was "
                f"reused to start blocks {blocknum}.. before anybody waited for it"
            )
        budget = max(1, min(additional, _INT16_MAX) + forwarded)
        if nblocks > budget:
            self.violations.append(
                f"StartReadBuffers asked for {nblocks} blocks from block {blocknum} while "
                f"GetAdditionalPinLimit() was {additional} and {forwarded} forwarded buffer(s) were "
                f"in the request: at most {budget} were allowed (read_stream_start_pending_read)"
            )

    def record_start(
        self,
        key: int,
        op: Any,
        blocknum: int,
        nblocks: int,
        accepted: int,
        need_wait: bool,
        additional: int,
        forwarded: int,
        at_us: int,
        *,
        check: bool = False,
        flags: int | None = None,
    ) -> None:
        """A ``StartReadBuffers`` of the stream (``key`` names its operation until it is waited for).

        The model's calls come through :meth:`_start`; a stream running elsewhere reports its
        calls here (``check``: also check the request against the pin budget and the operation).
        """
        if check:
            self._before_start(key, blocknum, nblocks, additional, forwarded)
        ev = StartEvent(
            op,
            self.rel.name,
            int(self.fork),
            blocknum,
            nblocks,
            accepted,
            need_wait,
            additional,
            forwarded,
            at_us,
            self.call,
            flags=flags,
        )
        self._starts.append(ev)
        if need_wait:
            self._outstanding[key] = ev
            n = len(self._outstanding)
            if n > self._max_outstanding:
                self._max_outstanding = n
            if self.max_ios is not None and n > self.max_ios:
                self.violations.append(
                    f"{n} reads were started and not yet waited for (blocks "
                    + ", ".join(f"{e.blocknum}+{e.accepted}" for e in self._outstanding.values())
                    + f"), above max_ios = {self.max_ios}"
                )

    def record_wait(self, key: int, at_us: int) -> None:
        """A ``WaitReadBuffers`` of the stream for the operation ``key``."""
        ev = self._outstanding.pop(key, None)
        if ev is None:
            self.violations.append("WaitReadBuffers was called for a read that was not started (or twice)")
        else:
            ev.waited = True
        self._waits.append(WaitEvent(ev, self.call, at_us))

    def read_buffers_waiting(self, backend: Any, op: Any) -> None:
        if self._mine(op):
            self.record_wait(id(op), self.backend.clock.now)


class _Ignoring:
    def __init__(self, obs: BufferManagerObserver) -> None:
        self.obs = obs

    def __enter__(self) -> None:
        self.obs._ignore += 1

    def __exit__(self, *exc: object) -> None:
        self.obs._ignore -= 1


# ------------------------------------------------------------------------------ the callback
class BlockSource:
    """A stream callback handing out a planned list of blocks, watching when it is called.

    ``blocks`` may be extended later (:meth:`add`). With ``fn`` the blocks come from another
    callback (``fn(stream, private)``, e.g. ``block_range_read_stream_cb``) and are recorded. ``pause_at`` lists positions (counts of
    blocks produced) at which the callback calls ``stream.pause()`` and returns its result
    instead of a block (PostgreSQL master's ``read_stream_pause``). With ``per_buffer_data`` each
    production returns ``(block, token)`` where the token is unique, so misplaced per-buffer data
    cannot go unnoticed.
    """

    def __init__(
        self,
        blocks: Iterable[int],
        *,
        per_buffer_data: bool = False,
        pause_at: Iterable[int] = (),
        fn: Callable[[Any, Any], int] | None = None,
    ) -> None:
        self.fn = fn
        self.blocks = list(blocks)
        self.per_buffer_data = per_buffer_data
        self.pause_at = set(pause_at)
        self.pos = 0
        self.produced: list[tuple[int, str]] = []
        self.produced_set: set[int] = set()
        self.queue: deque[tuple[int, str]] = deque()
        self.ended = False
        self.paused = False
        self.forbidden: str | None = None
        self.violations: list[str] = []
        self.calls = 0

    def add(self, blocks: Iterable[int]) -> None:
        """More blocks for later calls (only before the source has reported its end)."""
        self.blocks.extend(blocks)

    def __call__(self, stream: Any, private: Any) -> Any:
        self.calls += 1
        if self.forbidden is not None:
            self.violations.append(f"the callback was called {self.forbidden}")
        if self.ended:
            self.violations.append(
                "the callback was called again after it returned InvalidBlockNumber, without a reset"
            )
        if self.pos in self.pause_at:
            self.pause_at.discard(self.pos)
            self.paused = True
            self.ended = True
            return stream.pause()
        if self.fn is not None:
            block = self.fn(stream, private)
            if block == InvalidBlockNumber:
                self.ended = True
                return InvalidBlockNumber
            self.blocks.append(block)
        elif self.pos >= len(self.blocks):
            self.ended = True
            return InvalidBlockNumber
        else:
            block = self.blocks[self.pos]
        token = f"data#{len(self.produced)}:block{block}"
        self.pos += 1
        self.produced.append((block, token))
        self.produced_set.add(block)
        self.queue.append((block, token))
        return (block, token) if self.per_buffer_data else block

    def remaining(self) -> list[int]:
        return self.blocks[self.pos :]


# ------------------------------------------------------------------------------ the consumer
class _ForcedPinLimit:
    """``GetAdditionalPinLimit()`` as :meth:`StreamDriver.force_additional_pin_limit` chose it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self) -> int:
        return self.limit


class StreamDriver:
    """The consumer of one stream: every call is followed by a check of every visible invariant.

    ``begin`` is ``readstream_stream_factory`` or ``impl.begin_stream`` bound to the backend.
    ``held`` counts pins the consumer (the test) owns on this backend; everything else the
    backend pins belongs to the stream.
    """

    def __init__(
        self,
        begin: Callable[..., Any],
        instance: Instance,
        backend: reference_impl.Backend,
        rel: Relation,
        source: BlockSource,
        *,
        fork: ForkNumber = ForkNumber.MAIN,
        flags: int = 0,
        strategy: BufferAccessStrategy | None = None,
        per_buffer_data: bool = False,
        introspection: bool = False,
        eviction_possible: bool | None = None,
        setup_code: str = "",
        held: Counter[int] | None = None,
        private: Any = None,
    ) -> None:
        self.instance = instance
        self.backend = backend
        self.pool = instance.pool
        self.rel = rel
        self.fork = fork
        self.source = source
        self.flags = flags
        self.per_buffer_data = per_buffer_data
        self.introspection = introspection
        self.settings = backend.settings
        self.held: Counter[int] = held if held is not None else Counter()
        self.steps: list[str] = []
        self.setup_code = setup_code
        self.returned: list[int] = []
        self.ended = False
        self.idle = True
        self.strategy = strategy
        self.initial_limit = expected_max_pinned(self.settings, rel, flags, strategy)
        self.limit = self.initial_limit
        self.max_ios = expected_max_ios(self.settings, rel, flags)
        self.max_stream_pins = 0
        self.last_error: PgError | None = None
        self.error_call: int | None = None
        self._reads: list[Any] = []
        self.eviction_possible = (
            eviction_possible
            if eviction_possible is not None
            else (strategy is not None or rel.nblocks(fork) + 8 > int(self.settings.shared_buffers))
        )
        self._read_counts: Counter[int] = Counter()
        self._ledger_used: set[int] = set()
        self.observer = BufferManagerObserver(backend, rel, fork)
        self.observer.max_ios = self.max_ios
        self._reads_context = io_context(strategy)
        self.begin = begin
        # The model's reads before the stream are not the stream's.
        model_log = ModelObservation(instance, backend).read_log()
        if model_log is None:
            raise ConformanceViolation(
                "the harness needs a backend that records its reads (record_reads=True)"
            )
        log_mark = len(model_log)
        self.stream = begin(
            rel, source, private, fork=fork, flags=flags, strategy=strategy, per_buffer_data=per_buffer_data
        )
        # Pins, pages and reads are watched where the stream does its buffer work.
        self.obs: StreamObservation = observation_for(self.stream, instance, backend)
        self.obs.bind(self.observer)
        self.observer.blind = self.obs.blind_to_reads
        if eviction_possible is None and not self.eviction_possible:
            # A server's pool also holds pages of other relations (its catalogs): with them the
            # relation may not fit, and a block may leave the pool and be read again.
            others = self.obs.other_pages()
            self.eviction_possible = rel.nblocks(fork) + 8 + others > self.settings.nbuffers
        translate = getattr(self.obs, "consumer_buffers", None)
        if translate is not None:
            # Buffers the consumer pinned before the stream, as the stream's buffer manager numbers them.
            self.held = translate(self.held)
        log = self.obs.read_log()
        assert log is not None, "an observation source that a stream brings keeps a read log"
        self._log = log
        self._log_seen = log_mark if self._log is model_log else 0
        self._step("stream = begin", "the stream is begun")
        self.check()

    # ---------------------------------------------------------------- bookkeeping
    def _step(self, code: str, words: str) -> None:
        self.steps.append(f"{code:<40} # {words}")

    def script(self) -> str:
        """The steps so far as pasteable Python (after the scenario's set-up, if any)."""
        lines = [self.setup_code] if self.setup_code else []
        lines += [s for s in self.steps if not s.startswith("stream = begin")]
        return "\n".join(lines)

    def fail(self, message: str, *, kind: str = "contract") -> None:
        """Raise the violation; ``kind="implementation"`` for a per-version expectation
        (:class:`ImplementationExpectation`)."""
        cls = ImplementationExpectation if kind == "implementation" else ConformanceViolation
        raise cls(f"{message}\n\nSteps (paste into a regression test):\n{self.script()}")

    @property
    def stream_pins(self) -> int:
        """Pins the backend holds that are not the consumer's: the stream's."""
        total = sum(self.obs.pinned_buffers().values())
        return total - sum(self.held.values())

    @property
    def reads(self) -> list[Any]:
        """The stream's reads so far (skips the test where its observation cannot see them)."""
        self.observer._seen()
        return self._reads

    @property
    def read_counts(self) -> Counter[int]:
        """How often each block was read (skips the test where the reads cannot be seen)."""
        self.observer._seen()
        return self._read_counts

    def buffer_is_zeroed(self, buf: int) -> bool:
        """Whether ``zero_damaged_pages`` zeroed the page in ``buf``, as the stream's buffer manager
        (its observation source) shows it."""
        return self.obs.is_zeroed(buf)

    def _buffer_name(self, buf: int) -> str:
        return f"buffer {buf} (block {self.obs.buffer_tag(buf)[2]})"

    # ---------------------------------------------------------------- consumer calls
    def next(self, keep: bool = False) -> int:
        """``read_stream_next_buffer``; the buffer is released at once unless ``keep``."""
        if self.ended:
            raise ConformanceViolation("the test called next() on an ended stream")
        self.observer.call += 1
        call = self.observer.call
        head = self.source.queue[0][0] if self.source.queue else None
        waits_before = len(self.observer._waits)
        code = "d.next(keep=True)" if keep else "d.next()"
        try:
            if self.per_buffer_data:
                buf, data = self.stream.next_buffer_with_data()
            else:
                buf, data = self.stream.next_buffer(), None
        except PgError as err:
            self.last_error = err
            self.error_call = call
            self._step(code, f"raised {type(err).__name__} while block {head} was due")
            raise
        waits = self.observer._waits[waits_before:]
        if buf == INVALID_BUFFER:
            self._step(code, "end of stream")
            self._check_end_of_stream()
            self.idle = True
        else:
            self.idle = False
            block = self.obs.buffer_tag(buf)[2]
            self._step(code, f"block {block} returned" + (", the consumer keeps its pin" if keep else ""))
            self._check_returned(buf, data, waits)
            self.returned.append(block)
            if keep:
                self.held[buf] += 1
            else:
                self.obs.release_buffer(buf)
        self.check()
        return buf

    def release_held(self, index: int = 0) -> None:
        """Release one buffer the consumer kept (the ``index``-th, in buffer order)."""
        bufs = sorted(self.held.elements())
        if not bufs:
            return
        buf = bufs[index % len(bufs)]
        self.held[buf] -= 1
        if not self.held[buf]:
            del self.held[buf]
        self.obs.release_buffer(buf)
        self._step(f"d.release_held({index})", f"the consumer releases {self._buffer_name(buf)}")
        self.check()

    def reset(self) -> None:
        """``read_stream_reset``: everything not consumed is released; the stream can be reused."""
        self._step("d.reset()", "the stream is reset")
        self._drain_call("reset", self.stream.reset)
        self.source.ended = False
        self.source.paused = False
        self.idle = True
        self.check()

    def end(self) -> None:
        """``read_stream_end``."""
        self._step("d.end()", "the stream is ended")
        self._drain_call("end", self.stream.end)
        self.ended = True
        self.idle = False
        self.check()

    def abort(self) -> None:
        """Transaction abort (``Backend.abort``): the resource owner drops every pin; no end()."""
        self._step("d.abort()", "the transaction aborts (pins dropped by the resource owner)")
        self.obs.abort()
        self.held.clear()
        self.ended = True
        self.source.queue.clear()
        pins = sum(self.obs.pinned_buffers().values())
        if pins:
            self.fail(f"{pins} pin(s) survived the transaction abort")

    def _drain_call(self, what: str, fn: Callable[[], None]) -> None:
        self._absorb_reads()
        mark = len(self._reads)
        produced_before = set(self.source.produced_set)
        self.source.forbidden = f"during {what}()"
        self.observer.call += 1
        try:
            fn()
        except PgError as err:
            self.last_error = err
            self.error_call = self.observer.call
            raise
        finally:
            self.source.forbidden = None
            self.source.queue.clear()
        self._absorb_reads()
        for rec in self._reads[mark:]:
            for b in range(rec.start, rec.start + rec.nblocks):
                if b not in produced_before:
                    self.fail(f"{what}() read block {b}, which the callback had not produced before {what}()")
        for v in self.source.violations:
            self.fail(v)
        pins = self.stream_pins
        if pins:
            self.fail(f"{what}() left {pins} pin(s) held by the stream: {self._stream_pin_list()}")
        if self.observer._outstanding:
            # PostgreSQL 18's reset and end wait for every started read; what callers are promised
            # is only that the pins are gone by the end of the statement (an in-flight patch lets
            # reset abandon its reads: read-stream-reset-no-wait).
            self.fail(
                f"{what}() returned with {len(self.observer._outstanding)} started read(s) never waited for",
                kind="implementation",
            )

    def set_strategy(
        self, strategy: BufferAccessStrategy | None, *, code: str = "d.set_strategy(...)"
    ) -> None:
        """``read_stream_set_strategy`` on an idle stream (the sample-scan thread's API)."""
        if not self.idle:
            raise ConformanceViolation("the test called set_strategy() on a stream that is not idle")
        self._step(code, f"the stream switches to {describe_strategy(strategy)}")
        self.stream.set_strategy(strategy)
        self.strategy = strategy
        self.limit = max(
            1, min(self.initial_limit, strategy_pin_limit(strategy, int(self.settings.shared_buffers)))
        )
        self._reads_context = io_context(strategy)
        if strategy is not None:
            self.eviction_possible = True
        self.check()

    def set_strategy_spec(self, spec: tuple[str, int | None] | None) -> BufferAccessStrategy | None:
        """:meth:`set_strategy` with a new strategy ``(type, ring_kb)`` (None: no strategy)."""
        strategy = make_strategy(self.instance, spec)
        self.set_strategy(strategy, code=f"d.set_strategy_spec({spec!r})")
        return strategy

    def other_pin(self, block: int) -> None:
        """Another backend reads ``block`` and keeps it pinned."""
        self.obs.other_pin(self.rel, block, self.fork)
        self._step(f"d.other_pin({block})", f"another backend pins block {block}")
        self.check()

    def other_release(self) -> None:
        """The other backend drops every pin it holds."""
        self.obs.other_release()
        self._step("d.other_release()", "the other backend drops its pins")
        self.check()

    def grow(self, nblocks: int) -> None:
        """The relation grows by ``nblocks`` blocks (another backend extends it)."""
        self.obs.grow(self.rel, self.fork, nblocks)
        self._step(f"d.grow({nblocks})", f"the relation grows by {nblocks} blocks")

    def begin_again(self, blocks: list[int]) -> StreamDriver:
        """After :meth:`end`: a new stream on the same backend and relation (same flags and strategy)."""
        if not self.ended:
            raise ConformanceViolation("the test called begin_again() before end()")
        self.observer.uninstall()
        source = BlockSource(blocks, per_buffer_data=self.per_buffer_data)
        nxt = StreamDriver(
            self.begin,
            self.instance,
            self.backend,
            self.rel,
            source,
            fork=self.fork,
            flags=self.flags,
            strategy=self.strategy,
            per_buffer_data=self.per_buffer_data,
            introspection=self.introspection,
            eviction_possible=self.eviction_possible or None,
            setup_code=self.script(),
            held=self.held,
        )
        if isinstance(self.obs, ModelObservation) and isinstance(nxt.obs, ModelObservation):
            nxt.obs._other = self.obs._other  # the other backend keeps its pins
        nxt._step(f"d = d.begin_again({blocks!r})", "a new stream is begun on the same backend")
        return nxt

    def add_blocks(self, blocks: list[int]) -> None:
        """The callback gets more blocks to hand out."""
        self.source.add(blocks)
        self._step(f"d.add_blocks({blocks!r})", "the callback gets more blocks")

    def resume(self) -> None:
        """``read_stream_resume`` after the callback paused."""
        self._step("d.resume()", "the stream is resumed")
        self.stream.resume()
        self.source.ended = False
        self.source.paused = False
        self.check()

    def change_setting(self, name: str, value: Any) -> None:
        """``SET name = value`` in the stream's session while the stream is open (a cursor's
        ``FETCH`` after a ``SET``). The stream keeps what it was begun with; the driver's checks
        keep the settings of the begin too."""
        change = getattr(self.stream, "change_session_setting", None)
        if callable(change):
            change(name, value)
        # The model's backend reads its GUCs from its settings, as a backend reads its globals;
        # a stream begun later in the test (begin_again) is judged by what the session has then.
        self.backend.settings = self.backend.settings.replace(**{name: value})
        self._step(f"d.change_setting({name!r}, {value!r})", f"the session sets {name} = {value}")
        self.check()

    def force_additional_pin_limit(self, limit: int) -> None:
        """From now on ``GetAdditionalPinLimit()`` answers ``limit`` to the stream (the pin budget
        of a pool far larger than the test's, up to and beyond int16). A stream that runs
        elsewhere does this through its own hook (the server's traced copy); the model's stream
        asks through the callable it keeps. Skips where neither exists."""
        import pytest

        force = getattr(self.stream, "force_additional_pin_limit", None)
        asks = getattr(self.stream, "_additional_pin_limit", None)
        if callable(force):
            force(limit)
        elif callable(asks):
            # The buffer manager's answer changes; a stream that does not ask it (it computes its
            # own budget) keeps doing so, and is judged against the chosen answer. A second force
            # replaces the first: the stream then asks the answer this driver put there.
            if isinstance(asks, _ForcedPinLimit):
                asks.limit = limit
            elif getattr(asks, "__self__", None) is self.backend:
                self.stream._additional_pin_limit = _ForcedPinLimit(limit)
        else:
            pytest.skip("this implementation's stream offers no way to choose GetAdditionalPinLimit()")
        self.observer.forced_additional = limit
        self._step(
            f"d.force_additional_pin_limit({limit})", f"GetAdditionalPinLimit() answers {limit} from now on"
        )

    def evict(self) -> None:
        """``pg_buffercache_evict_relation`` on the stream's relation (unpinned pages only)."""
        with self.observer.ignoring():
            self.obs.evict(self.rel)
        self.eviction_possible = True
        self._step("d.evict()", "unpinned pages of the relation are evicted")

    # ---------------------------------------------------------------- checks
    def _stream_pin_list(self) -> str:
        pinned = Counter(self.obs.pinned_buffers())
        pinned.subtract(self.held)
        return ", ".join(f"{self._buffer_name(b)} x{n}" for b, n in sorted(pinned.items()) if n > 0)

    def _check_returned(self, buf: int, data: Any, waits: list[WaitEvent]) -> None:
        relid, fork, block = self.obs.buffer_tag(buf)
        if not self.source.queue:
            self.fail(
                f"next_buffer() returned buffer {buf} (block {block}) but every block the callback "
                "produced had already been returned (or discarded by a reset)"
            )
        exp_block, exp_token = self.source.queue.popleft()
        if relid != self.rel.relid or fork != self.fork or block != exp_block:
            self.fail(
                f"next_buffer() returned block {block} (relation {relid}, fork {int(fork)}) where the "
                f"callback's order requires block {exp_block} of {self.rel.name!r} fork {int(self.fork)}"
            )
        if self.per_buffer_data and data != exp_token:
            self.fail(
                f"block {block} came back with per-buffer data {data!r}; the callback stored {exp_token!r} "
                "for it"
            )
        if not self.obs.is_valid(buf):
            self.fail(
                f"next_buffer() returned buffer {buf} (block {block}) whose page is not valid: its read "
                "was never waited for"
            )
        if self.obs.pin_count(buf) < self.held[buf] + 1:
            self.fail(f"next_buffer() returned buffer {buf} (block {block}) without a pin for the caller")
        # How a version waits (18, 19, master: one read per call, at its first block) is its own
        # choice: a stream that combines backwards waits elsewhere (issue 26, class 8).
        if len(waits) > 1:
            self.fail(
                f"one next_buffer() call waited for {len(waits)} reads (at most the one it returns)",
                kind="implementation",
            )
        for w in waits:
            if w.start is not None and w.start.blocknum != block:
                self.fail(
                    f"next_buffer() returning block {block} waited for the read starting at block "
                    f"{w.start.blocknum}: a read must be waited for only when the consumer reaches its first block",
                    kind="implementation",
                )

    def _check_end_of_stream(self) -> None:
        if self.source.queue:
            left = [b for b, _ in self.source.queue]
            self.fail(
                f"next_buffer() reported the end of the stream while {len(left)} block(s) the callback "
                f"produced were never returned: {left[:10]}"
            )
        if not self.source.ended:
            self.fail(
                "next_buffer() reported the end of the stream although the callback never returned "
                f"InvalidBlockNumber (it still had blocks {self.source.remaining()[:10]})"
            )

    def _absorb_reads(self) -> None:
        log = self._log
        rel = self.rel.name
        fork_name = reference_impl.storage.FORK_NAMES[self.fork]
        icl = _oracle.effective_io_combine_limit(self.settings)
        for rec in log[self._log_seen :]:
            if rec.relation != rel or rec.fork != fork_name:
                continue
            self._reads.append(rec)
            last = rec.start + rec.nblocks - 1
            if rec.nblocks > icl:
                self.fail(
                    f"a read of blocks {rec.start}..{last} is {rec.nblocks} blocks, above io_combine_limit {icl}"
                )
            if rec.start // RELSEG_SIZE != last // RELSEG_SIZE:
                self.fail(
                    f"a read of blocks {rec.start}..{last} crosses a segment boundary ({RELSEG_SIZE} blocks)"
                )
            delivered = self._delivered(rec)
            for b in range(rec.start, last + 1):
                if b not in self.source.produced_set:
                    self.fail(
                        f"block {b} was read (read {rec.start}..{last}) but the callback never produced it"
                    )
                if b >= rec.start + delivered:
                    continue
                self._read_counts[b] += 1
                if self._read_counts[b] > 1 and not self.eviction_possible:
                    self.fail(
                        f"block {b} was read {self._read_counts[b]} times although it never left the buffer pool"
                    )
            if rec.context != self._reads_context and rec.backend == self.obs.backend_id():
                self.fail(
                    f"a read of blocks {rec.start}..{last} was counted in I/O context {rec.context!r}, but the "
                    f"stream's strategy is {describe_strategy(self.strategy)} (context {self._reads_context!r})"
                )
        self._log_seen = len(log)

    def _delivered(self, rec: Any) -> int:
        """Blocks a logged read really delivered: none if it failed, fewer if the fault plan
        shortened it (the log shows the request, as ``strace`` shows a ``preadv``)."""
        if rec.error is not None:
            return 0
        n = rec.nblocks
        plan = self.instance.storage.faults
        for i, entry in enumerate(plan.ledger):
            if i in self._ledger_used or entry["fault"] != "short_read":
                continue
            if (
                entry["relation"] == rec.relation
                and entry["read_start"] == rec.start
                and entry["read_nblocks"] == rec.nblocks
            ):
                self._ledger_used.add(i)
                fault = plan.faults[entry["index"]]
                ok = fault.block - rec.start if fault.block is not None else min(fault.short_blocks, n - 1)
                n = min(n, ok)
                break
        return n

    def check(self) -> None:
        """Every invariant visible from outside, now."""
        self._absorb_reads()
        for v in self.observer.violations + self.source.violations:
            self.fail(v)
        pins = self.stream_pins
        self.max_stream_pins = max(self.max_stream_pins, pins)
        if pins > self.limit:
            self.fail(
                f"the stream holds {pins} pins, above its limit of {self.limit} "
                f"(settings: icl {_oracle.effective_io_combine_limit(self.settings)}, max_ios {self.max_ios}, "
                f"GetPinLimit {_oracle.max_proportional_pins(self.settings)}, {describe_strategy(self.strategy)}): "
                f"{self._stream_pin_list()}"
            )
        if self.ended and pins:
            self.fail(f"the ended stream still holds {pins} pins")
        ahead = len(self.source.queue)
        if not self.ended and ahead > self.limit + 1:
            # Every block taken from the callback and not yet returned is pinned in the queue, in
            # the pending read (counted against the distance, at most max_pinned_buffers) or the
            # one block pushed back (read_stream_unget_block): issue 26, class 5.
            self.fail(
                f"the stream has taken {ahead} blocks from the callback that it has not returned, "
                f"more than its pin limit {self.limit} + the one block it may push back "
                f"(blocks {[b for b, _ in self.source.queue][:12]})"
            )
        if self.introspection and not self.ended:
            # What the stream says about itself is a claim, checked against the limits derived
            # here from the settings; it is never the yardstick of another check.
            claimed = self.stream.max_pinned_buffers
            if claimed != self.limit:
                self.fail(
                    f"stream.max_pinned_buffers claims {claimed}; the settings and strategy give {self.limit}"
                )
            if not 0 <= self.stream.distance <= self.limit:
                self.fail(
                    f"stream.distance is {self.stream.distance}, outside 0..{self.limit} (the pin limit the "
                    "settings and strategy give)"
                )
            # 19+ has a second distance, the combine distance, bounded by the same pin limit.
            combine = getattr(self.stream, "combine_distance", None)
            if isinstance(combine, int) and not 0 <= combine <= self.limit:
                self.fail(
                    f"stream.combine_distance is {combine}, outside 0..{self.limit} (the pin limit the "
                    "settings and strategy give)"
                )
            if self.stream.max_ios != self.max_ios:
                self.fail(f"stream.max_ios claims {self.stream.max_ios}; the settings give {self.max_ios}")

    # ---------------------------------------------------------------- conveniences
    def consume(self, n: int | None = None, *, keep: bool = False) -> list[int]:
        """Call :meth:`next` until the end (or ``n`` buffers); the blocks returned."""
        blocks: list[int] = []
        while n is None or len(blocks) < n:
            buf = self.next(keep=keep)
            if buf == INVALID_BUFFER:
                break
            blocks.append(self.returned[-1])
        return blocks

    def close(self) -> None:
        """End the stream if the test did not, release the consumer's pins, stop observing."""
        try:
            if not self.ended:
                self.end()
            for buf, n in list(self.held.items()):
                for _ in range(n):
                    self.obs.release_buffer(buf)
            self.held.clear()
        finally:
            self.observer.uninstall()


# ------------------------------------------------------------------------------ scenarios
@dataclass
class Scenario:
    """An instance, a relation, its cache state, other backends' pins and a callback plan.

    ``settings`` are keyword arguments of :class:`reference_impl.Settings`; ``strategy`` is
    ``(type, ring_kb)`` with ``ring_kb`` None for the default ring; ``cached`` blocks are made
    resident before the stream begins; ``other_pins`` are blocks another backend reads and keeps
    pinned; ``pause_at`` are positions at which the callback pauses the stream (master).
    :meth:`start` begins a stream with ``impl`` and returns its :class:`StreamDriver`; its
    :meth:`code` is the Python that rebuilds it.
    """

    settings: dict[str, Any] | Settings = field(default_factory=dict)
    device: str = "nvme"
    relation_blocks: int = 64
    blocks: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    other_pins: list[int] = field(default_factory=list)
    flags: int = 0
    strategy: tuple[str, int | None] | None = None
    per_buffer_data: bool = False
    pause_at: list[int] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.settings, Settings):
            # Only what differs from the defaults (a scenario without a version runs in the run's
            # model version, --readstream-model-version).
            default = Settings()
            self.settings = {k: v for k, v in self.settings.as_dict().items() if v != getattr(default, k)}

    def code(self) -> str:
        """``d = Scenario(...).start(readstream_impl)``: the Python that rebuilds this scenario."""
        fields_ = ", ".join(
            f"{k}={v!r}"
            for k, v in self.__dict__.items()
            if v != _SCENARIO_DEFAULTS[k] and not (isinstance(v, (list, dict)) and not v)
        )
        return f"d = Scenario({fields_}).start(readstream_impl)"

    def start(self, impl: Any, *, introspection: bool | None = None) -> StreamDriver:
        """Build the instance and begin the stream with ``impl``; the driver of that stream."""
        settings = default_settings(**self.settings)  # type: ignore[arg-type]
        inst = Instance(settings, device=self.device, seed=self.seed, debug=True)
        rel = inst.create_relation("t", self.relation_blocks)
        if self.cached:
            inst.prewarm(rel, sorted(set(self.cached)))
        if self.other_pins:
            other = inst.backend("other")
            for b in self.other_pins:
                other.read_buffer(rel, b)
        be = inst.backend("consumer")
        strategy = make_strategy(inst, self.strategy)
        caps = _capabilities(impl, settings)
        if introspection is None:
            introspection = "introspection" in caps

        def begin(rel_: Relation, cb: Any, private: Any, **kw: Any) -> Any:
            return impl.begin_stream(be, rel_, cb, private, **kw)

        source = BlockSource(self.blocks, per_buffer_data=self.per_buffer_data, pause_at=self.pause_at)
        return StreamDriver(
            begin,
            inst,
            be,
            rel,
            source,
            flags=self.flags,
            strategy=strategy,
            per_buffer_data=self.per_buffer_data,
            introspection=introspection,
            setup_code=self.code(),
        )


_SCENARIO_DEFAULTS: dict[str, Any] = {
    "settings": {},
    "device": "nvme",
    "relation_blocks": 64,
    "blocks": [],
    "cached": [],
    "other_pins": [],
    "flags": 0,
    "strategy": None,
    "per_buffer_data": False,
    "pause_at": [],
    "seed": 0,
}


def _capabilities(impl: Any, settings: Settings) -> frozenset[str]:
    fn = getattr(impl, "capabilities_for", None)
    if callable(fn):
        return frozenset(fn(settings))
    return frozenset(getattr(impl, "capabilities", ()))


def open_driver(
    factory: Callable[..., Any],
    impl: Any,
    instance: Instance,
    backend: reference_impl.Backend,
    rel: Relation,
    blocks: Iterable[int],
    *,
    flags: int = 0,
    strategy: BufferAccessStrategy | None = None,
    per_buffer_data: bool = False,
    pause_at: Iterable[int] = (),
    fork: ForkNumber = ForkNumber.MAIN,
    eviction_possible: bool | None = None,
    fn: Callable[[Any, Any], int] | None = None,
    private: Any = None,
    held: Iterable[int] = (),
) -> StreamDriver:
    """A :class:`StreamDriver` over a stream begun with the plugin's ``readstream_stream_factory``."""
    source = BlockSource(blocks, per_buffer_data=per_buffer_data, pause_at=pause_at, fn=fn)
    caps = _capabilities(impl, backend.settings)
    return StreamDriver(
        factory,
        instance,
        backend,
        rel,
        source,
        fork=fork,
        flags=flags,
        strategy=strategy,
        per_buffer_data=per_buffer_data,
        introspection="introspection" in caps,
        eviction_possible=eviction_possible,
        setup_code="",
        private=private,
        held=Counter(held),
    )


def has_capability(impl: Any, settings: Settings, capability: str) -> bool:
    """Whether ``impl`` offers ``capability`` under ``settings``."""
    return capability in _capabilities(impl, settings)
