"""Measurements: exact diffs, per-relation counters, resident pages, eviction, warm-up."""

from __future__ import annotations

import math

import psycopg
import pytest

from pytest_readstream.postgres import (
    PgHarnessError,
    PgServer,
    ScratchDatabase,
    ServerSettings,
    SessionSettings,
    evict,
    measure,
    measure_statement,
    resident_buffers,
)

pytestmark = pytest.mark.postgres

PAGES = 200  # well below NBuffers / 4 = 4096: no ring, every page stays resident


@pytest.fixture(scope="module")
def table(pg_db: ScratchDatabase) -> str:
    name = "obs_t"
    pg_db.create_wide_table(name, PAGES)
    return name


def test_table_has_exactly_the_requested_pages(pg_db: ScratchDatabase, table: str) -> None:
    assert pg_db.relation_pages(table) == PAGES
    assert resident_buffers(pg_db, table) == ()  # created cold


def test_noop_measurement_is_exactly_zero(default_server: PgServer, pg_db: ScratchDatabase) -> None:
    with pg_db.session() as s:
        for _ in range(3):
            m = measure_statement(s, "SELECT 1")
            assert m.io.is_zero(), m.io.to_dict()
            assert m.observer_io.is_zero(), m.observer_io.to_dict()
            assert m.cluster_io.is_zero(), m.cluster_io.to_dict()
            assert m.quiet
        with measure(s) as h:
            pass
        assert h.measurement.io.is_zero()


def test_sequential_scan_counts(default_server: PgServer, pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session() as s:
        m = measure_statement(s, f"SELECT count(*) FROM {table}", [table])
    # read_stream.md §8.1: sizes 1, 2, 4, 8, then io_combine_limit (16).
    expected_reads = 4 + math.ceil((PAGES - 15) / 16)
    normal = m.io["normal"]
    assert (normal.reads, normal.read_bytes, normal.hits) == (expected_reads, PAGES * 8192, 0)
    assert m.io.contexts() == ("normal",)
    assert m.relations[table].blks_read == PAGES and m.relations[table].blks_hit == 0
    assert m.resident_blocks(table) == frozenset(range(PAGES))
    assert m.quiet
    assert m.settings["io_combine_limit"] == "16"
    assert all(not b.isdirty and b.pinning_backends == 0 for b in m.resident[table])


def test_second_scan_hits_everything(default_server: PgServer, pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session() as s:
        evict(s, table)
        s.execute(f"SELECT count(*) FROM {table}")
        with measure(s, [table]) as h:
            s.execute(f"SELECT count(*) FROM {table}")
    m = h.measurement
    assert m.io["normal"].reads == 0 and m.io["normal"].hits == PAGES
    assert m.relations[table].blks_hit == PAGES


def test_cold_catalog_reads_show_without_warm_up(
    default_server: PgServer, pg_db: ScratchDatabase, table: str
) -> None:
    # A fresh backend loads its catalog caches on first use: extra normal-context hits.
    with pg_db.session() as s:
        evict(s, table)
        with measure(s, [table]) as h:
            s.execute(f"SELECT count(*) FROM {table}")
        cold = h.measurement
        warm = measure_statement(s, f"SELECT count(*) FROM {table}", [table])
    assert cold.io["normal"].hits > 0
    assert warm.io["normal"].hits == 0
    assert cold.io["normal"].reads == warm.io["normal"].reads


def test_io_combine_limit_one(default_server: PgServer, pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session(SessionSettings(io_combine_limit=1)) as s:
        m = measure_statement(s, f"SELECT count(*) FROM {table}", [table])
    assert m.io["normal"].reads == PAGES


def test_evict_leaves_nothing_resident(pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session() as s:
        s.execute(f"SELECT pg_prewarm('{table}', 'buffer')")
        assert len(resident_buffers(pg_db, table)) >= PAGES
        result = evict(s, table)
    assert result.evicted >= PAGES and result.skipped == 0
    assert resident_buffers(pg_db, table) == ()


def test_measurement_survives_a_failing_statement(
    default_server: PgServer, pg_db: ScratchDatabase, table: str
) -> None:
    with pg_db.session() as s, pytest.raises(psycopg.errors.DivisionByZero):
        with measure(s, [table]) as h:
            s.execute(f"SELECT count(*) / 0 FROM {table}")
    assert h.result is not None and h.result.relations[table].blks_fetched == PAGES


def test_open_transaction_at_the_end_is_an_error(pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session() as s:
        with pytest.raises(PgHarnessError, match="needs the session idle"):
            with measure(s, [table]):
                s.execute("BEGIN")
                s.execute(f"SELECT count(*) FROM {table}")
        s.execute("ROLLBACK")


def test_unknown_relation_is_named(pg_db: ScratchDatabase) -> None:
    with pg_db.session() as s:
        with pytest.raises(PgHarnessError, match="'no_such_table' does not exist"):
            with measure(s, ["no_such_table"]):
                pass


def test_foreign_activity_is_reported(default_server: PgServer, pg_db: ScratchDatabase, table: str) -> None:
    with pg_db.session() as s, pg_db.session() as other:
        evict(s, table)
        other.execute(f"SELECT count(*) FROM {table}")  # warm its catalog
        other.execute("SELECT pg_stat_force_next_flush()")  # and publish that now
        other.execute("SELECT 1")
        evict(s, table)
        with measure(s, [table]) as h:
            other.execute(f"SELECT count(*) FROM {table}")
            other.execute("SELECT pg_stat_force_next_flush()")
            other.execute("SELECT 1")
    m = h.measurement
    assert m.io.is_zero()
    assert not m.quiet
    assert m.foreign_io["normal"].read_bytes == PAGES * 8192
    assert m.relations[table].blks_read == PAGES  # per-relation counters are cluster-wide


def test_restart_inside_a_measurement_is_an_error(pg_server: PgServer, pg_db: ScratchDatabase) -> None:
    other = ServerSettings(io_method="sync" if pg_server.settings.io_method == "worker" else "worker")
    with pg_db.session() as s:
        try:
            with pytest.raises(PgHarnessError, match="restarted inside a measure"):
                with measure(s):
                    pg_server.configure(other)
        finally:
            pg_server.configure(ServerSettings())
