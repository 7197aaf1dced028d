"""Cancelled statements: no pin survives, and sync-mode aborts leave mapped-invalid buffers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from pytest_readstream.postgres import (
    PgServer,
    PgSession,
    ScratchDatabase,
    ServerSettings,
    SessionSettings,
    evict,
    measure_statement,
    pinned_buffers,
    resident_buffers,
)

pytestmark = pytest.mark.postgres

PAGES = 5000  # above NBuffers / 4 = 4096: the scan uses a 94-buffer BULKREAD ring
RING = 94
# One row per page and a short sleep per row make the scan last about a second.
SLOW_SCAN = "SELECT count(*) FROM {t} WHERE pg_sleep(0.0002) IS NOT NULL"
# Synchronized scans would make a cancelled scan move the next scan's start block.
NO_SYNC = SessionSettings(synchronize_seqscans=False)


@pytest.fixture(scope="module")
def table(pg_db: ScratchDatabase) -> str:
    pg_db.create_wide_table("cancel_t", PAGES)
    return "cancel_t"


@pytest.fixture
def worker_server(pg_server: PgServer) -> Iterator[PgServer]:
    pg_server.configure(ServerSettings(io_method="worker"))
    yield pg_server


@pytest.fixture
def sync_server(pg_server: PgServer) -> Iterator[PgServer]:
    pg_server.configure(ServerSettings(io_method="sync"))
    yield pg_server
    pg_server.configure(ServerSettings())


def _run_in_thread(session: PgSession, query: str) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def _run() -> None:
        try:
            session.execute(query)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=_run, daemon=True)
    thread.start()
    return thread, errors


def _wait_for_pins(db: ScratchDatabase, table: str, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pins = pinned_buffers(db, table)
        if len(pins) > 1:
            return len(pins)
        time.sleep(0.01)
    raise AssertionError("the scan never pinned buffers")


def _cancelled_scan(db: ScratchDatabase, session: PgSession, table: str) -> int:
    thread, errors = _run_in_thread(session, SLOW_SCAN.format(t=table))
    pins = _wait_for_pins(db, table) if session.server.settings.io_method != "sync" else 0
    if not pins:
        time.sleep(0.3)
    session.cancel()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
    return pins


def test_cancel_releases_every_pin(worker_server: PgServer, pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session(NO_SYNC) as s:
        evict(s, table)
        pins_during = _cancelled_scan(pg_db, s, table)
        assert pins_during > 1  # the stream's look-ahead was holding buffers
        assert pinned_buffers(pg_db, table) == ()
        assert s.execute("SELECT 1") == [(1,)]  # the session is usable again


def test_statement_timeout_releases_every_pin(
    worker_server: PgServer, pg_db: ScratchDatabase, table: str
) -> None:
    settings = SessionSettings(synchronize_seqscans=False, statement_timeout=300)
    with pg_db.session(settings) as s:
        evict(s, table)
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            s.execute(SLOW_SCAN.format(t=table))
        assert pinned_buffers(pg_db, table) == ()
        # Worker mode: every started read completed, so all its pages are valid.
        assert len(resident_buffers(pg_db, table)) > 0


def test_sync_abort_leaves_invalid_buffers_that_evict_repairs(
    sync_server: PgServer, pg_db: ScratchDatabase, table: str
) -> None:
    scan = f"SELECT count(*) FROM {table}"
    with pg_db.session(NO_SYNC) as s:
        evict(s, table)
        _cancelled_scan(pg_db, s, table)
        assert pinned_buffers(pg_db, table) == ()

        # Without repair the staged-but-never-read buffers survive the eviction (invisible to
        # pg_buffercache) and the next scan reads into them outside its ring.
        plain = evict(s, table, repair=False)
        assert not plain.repaired and resident_buffers(pg_db, table) == ()
        dirty = measure_statement(s, scan, [table], warm=False)
        assert len(dirty.resident[table]) > RING
        assert dirty.io["bulkread"].reuses < PAGES - RING

        _cancelled_scan(pg_db, s, table)
        repaired = evict(s, table)  # a statement failed on a sync server: repair is automatic
        assert repaired.repaired
        clean = measure_statement(s, scan, [table], warm=False)
        assert len(clean.resident[table]) == RING
        assert clean.resident_blocks(table) == frozenset(range(PAGES - RING, PAGES))
        assert clean.io["bulkread"].reuses == PAGES - RING
        assert clean.io["bulkread"].reads == dirty.io["bulkread"].reads
