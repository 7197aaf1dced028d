"""The quiet-WAL measures against timing-dependent ring reuse (``postgres/_walquiet.py``).

A WAL flush inside a scan that sets hint bits lets its BULKREAD ring reuse buffers it otherwise
refuses (``GetVictimBuffer``: ``XLogNeedsFlush``, ``StrategyRejectBuffer``). The harness's
servers carry settings that keep background processes from flushing, and a measurement can tell
whether a flush happened all the same.
"""

from __future__ import annotations

import pytest

from pytest_readstream.postgres import PgServer, ScratchDatabase
from pytest_readstream.postgres.servers._walquiet import (
    QUIET_WAL_GUCS,
    flushed_within_segment,
    fresh_wal_segment,
)

pytestmark = pytest.mark.postgres

# The same values in the base units pg_settings shows (ms, s, WAL blocks, pages).
_BASE_UNITS = {
    "wal_writer_delay": "10000",
    "wal_writer_flush_after": "2147483647",
    "bgwriter_lru_maxpages": "0",
    "checkpoint_timeout": "86400",
}


def test_quiet_wal_settings_in_force(pg_server: PgServer) -> None:
    assert set(QUIET_WAL_GUCS) == set(_BASE_UNITS)
    with pg_server.connect() as conn:
        rows = conn.execute(
            "SELECT name, setting, source FROM pg_settings WHERE name = ANY(%s)", (list(_BASE_UNITS),)
        ).fetchall()
    assert {name: setting for name, setting, _ in rows} == _BASE_UNITS
    assert {source for _, _, source in rows} == {"configuration file"}


def test_flush_inside_segment_is_seen(pg_db: ScratchDatabase) -> None:
    with pg_db.session() as session:
        conn = session.conn
        fresh_wal_segment(conn)
        # Only the switch's own flush, which ends on the new segment's first byte.
        assert not flushed_within_segment(conn)
        # A transaction with an xid flushes its commit record (synchronous_commit = on).
        conn.execute("CREATE TABLE walquiet_flush (a int)")
        conn.execute("DROP TABLE walquiet_flush")
        assert flushed_within_segment(conn)
