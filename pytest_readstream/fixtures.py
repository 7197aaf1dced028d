"""The plugin's public fixtures (every name prefixed ``readstream_``).

The fixtures build one simulated PostgreSQL instance per test, from declarative pieces a test can
override one at a time::

    readstream_settings ─┐
    readstream_storage ──┼─> readstream_instance ─> readstream_backend ─> readstream_stream_factory
    readstream_faults ───┘          │                                        (readstream_impl)
                                    ├─> readstream_clock, readstream_pool
                                    └─> readstream_relation (synthetic data, written straight
                                        into simulated storage, never through the implementation)

The implementation under test only ever sees the harness's buffer manager (``readstream_backend``)
and the relation, so every pin and every read it makes is observed from outside, as PostgreSQL's
``pg_stat_io`` observes a stream. Everything random draws from the test's seed
(``readstream_test_seed``), which derives from the run's ``--readstream-seed`` and the test id: a
test gets the same scenario alone, in a full run, or on any xdist worker.

Each fixture records what it built in the test's :class:`~pytest_readstream.repro.Reproduction`,
so a failure report shows the scenario (see ``repro.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ._rerun import RerunStyle, rerun_style, rerun_target
from ._stash import CALL_FAILED_KEY, IMPL_KEY
from .config import get_options
from .protocol import CAPABILITIES
from .reporting import STATS_PROPERTY
from .repro import REPRO_KEY, Reproduction
from .scenario import NO_PARAM, faults_from, settings_from, storage_from

__all__ = [
    "readstream_impl",
    "readstream_seed",
    "readstream_test_seed",
    "readstream_rng",
    "readstream_faker",
    "readstream_repro",
    "readstream_stats",
    "readstream_settings",
    "readstream_storage",
    "readstream_faults",
    "readstream_instance",
    "readstream_relation",
    "readstream_clock",
    "readstream_pool",
    "readstream_backend",
    "readstream_stream_factory",
    "StreamFactory",
    "StatsRecorder",
    "derive_seed",
    "repro_for",
    "IMPL_KEY",
    "CALL_FAILED_KEY",
]


def derive_seed(run_seed: int, nodeid: str) -> int:
    """A test's own 32-bit seed: a hash of the run's seed and the test id (order independent)."""
    digest = hashlib.blake2b(f"{run_seed}\x00{nodeid}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _implementation(config: pytest.Config) -> Any:
    return config.stash[IMPL_KEY]


_RERUN_KEY = pytest.StashKey[RerunStyle]()


def rerun_style_of(config: pytest.Config) -> RerunStyle:
    """The session's way of writing reruns (computed once)."""
    style = config.stash.get(_RERUN_KEY, None)
    if style is None:
        style = config.stash[_RERUN_KEY] = rerun_style(config)
    return style


def repro_for(item: pytest.Item) -> Reproduction:
    """The test's reproduction record (created on first use)."""
    repro = item.stash.get(REPRO_KEY, None)
    if repro is None:
        opts = get_options(item.config)
        style = rerun_style_of(item.config)
        repro = Reproduction(
            item.nodeid,
            opts.seed,
            derive_seed(opts.seed, item.nodeid),
            opts.impl,
            impl_args=opts.rerun_args(),
            launcher=style.launcher,
            target=rerun_target(item, style),
            options=style.options,
        )
        item.stash[REPRO_KEY] = repro
    return repro


def _param(request: pytest.FixtureRequest) -> Any:
    return getattr(request, "param", NO_PARAM)


# ------------------------------------------------------------------------------------ session
@pytest.fixture(scope="session")
def readstream_impl(pytestconfig: pytest.Config) -> Any:
    """The implementation under test (chosen with ``--readstream-impl``)."""
    return _implementation(pytestconfig)


@pytest.fixture(scope="session")
def readstream_seed(pytestconfig: pytest.Config) -> int:
    """The run's seed (``--readstream-seed``, or drawn at random and printed in the header)."""
    return get_options(pytestconfig).seed


# ------------------------------------------------------------------------------------ randomness
@pytest.fixture
def readstream_test_seed(request: pytest.FixtureRequest, readstream_seed: int) -> int:
    """This test's seed, derived from the run's seed and the test id."""
    return derive_seed(readstream_seed, request.node.nodeid)


@pytest.fixture
def readstream_rng(readstream_test_seed: int) -> Any:
    """A ``numpy.random.Generator`` seeded with the test's seed."""
    import numpy as np

    return np.random.default_rng(readstream_test_seed)


@pytest.fixture
def readstream_faker(readstream_test_seed: int) -> Any:
    """A ``faker.Faker`` seeded with the test's seed (``seed_instance``, not the global seed)."""
    from faker import Faker

    fake = Faker()
    fake.seed_instance(readstream_test_seed)
    return fake


# ------------------------------------------------------------------------------------ records
@pytest.fixture
def readstream_repro(request: pytest.FixtureRequest) -> Reproduction:
    """The test's reproduction record: ``readstream_repro.record(blocks=..., anything=...)``."""
    return repro_for(request.node)


class StatsRecorder:
    """Attaches observed I/O figures to the test's report (``readstream_stats`` user property).

    The summary and the JSON report sum every numeric figure; the conventional names are
    ``reads`` (I/Os), ``read_blocks``, ``read_bytes``, ``hits``, ``waits`` and ``elapsed_us``
    (simulated microseconds).
    """

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def record(self, **figures: Any) -> dict[str, Any]:
        """Attach ``figures`` (JSON-serialisable values) as one ``readstream_stats`` entry."""
        from .repro import jsonable

        entry = jsonable(figures)
        self._item.user_properties.append((STATS_PROPERTY, entry))
        return entry

    def record_backend(self, backend: Any, **extra: Any) -> dict[str, Any]:
        """Attach a backend's counters (``reference_impl.Backend``): reads, blocks, hits, time."""
        st = backend.stats
        return self.record(
            reads=st.reads,
            read_blocks=st.read_bytes // 8192,
            read_bytes=st.read_bytes,
            hits=st.hits,
            waits=st.waits,
            elapsed_us=backend.clock.now,
            **extra,
        )

    def record_outcome(self, outcome: Any, **extra: Any) -> dict[str, Any]:
        """Attach a scan's :class:`~pytest_readstream.protocol.ScanOutcome` figures."""
        figures: dict[str, Any] = {
            "reads": outcome.reads,
            "read_blocks": outcome.read_bytes // 8192,
            "read_bytes": outcome.read_bytes,
            "hits": outcome.hits,
        }
        if outcome.elapsed_us is not None:
            figures["elapsed_us"] = outcome.elapsed_us
        return self.record(**figures, **extra)


@pytest.fixture
def readstream_stats(request: pytest.FixtureRequest) -> StatsRecorder:
    """Attach observed figures to the report: ``readstream_stats.record_backend(backend)``."""
    return StatsRecorder(request.node)


# ------------------------------------------------------------------------------------ scenario
@pytest.fixture
def readstream_settings(request: pytest.FixtureRequest) -> Any:
    """The test's ``reference_impl.Settings`` (marker ``readstream_settings`` or indirect param)."""
    settings = settings_from(request.node, _param(request))
    repro_for(request.node).record(settings=settings)
    return settings


@pytest.fixture
def readstream_storage(request: pytest.FixtureRequest) -> Any:
    """The test's ``reference_impl.DeviceProfile`` (default ``nvme``; marker or indirect param)."""
    profile = storage_from(request.node, _param(request))
    repro_for(request.node).record(storage=profile)
    return profile


@pytest.fixture
def readstream_faults(request: pytest.FixtureRequest, readstream_test_seed: int) -> Any:
    """The test's ``reference_impl.FaultPlan`` (empty by default; marker or indirect param).

    It is the plan the instance's storage consults, so faults appended during the test apply to
    later reads.
    """
    plan = faults_from(request.node, readstream_test_seed, _param(request))
    repro_for(request.node).record(faults=plan)
    return plan


@pytest.fixture
def readstream_instance(
    readstream_settings: Any,
    readstream_storage: Any,
    readstream_faults: Any,
    readstream_test_seed: int,
) -> Any:
    """A simulated server: ``Instance(settings, device=storage, faults=faults, seed=..., debug=True)``."""
    from reference_impl import Instance

    return Instance(
        readstream_settings,
        device=readstream_storage,
        faults=readstream_faults,
        seed=readstream_test_seed,
        debug=True,
    )


@pytest.fixture
def readstream_clock(readstream_instance: Any) -> Any:
    """The instance's virtual clock (``readstream_clock.now`` is simulated microseconds)."""
    return readstream_instance.clock


@pytest.fixture
def readstream_pool(readstream_instance: Any) -> Any:
    """The instance's shared buffer pool."""
    return readstream_instance.pool


@pytest.fixture
def readstream_backend(readstream_instance: Any) -> Any:
    """A backend of the instance: the harness's buffer manager handed to implementations."""
    return readstream_instance.backend()


@pytest.fixture
def readstream_relation(
    request: pytest.FixtureRequest, readstream_instance: Any, readstream_test_seed: int
) -> Any:
    """A synthetic relation built into the instance: a ``reference_impl.relations.SyntheticRelation``.

    ``readstream_relation.heap`` is the table's ``Relation`` (what a stream reads),
    ``.spec`` its ``RelationSpec``, ``.indexes`` its indexes. The spec comes from the marker
    ``@pytest.mark.readstream_relation("bulk")`` / ``readstream_relation(nblocks=500, dead_fraction=0.1)``
    or an indirect parameter (a shape name, a ``RelationSpec`` or ``{"shape": ..., **fields}``);
    by default the ``small`` shape. A spec made from fields alone takes the test's seed.
    """
    from ._relations import build, make_spec

    shape: Any = None
    params: dict[str, Any] = {}
    for mark in reversed(list(request.node.iter_markers("readstream_relation"))):
        if mark.args:
            shape, params = mark.args[0], {}
        params.update(mark.kwargs)
    param = _param(request)
    if param is not NO_PARAM:
        spec = make_spec(param, {}, seed=readstream_test_seed, where="readstream_relation parameter")
    else:
        spec = make_spec(shape, params, seed=readstream_test_seed, where="@pytest.mark.readstream_relation")
    repro_for(request.node).record(relation=spec)
    return build(readstream_instance, spec)


# ------------------------------------------------------------------------------------ streams
class StreamFactory:
    """Begins streams of the implementation under test over the test's backend.

    Call it as ``factory(rel, callback, private=None, *, fork=MAIN, flags=0, strategy=None,
    per_buffer_data=False)``. Each stream's arguments are recorded for the failure report
    (the block numbers are the test's to record: ``readstream_repro.record(blocks=...)``). At teardown, pins the backend still holds fail the test: a stream must hand
    back every buffer it pinned once it is consumed or ended.
    """

    def __init__(self, impl: Any, backend: Any, repro: Reproduction) -> None:
        self.impl = impl
        self.backend = backend
        self.repro = repro
        self.streams: list[Any] = []

    def __call__(
        self,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any = None,
        *,
        fork: Any = None,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> Any:
        from reference_impl import ForkNumber

        # The callback is handed over untouched: an implementation may recognise well-known
        # callbacks (block_range_read_stream_cb) by identity, as the mutants do.
        self.repro.note_stream(
            relation=getattr(rel, "name", repr(rel)),
            fork=int(ForkNumber.MAIN if fork is None else fork),
            flags=flags,
            strategy=None if strategy is None else repr(strategy),
            per_buffer_data=per_buffer_data,
            callback=getattr(callback, "__qualname__", repr(callback)),
            private=repr(private),
        )
        stream = self.impl.begin_stream(
            self.backend,
            rel,
            callback,
            private,
            fork=ForkNumber.MAIN if fork is None else fork,
            flags=flags,
            strategy=strategy,
            per_buffer_data=per_buffer_data,
        )
        self.streams.append(stream)
        return stream

    def leftover_pins(self) -> str | None:
        """A description of the pins still held, or ``None`` when there are none."""
        pinned = self.backend.pinned_buffers()
        if not pinned:
            return None
        open_streams = [
            f"#{i} {s!r}" for i, s in enumerate(self.streams, start=1) if getattr(s, "ended", None) is False
        ]
        text = (
            f"the backend still holds {sum(pinned.values())} pin(s) on {len(pinned)} buffer(s) at the "
            f"end of the test: {dict(sorted(pinned.items()))}"
        )
        if open_streams:
            text += f"; streams never ended: {', '.join(open_streams)}"
        return (
            text + ". Release every buffer next_buffer() returned and end() each stream "
            "(after an expected error, call readstream_backend.abort() as a transaction abort would)."
        )


def _skip_missing(item: pytest.Item, impl: Any, capability: str) -> None:
    from .markers import note_missing_capability

    note_missing_capability(item, capability)
    why = getattr(impl, "why_lacking", None)
    reason = why(capability) if callable(why) else None
    pytest.skip(
        f"implementation {getattr(impl, 'name', impl)!r} lacks capability {capability!r} "
        f"({CAPABILITIES[capability]})" + (f": {reason}" if reason else "")
    )


@pytest.fixture
def readstream_stream_factory(
    request: pytest.FixtureRequest, readstream_impl: Any, readstream_backend: Any
) -> Iterator[StreamFactory]:
    """``factory(rel, callback, ...)`` → a stream of the implementation under test.

    Skips the test when the implementation lacks ``stream-api``; fails it at teardown when pins
    are left behind.
    """
    from .implementations import capabilities_for

    settings = readstream_backend.settings
    if "stream-api" not in capabilities_for(readstream_impl, settings):
        _skip_missing(request.node, readstream_impl, "stream-api")
    factory = StreamFactory(readstream_impl, readstream_backend, repro_for(request.node))
    yield factory
    if request.node.stash.get(CALL_FAILED_KEY, False):
        return  # the test already failed; leftover pins would only repeat it
    problem = factory.leftover_pins()
    if problem is not None:
        pytest.fail(f"readstream_stream_factory: {problem}", pytrace=False)
