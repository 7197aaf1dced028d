"""What the lower layers of the harness need of a server and of a database, as protocols.

The harness is layered: ``session`` and ``observe`` work on a database, ``scratch`` creates
databases on a server, ``server`` creates scratch databases. The lower layers name the upper ones'
types only through these protocols, so no module imports one above it (not even for type
checking) and the package has no import circle. :class:`~.server.PgServer` and
:class:`~.scratch.ScratchDatabase` satisfy them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg


class ServerHandle(Protocol):
    """The parts of :class:`~.server.PgServer` that databases and sessions use."""

    version: str
    version_num: int
    block_size: int
    generation: int
    _abort_epoch: int

    def ensure_alive(self, operation: str) -> None: ...
    def _guard(self, operation: str) -> AbstractContextManager[Any]: ...
    def _connect_raw(self, dbname: str | None) -> psycopg.Connection[Any]: ...
    def _note_abort(self) -> None: ...
    def _forget_scratch(self, db: Any) -> None: ...


class DatabaseHandle(Protocol):
    """The parts of :class:`~.scratch.ScratchDatabase` that sessions and observations use."""

    name: str
    server: ServerHandle
    _sessions: list[Any]  # the PgSession objects open on it
    _repaired: dict[str, int]

    def observer(self) -> psycopg.Connection[Any]: ...
