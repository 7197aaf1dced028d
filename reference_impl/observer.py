"""Observers of one backend's read path: the model's explicit instrumentation interface.

Tools that watch the model (the conformance harness, ``readstream trace``, the benchmarks, the
identity traces of ``tests/model``) attach a :class:`ReadPathObserver` to a
:class:`~reference_impl.buffers.bufmgr.Backend` with ``backend.add_observer(obs)`` and detach it
with ``backend.remove_observer(obs)``. They never replace the backend's methods.

The events are the points where PostgreSQL's own instrumentation sits (``TRACE_POSTGRESQL_*``
probes, ``pgaio`` debug messages, ``pg_stat_io``):

==========================  =============================================================
``stream_begun``            ``read_stream_begin_relation`` made a stream on this backend
``read_buffers_starting``   ``StartReadBuffers`` called (before anything is pinned)
``read_buffers_started``    ``StartReadBuffers`` returned: blocks pinned, wait needed
``io_issued``               an I/O was handed to the I/O method (``AsyncReadBuffers``)
``io_completed``            an I/O of this backend completed (buffers valid or in error)
``read_buffers_waiting``    ``WaitReadBuffers`` called
``read_buffers_waited``     ``WaitReadBuffers`` returned or raised
``buffer_released``         ``ReleaseBuffer`` (one pin dropped)
``buffer_flushed``          ``FlushBuffer`` wrote a dirty victim
==========================  =============================================================

A backend without observers pays one ``is None`` test per event site (the read path tests a
single attribute); with several, each event goes to every observer in the order they were added.
Each site calls only the observers that override one of its events (``overrides``): a recorder of
waits adds nothing to a pin, an I/O or a release, and a timer of writes nothing to a read.
Observers must not change what they observe: the model's answers are the same with and without
them (``tests/model/test_identity_traces.py`` records through this interface).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .clock import VirtualClock

if TYPE_CHECKING:
    from .errors import PgError
    from .io.handle import InflightIO
    from .storage.relation import ForkNumber, Relation

__all__ = ["ReadPathObserver", "WaitRecorder", "ObservedBackend", "ObservedRead"]


class ObservedBackend(Protocol):
    """The backend an observer hears from (:class:`~reference_impl.buffers.bufmgr.Backend`),
    as far as every observer may rely on it. The buffer manager depends on this module, not
    the other way round: an observer that needs more annotates its ``backend`` as ``Any``."""

    name: str
    id: int
    clock: VirtualClock


class ObservedRead(Protocol):
    """A read operation an observer hears of (``ReadBuffersOperation``)."""

    rel: Relation
    fork: ForkNumber
    blocknum: int
    nblocks: int


class ReadPathObserver:
    """Base class of a backend's read-path observer (``bufmgr.c``'s trace points); every event
    is a no-op here, so a subclass overrides only what it needs."""

    def stream_begun(self, backend: ObservedBackend, stream: Any) -> None:
        """``read_stream_begin_relation`` returned ``stream``."""

    def read_buffers_starting(
        self,
        backend: ObservedBackend,
        op: ObservedRead,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks: int,
        flags: int,
        allow_forwarding: bool,
    ) -> None:
        """``StartReadBuffers(op, buffers + index, blocknum, nblocks, flags)`` is about to run;
        ``buffers[index:index + nblocks]`` may hold buffers forwarded by the previous call."""

    def read_buffers_started(
        self,
        backend: ObservedBackend,
        op: ObservedRead,
        buffers: list[int],
        index: int,
        blocknum: int,
        nblocks_asked: int,
        flags: int,
        nblocks: int,
        need_wait: bool,
        start_us: int,
    ) -> None:
        """``StartReadBuffers`` pinned ``buffers[index:index + nblocks]`` (its ``*nblocks`` out
        value) and returned ``need_wait``; it was called at virtual time ``start_us``."""

    def io_issued(self, backend: ObservedBackend, ioh: InflightIO) -> None:
        """An I/O of ``ioh.nblocks`` blocks from ``ioh.start`` was submitted (or, for a read the
        backend performs itself, started); ``ioh.complete_at`` is when it will be done."""

    def io_completed(self, backend: ObservedBackend, ioh: InflightIO) -> None:
        """An I/O this backend issued completed (``ioh.error`` says whether it failed)."""

    def read_buffers_waiting(self, backend: ObservedBackend, op: ObservedRead) -> None:
        """``WaitReadBuffers(op)`` is about to run."""

    def read_buffers_waited(
        self,
        backend: ObservedBackend,
        op: ObservedRead,
        start_us: int,
        end_us: int,
        needed_wait: bool,
        error: PgError | None,
    ) -> None:
        """``WaitReadBuffers(op)`` ran from ``start_us`` to ``end_us``; ``needed_wait`` is the
        version's return value (``Backend.wait_read_buffers``); ``error`` is the error it raised, if any."""

    def buffer_released(self, backend: ObservedBackend, buf: int) -> None:
        """``ReleaseBuffer(buf)`` dropped one of this backend's pins."""

    def buffer_flushed(
        self, backend: ObservedBackend, buf: int, context: str, start_us: int, end_us: int
    ) -> None:
        """``FlushBuffer`` wrote ``buf`` (a dirty victim) from ``start_us`` to ``end_us``."""


class _Fanout(ReadPathObserver):
    """Several observers of one backend: each event to each, in the order they were added."""

    def __init__(self, observers: tuple[ReadPathObserver, ...]) -> None:
        self.observers = observers

    def stream_begun(self, backend: ObservedBackend, stream: Any) -> None:
        for o in self.observers:
            o.stream_begun(backend, stream)

    def read_buffers_starting(self, *args: Any) -> None:
        for o in self.observers:
            o.read_buffers_starting(*args)

    def read_buffers_started(self, *args: Any) -> None:
        for o in self.observers:
            o.read_buffers_started(*args)

    def io_issued(self, backend: ObservedBackend, ioh: InflightIO) -> None:
        for o in self.observers:
            o.io_issued(backend, ioh)

    def io_completed(self, backend: ObservedBackend, ioh: InflightIO) -> None:
        for o in self.observers:
            o.io_completed(backend, ioh)

    def read_buffers_waiting(self, backend: ObservedBackend, op: ObservedRead) -> None:
        for o in self.observers:
            o.read_buffers_waiting(backend, op)

    def read_buffers_waited(self, *args: Any) -> None:
        for o in self.observers:
            o.read_buffers_waited(*args)

    def buffer_released(self, backend: ObservedBackend, buf: int) -> None:
        for o in self.observers:
            o.buffer_released(backend, buf)

    def buffer_flushed(self, *args: Any) -> None:
        for o in self.observers:
            o.buffer_flushed(*args)


def overrides(observer: ReadPathObserver, event: str) -> bool:
    """Whether ``observer`` does something on ``event`` (its class overrides the no-op)."""
    return getattr(type(observer), event) is not getattr(ReadPathObserver, event)


def combine(observers: tuple[ReadPathObserver, ...]) -> ReadPathObserver | None:
    """What a backend calls: None, the one observer, or a fan-out to several."""
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]
    return _Fanout(observers)


class WaitRecorder(ReadPathObserver):
    """The ``(start, end)`` of every ``WaitReadBuffers`` that took virtual time (``waits``)."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, int]] = []

    def read_buffers_waited(
        self,
        backend: ObservedBackend,
        op: ObservedRead,
        start_us: int,
        end_us: int,
        needed_wait: bool,
        error: PgError | None,
    ) -> None:
        if end_us > start_us:
            self.waits.append((start_us, end_us))
