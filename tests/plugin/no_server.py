"""An implementation whose server never starts: every stream it is asked for is a harness error.

``readstream check`` must say ``ERROR: the harness could not start the PostgreSQL server: ...``
and exit 2, never count these tests as failures of the implementation (issue 24 item 4).
"""

from __future__ import annotations

from typing import Any

from pytest_readstream.postgres.errors import PgStartupError

__all__ = ["NoServerImplementation"]


class NoServerImplementation:
    """Claims the stream API; beginning a stream fails as a server that does not start does."""

    name = "no-server"
    capabilities = frozenset({"stream-api", "virtual-time"})

    def begin_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise PgStartupError(
            "the postmaster exited with status 1 during start-up; its log tail:\n"
            'FATAL:  unrecognized configuration parameter "io_workers"'
        )
