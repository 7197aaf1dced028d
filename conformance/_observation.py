"""Where the harness's view of a stream comes from: the model's buffer manager or a server's.

The checks of :class:`~conformance._harness.StreamDriver` are made from outside the stream,
through what the buffer manager shows: which buffers the backend pins, what each buffer holds
and whether its page is valid, and which reads were done. :class:`ModelObservation` reads them
from the harness's own :class:`reference_impl.Backend` (private reference counts, shared pool,
read log). An implementation whose stream runs elsewhere (a PostgreSQL server driven through
the probe extension) hands the driver an object with the same methods as its stream's
``observation`` attribute, and the same checks judge it.

What an observation source cannot see it says so (:attr:`blind_to_reads`): a test that needs
every read the stream made is then skipped with that reason, never passed on an empty list.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

import reference_impl
from reference_impl import ForkNumber, Relation

__all__ = ["StreamObservation", "ModelObservation", "observation_for"]


class StreamObservation(Protocol):
    """The buffer manager as the harness sees it (``bufmgr.c`` from the outside)."""

    #: Why the individual reads (``StartReadBuffers``/``WaitReadBuffers``) cannot be seen, or None.
    blind_to_reads: str | None

    def bind(self, observer: Any) -> None:
        """The driver's :class:`~conformance._harness.BufferManagerObserver` (to report starts and waits to)."""

    def read_log(self) -> list[Any] | None:
        """The backend's reads so far (``reference_impl.stats.ReadRecord``-like), appended to;
        None when the backend does not record them."""

    def backend_id(self) -> int:
        """The id the records of :meth:`read_log` carry for the consumer's backend."""

    def consumer_buffers(self, held: Counter[int]) -> Counter[int]:
        """The model buffers the consumer pinned before the stream began, renumbered as this
        source numbers buffers."""

    def other_pages(self) -> int:
        """Pages of other relations the buffer pool holds when the stream begins (a server's
        catalogs); they compete with the stream's relation for the pool."""

    def pinned_buffers(self) -> dict[int, int]:
        """Every pin the consumer's backend holds: buffer -> count."""

    def pin_count(self, buf: int) -> int:
        """Pins the consumer's backend holds on ``buf``."""

    def buffer_tag(self, buf: int) -> tuple[int, ForkNumber, int]:
        """``(relid, fork, block)`` of the page in ``buf`` (the harness relation's relid)."""

    def is_valid(self, buf: int) -> bool:
        """Whether ``buf``'s page is valid (``BM_VALID``)."""

    def is_zeroed(self, buf: int) -> bool:
        """Whether ``zero_damaged_pages`` zeroed the page in ``buf`` (its content is lost)."""

    def release_buffer(self, buf: int) -> None:
        """The consumer releases one pin on ``buf`` (``ReleaseBuffer``)."""

    def other_pin(self, rel: Relation, block: int, fork: ForkNumber) -> None:
        """Another backend reads ``block`` and keeps it pinned."""

    def other_release(self) -> None:
        """The other backend drops every pin it holds."""

    def evict(self, rel: Relation) -> None:
        """``pg_buffercache_evict_relation``: unpinned pages of ``rel`` leave the pool."""

    def grow(self, rel: Relation, fork: ForkNumber, nblocks: int) -> None:
        """Another backend extends ``rel`` by ``nblocks`` blocks."""

    def abort(self) -> None:
        """Transaction abort: the resource owner drops every pin of the backend."""


class ModelObservation:
    """The harness's own buffer manager (the model of ``bufmgr.c``): a :class:`reference_impl.Backend`
    and its instance."""

    blind_to_reads: str | None = None

    def __init__(self, instance: reference_impl.Instance, backend: reference_impl.Backend) -> None:
        self.instance = instance
        self.backend = backend
        self._other: reference_impl.Backend | None = None

    def bind(self, observer: Any) -> None:
        # The observer wraps the backend's own start/wait methods; nothing to forward.
        return None

    def read_log(self) -> list[Any] | None:
        return self.backend.stats.read_log

    def backend_id(self) -> int:
        return self.backend.id

    def consumer_buffers(self, held: Counter[int]) -> Counter[int]:
        return held

    def other_pages(self) -> int:
        # The model's pool holds only what the test put there; the driver's margin covers it.
        return 0

    def pinned_buffers(self) -> dict[int, int]:
        return self.backend.pinned_buffers()

    def pin_count(self, buf: int) -> int:
        return self.backend.refs.count(buf)

    def buffer_tag(self, buf: int) -> tuple[int, ForkNumber, int]:
        return self.backend.buffer_tag(buf)

    def is_valid(self, buf: int) -> bool:
        return self.instance.pool.is_valid(buf)

    def is_zeroed(self, buf: int) -> bool:
        return self.backend.buffer_is_zeroed(buf)

    def release_buffer(self, buf: int) -> None:
        self.backend.release_buffer(buf)

    def other_pin(self, rel: Relation, block: int, fork: ForkNumber) -> None:
        if self._other is None:
            self._other = self.instance.backend("other-in-test")
        self._other.read_buffer(rel, block, fork)

    def other_release(self) -> None:
        if self._other is not None:
            self._other.abort()

    def evict(self, rel: Relation) -> None:
        self.instance.evict(rel)

    def grow(self, rel: Relation, fork: ForkNumber, nblocks: int) -> None:
        rel.extend(fork, nblocks)

    def abort(self) -> None:
        self.backend.abort()


def observation_for(stream: Any, instance: reference_impl.Instance, backend: reference_impl.Backend) -> Any:
    """The stream's own observation source if it brings one, else the harness's model backend."""
    obs = getattr(stream, "observation", None)
    return obs if obs is not None else ModelObservation(instance, backend)
