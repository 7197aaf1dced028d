"""The read interposer under ``io_method=io_uring`` on the build from source (``--readstream-pg-build``).

Reads through io_uring never call ``pread``/``preadv``: the interposer acts at their submission
(``io_uring_submit``) and completion (``io_uring_peek_batch_cqe``). Each test proves on the
server what happened (the error text, the follow-up read in the ledger, the checksum failure);
none looks at timings. Every test skips with one reason when no build is cached (CI never builds
PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_readstream.postgres.builds.pgbuild import BuildOptions, find_build

pytestmark = pytest.mark.postgres

_PAGES = 40
_BAD = 23


@pytest.fixture(scope="module")
def uring_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The cached build, started with the interposer and io_method=io_uring."""
    build = find_build(BuildOptions())
    if build is None:
        pytest.skip("no PostgreSQL built from source in the cache (make one with: readstream pg-build)")
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    from pytest_readstream.postgres import PgNotAvailable, PgServer, ServerSettings

    try:
        server = PgServer.from_bindir(
            build.bindir,
            tmp_path_factory.mktemp("pg-uring-interpose"),
            settings=ServerSettings(io_method="io_uring"),
            interpose=True,
        )
    except PgNotAvailable as err:
        pytest.skip(f"the build does not start with the read interposer here: {err}")
    with server:
        yield server


@pytest.fixture(scope="module")
def uring_db(uring_server: Any) -> Any:
    db = uring_server.scratch_database(label="uring")
    db.create_wide_table("t", _PAGES)
    with db.session() as s:
        assert s.execute("SHOW io_method") == [("io_uring",)]
    return db


@pytest.fixture
def faults(uring_server: Any) -> Iterator[Any]:
    yield uring_server.faults
    uring_server.faults.clear()


def _evict(session: Any) -> None:
    session.execute("SELECT pg_buffercache_evict_relation('t'::regclass)")


def _observe(target: Any) -> Any:
    from pytest_readstream.postgres.faults import IoRule, Latency

    return IoRule(target, "delay", latency=Latency("fixed", 0.0))


def _delivered(entries: list[Any]) -> list[int]:
    out: list[int] = []
    for e in entries:
        if e.result > 0:
            out.extend(range(e.first_block, e.first_block + e.result // 8192))
    return out


def test_eio_under_io_uring_is_the_servers_read_error(uring_db: Any, faults: Any) -> None:
    import psycopg

    from pytest_readstream.postgres.faults import IoRule

    t = faults.target(uring_db.name, "t")
    with uring_db.session() as s:
        _evict(s)
        faults.apply(IoRule(t, "eio", blocks=(17, 17)))
        with pytest.raises(psycopg.errors.IoError) as info:
            s.execute("SELECT count(*) FROM t")
        fired = [e for e in faults.ledger() if e.fired]
        assert len(fired) == 1 and fired[0].action == "eio" and fired[0].result == -5, fired
        first, last = fired[0].first_block, fired[0].first_block + fired[0].nblocks - 1
        assert first <= 17 <= last
        relpath = s.execute("SELECT pg_relation_filepath('t')")[0][0]
        text = str(info.value)
        assert f'could not read blocks {first}..{last} in file "{relpath}": Input/output error' in text or (
            first == last and f'could not read block {first} in file "{relpath}"' in text
        ), text
        assert s.execute("SELECT count(*) FROM pg_buffercache WHERE pinning_backends > 0") == [(0,)]
        # The failed buffers were not left valid: the next scan reads block 17 again, unharmed.
        faults.apply(_observe(t))
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]
        assert 17 in _delivered(faults.ledger())


def test_a_short_read_under_io_uring_is_followed_up_by_the_server(uring_db: Any, faults: Any) -> None:
    from pytest_readstream.postgres import SessionSettings
    from pytest_readstream.postgres.faults import IoRule

    t = faults.target(uring_db.name, "t")
    with uring_db.session(SessionSettings(io_combine_limit=8)) as s:
        _evict(s)
        faults.apply(IoRule(t, "short", blocks=(5, 5), times=1), _observe(t))
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]
        entries = [e for e in faults.ledger() if e.rule == 1]  # every request of t, in order
        short = [e for e in faults.ledger() if e.rule == 0 and e.fired]
        assert len(short) == 1, faults.ledger()
        cut = short[0]
        assert cut.first_block < 5 and cut.result == (5 - cut.first_block) * 8192 < cut.asked
        # The server, told fewer bytes than asked, reads the rest itself, from block 5.
        assert [e for e in entries if e.first_block == 5 and e.start_ns >= cut.end_ns], entries
        delivered = _delivered(entries)
        assert sorted(delivered) == list(range(_PAGES)), delivered


def test_a_damaged_page_under_io_uring_fails_the_servers_checksum(uring_db: Any, faults: Any) -> None:
    import psycopg

    from pytest_readstream.postgres.faults import IoRule

    t = faults.target(uring_db.name, "t")
    with uring_db.session() as s:
        assert s.execute("SHOW data_checksums") == [("on",)]
        relpath = s.execute("SELECT pg_relation_filepath('t')")[0][0]
        _evict(s)
        faults.apply(IoRule(t, "corrupt", blocks=(_BAD, _BAD)))
        with pytest.raises(psycopg.errors.DataCorrupted) as info:
            s.execute("SELECT count(*) FROM t")
        assert f'invalid page in block {_BAD} of relation "{relpath}"' in str(info.value)
        assert faults.fired(0) >= 1
        assert [e for e in faults.ledger() if e.fired and e.action == "corrupt" and e.result > 0]
        # The file was never written: without the rule the page reads back sound.
        faults.clear()
        _evict(s)
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]


def test_rules_that_need_the_read_itself_are_refused_under_io_uring(uring_db: Any, faults: Any) -> None:
    from pytest_readstream.postgres import PgNotAvailable
    from pytest_readstream.postgres.faults import IoRule, Latency

    t = faults.target(uring_db.name, "t")
    for rule, what in (
        (IoRule(t, "hang", blocks=(3, 3)), "a hang rule"),
        (IoRule(t, "eio", latency=Latency("fixed", 100.0)), "a rule with latency"),
        (IoRule(t, "delay", latency=Latency("fixed", 0.0), max_inflight=2), "a rule with max_inflight"),
    ):
        with pytest.raises(PgNotAvailable, match=f"^{what} under io_method=io_uring: the kernel performs"):
            faults.apply(rule)
    assert faults.rules == ()


def test_the_interposer_without_rules_changes_nothing_under_io_uring(
    uring_server: Any, uring_db: Any, faults: Any
) -> None:
    """Loaded without rules, io_uring reads pass straight through (it looks at none); with a rule
    on another relation it looks at t's reads and changes none: the same rows and sums, the same
    reads and bytes, nothing in the ledger."""
    from pytest_readstream.postgres import SessionSettings, measure_statement
    from pytest_readstream.postgres.faults import IoRule

    pid = uring_server.pid
    assert pid is not None and "rsinterpose" in Path(f"/proc/{pid}/maps").read_text()
    query = "SELECT count(*), sum(hashtext(t::text)) FROM t"
    results = []
    with uring_db.session(SessionSettings(io_combine_limit=8)) as s:
        s.execute("CREATE TABLE IF NOT EXISTS other (x int)")
        s.execute("INSERT INTO other VALUES (1)")
        other = faults.target(uring_db.name, "other")
        for rules in ((), (IoRule(other, "eio"),)):
            faults.clear()
            if rules:
                faults.apply(*rules)
            _evict(s)
            m = measure_statement(s, query, ["t"])
            results.append((s.execute(query), m.io["normal"].reads, m.io["normal"].read_bytes))
            if not rules:
                assert faults.area.seen == 0  # no rules: nothing looked at
            else:
                assert faults.area.seen > 0 and faults.ledger() == []
    assert results[0] == results[1] and results[0][1] >= 1, results
    assert results[0][0][0][0] > 0
