"""Fixtures shared by the conformance modules (imported into each module that uses them).

The functions carry other names than their fixtures (``drive``, ``relation``) so that importing
them does not shadow the test functions' parameters.

They sit on top of the plugin's public fixtures only (``readstream_impl``,
``readstream_stream_factory``, ``readstream_instance``, ``readstream_backend``), so the suite runs
against any implementation the plugin can load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reference_impl import Relation

from ._harness import StreamDriver, open_driver

__all__ = ["drive_fixture", "relation_fixture"]


@pytest.fixture(name="drive")
def drive_fixture(
    request: pytest.FixtureRequest,
    readstream_stream_factory: Any,
    readstream_impl: Any,
    readstream_instance: Any,
    readstream_backend: Any,
) -> Iterator[Callable[..., StreamDriver]]:
    """``drive(rel, blocks, **kw)`` → a :class:`StreamDriver` over a new stream; ended at teardown."""
    drivers: list[StreamDriver] = []

    def make(rel: Relation, blocks: Any, **kwargs: Any) -> StreamDriver:
        d = open_driver(
            readstream_stream_factory,
            readstream_impl,
            readstream_instance,
            readstream_backend,
            rel,
            blocks,
            **kwargs,
        )
        drivers.append(d)
        return d

    yield make
    for d in drivers:
        if d.ended:
            d.observer.uninstall()
        else:
            d.close()


@pytest.fixture(name="relation")
def relation_fixture(readstream_instance: Any) -> Callable[..., Relation]:
    """``relation(nblocks, name="t")`` → a relation written straight into simulated storage."""
    counter = [0]

    def make(nblocks: int, name: str | None = None) -> Relation:
        counter[0] += 1
        return readstream_instance.create_relation(name or f"t{counter[0]}", nblocks)

    return make
