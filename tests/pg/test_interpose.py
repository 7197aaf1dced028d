"""The read interposer against the embedded PostgreSQL 18 server (``postgres/faults/interposer.py``).

Each assertion is about what the server did (an error and its text, a ledger entry, a pin count,
a lower bound on a delay), never about how fast the machine was: waits poll a condition, and a
delay is only checked from below, which a loaded machine cannot break.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pytest_readstream.postgres import (
    PgNotAvailable,
    PgServer,
    ScratchDatabase,
    ServerSettings,
    SessionSettings,
    measure_statement,
)
from pytest_readstream.postgres.faults import (
    FaultInjector,
    IoRule,
    Latency,
    LedgerEntry,
    RelationTarget,
)

pytestmark = pytest.mark.postgres

_PAGES = 40
_METHODS = ["sync", "worker"]


@pytest.fixture(scope="module")
def ip_db(ip_server: PgServer) -> ScratchDatabase:
    db = ip_server.scratch_database(label="interpose")
    db.create_wide_table("t", _PAGES)
    db.create_wide_table("u", _PAGES)
    return db


@pytest.fixture
def faults(ip_server: PgServer) -> Iterator[FaultInjector]:
    yield ip_server.faults
    ip_server.faults.clear()


def _configure(server: PgServer, method: str, **extra: Any) -> None:
    server.configure(ServerSettings(io_method=method, **extra))


def _evict(session: Any, *relations: str) -> None:
    for rel in relations:
        session.execute("SELECT pg_buffercache_evict_relation(%s::regclass)", (rel,))


def _pins(session: Any) -> int:
    return int(session.execute("SELECT count(*) FROM pg_buffercache WHERE pinning_backends > 0")[0][0])


def _blocks_delivered(entries: list[LedgerEntry], blcksz: int = 8192) -> list[int]:
    """Every block the ledgered requests returned, in request order."""
    out: list[int] = []
    for e in entries:
        if e.result > 0:
            out.extend(range(e.first_block, e.first_block + e.result // blcksz))
    return out


def _observe(target: RelationTarget) -> IoRule:
    """A rule that only records: every request of ``target`` in the ledger, nothing changed."""
    return IoRule(target, "delay", latency=Latency("fixed", 0.0))


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", _METHODS)
def test_eio_surfaces_as_an_error_naming_the_read_and_leaves_no_pin(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, method: str
) -> None:
    _configure(ip_server, method)
    t = faults.target(ip_db.name, "t")
    with ip_db.session() as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "eio", blocks=(17, 17)))
        with pytest.raises(psycopg.errors.IoError) as info:
            s.execute("SELECT count(*) FROM t")
        fired = [e for e in faults.ledger() if e.fired]
        assert len(fired) == 1 and fired[0].action == "eio" and fired[0].result == -5
        first, last = fired[0].first_block, fired[0].first_block + fired[0].nblocks - 1
        assert first <= 17 <= last
        relpath = s.execute("SELECT pg_relation_filepath('t')")[0][0]
        assert f'could not read blocks {first}..{last} in file "{relpath}": Input/output error' in str(
            info.value
        ) or (first == last and f'could not read block {first} in file "{relpath}"' in str(info.value))
        assert _pins(s) == 0
        # The failed buffers were not left valid: the next scan reads block 17 again.
        faults.apply(_observe(t))
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]
        assert 17 in _blocks_delivered(faults.ledger())


def test_eio_on_the_kth_read_of_a_relation(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    _configure(ip_server, "sync")
    t = faults.target(ip_db.name, "t")
    with ip_db.session(SessionSettings(io_combine_limit=4)) as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "eio", nth=3))
        with pytest.raises(psycopg.errors.IoError) as info:
            s.execute("SELECT count(*) FROM t")
        entries = faults.ledger()
        assert [e.fired for e in entries] == [False, False, True]
        bad = entries[2]
        assert f"{bad.first_block}..{bad.first_block + bad.nblocks - 1}" in str(info.value)
        assert faults.fired(0) == 1 and _pins(s) == 0


@pytest.mark.parametrize("method", _METHODS)
def test_short_read_is_completed_by_a_follow_up_read(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, method: str
) -> None:
    _configure(ip_server, method)
    t = faults.target(ip_db.name, "t")
    with ip_db.session(SessionSettings(io_combine_limit=8)) as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "short", blocks=(5, 5), times=1))
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]
        entries = faults.ledger()
        short = [e for e in entries if e.fired]
        assert len(short) == 1
        cut = short[0]
        assert cut.first_block < 5 and cut.result == (5 - cut.first_block) * 8192 < cut.asked
        after = entries[entries.index(cut) + 1 :]
        assert after and after[0].first_block == 5, "no follow-up read from the first block not returned"
        # Matching requests overlap blocks 5..5 only; each block was delivered by one read.
        delivered = _blocks_delivered(entries)
        assert len(delivered) == len(set(delivered))


def test_short_read_inside_the_first_block_is_an_error(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    """18.6 (``md_readv_complete``) counts whole blocks: half a block back is 0 blocks read."""
    _configure(ip_server, "sync")
    t = faults.target(ip_db.name, "t")
    with ip_db.session() as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "short", blocks=(0, 0), times=1, short_bytes=4096))
        with pytest.raises(psycopg.errors.DataCorrupted, match=r"read only 0 of 8192 bytes"):
            s.execute("SELECT count(*) FROM t")
        assert _pins(s) == 0


# -- hangs, cancellation, statement_timeout ------------------------------------------------------
def _run_in_thread(session: Any, query: str) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["rows"] = session.execute(query)
        except psycopg.Error as err:
            out["error"] = err

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def _poll(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.01)


@pytest.mark.parametrize("method", _METHODS)
@pytest.mark.parametrize("how", ["cancel", "statement_timeout"])
def test_a_hung_read_and_cancellation(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, method: str, how: str
) -> None:
    """sync: the backend itself is stuck in the read, so the cancel is seen once it returns;
    worker: the backend waits for the I/O worker interruptibly and errors out at once, while the
    worker's read stays in flight. Either way the statement fails with 57014 and no pin stays."""
    _configure(ip_server, method)
    t = faults.target(ip_db.name, "t")
    timeout_ms = 50 if how == "statement_timeout" else None
    with ip_db.session(SessionSettings(statement_timeout=timeout_ms)) as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "hang", blocks=(10, 10), times=1))
        th, out = _run_in_thread(s, "SELECT count(*) FROM t")
        faults.wait_fired(0)
        hung_at = time.monotonic()
        if how == "cancel":
            s.cancel()
        else:
            # The server's timer is what fires; wait until it is certainly due.
            _poll(lambda: time.monotonic() - hung_at > 10 * timeout_ms / 1000, "the timeout")
        if method == "sync":
            assert th.is_alive(), "a backend stuck in pread() finished before its read returned"
            faults.release(0)
        else:
            _poll(lambda: not th.is_alive(), "the statement's end while the worker's read hangs")
            io_workers = {
                int(r[0])
                for r in s.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'io worker'")
            }
            faults.release(0)
            _poll(lambda: any(e.fired for e in faults.ledger()), "the hung read's ledger entry")
            hung = [e for e in faults.ledger() if e.fired]
            assert hung[0].pid in io_workers and hung[0].pid != s.pid
        th.join()
        err = out.get("error")
        assert isinstance(err, psycopg.errors.QueryCanceled), out
        reason = "user request" if how == "cancel" else "statement timeout"
        assert f"canceling statement due to {reason}" in str(err)
        _poll(lambda: _pins(s) == 0, "no pinned buffer")
        faults.apply(_observe(t))
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]


def test_a_cancelled_scans_read_in_flight_is_waited_for_by_the_next_not_repeated(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    """worker: the cancelled backend leaves its I/O to the worker (``read_stream.md`` §7.1);
    another session reaching that block waits for the I/O in progress and does not read it again."""
    _configure(ip_server, "worker")
    t = faults.target(ip_db.name, "t")
    with ip_db.session() as first, ip_db.session() as second:
        _evict(first, "t")
        faults.apply(IoRule(t, "hang", blocks=(10, 10), times=1))
        th1, out1 = _run_in_thread(first, "SELECT count(*) FROM t")
        faults.wait_fired(0)
        first.cancel()
        _poll(lambda: not th1.is_alive(), "the cancelled statement's end")
        assert isinstance(out1.get("error"), psycopg.errors.QueryCanceled), out1
        th2, out2 = _run_in_thread(second, "SELECT count(*) FROM t")
        # The second scan cannot pass block 10 while its only read is held.
        _poll(lambda: faults.matched(0) > 1 or not th2.is_alive() or _waiting_on_io(first), "the second scan")
        assert th2.is_alive(), out2
        faults.release(0)
        th2.join()
        assert out2.get("rows") == [(_PAGES,)], out2
        covering = [e for e in faults.ledger() if e.first_block <= 10 < e.first_block + e.nblocks]
        assert len(covering) == 1 and covering[0].fired, covering


def _waiting_on_io(session: Any) -> bool:
    rows = session.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'AioIoCompletion' "
        "AND backend_type = 'client backend'"
    )
    return int(rows[0][0]) > 0


# -- latency ------------------------------------------------------------------------------------
def test_fixed_latency_delays_every_request(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    _configure(ip_server, "sync")
    t = faults.target(ip_db.name, "t")
    with ip_db.session() as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "delay", latency=Latency("fixed", 2000.0)))
        t0 = time.monotonic()
        s.execute("SELECT count(*) FROM t")
        elapsed = time.monotonic() - t0
        entries = faults.ledger()
        assert entries and all(e.fired and e.delay_us == 2000.0 for e in entries)
        assert all(e.end_ns - e.start_ns >= 2_000_000 for e in entries)
        assert elapsed >= len(entries) * 0.002  # a sync scan waits for each request in turn
        assert sorted(_blocks_delivered(entries)) == list(range(_PAGES))


@pytest.mark.parametrize("dist", ["uniform", "exponential"])
def test_seeded_latency_is_reproducible(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, dist: str
) -> None:
    _configure(ip_server, "sync")
    t = faults.target(ip_db.name, "t")
    lat = Latency(dist, 200.0, high_us=900.0 if dist == "uniform" else 0.0, seed=12345)  # type: ignore[arg-type]
    runs = []
    with ip_db.session(SessionSettings(io_combine_limit=1)) as s:
        for _ in range(2):
            _evict(s, "t")
            faults.apply(IoRule(t, "delay", latency=lat))
            s.execute("SELECT count(*) FROM t")
            runs.append(sorted(round(e.delay_us * 1000) for e in faults.ledger()))
    assert runs[0] == runs[1] == sorted(lat.draw_ns(k) for k in range(len(runs[0])))
    assert len(set(runs[0])) > 1


@pytest.mark.parametrize("limit", [1, 2])
def test_requests_at_once_are_limited(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, limit: int
) -> None:
    _configure(ip_server, "worker", io_workers=4)
    t = faults.target(ip_db.name, "t")
    with ip_db.session(SessionSettings(io_combine_limit=1, effective_io_concurrency=16)) as s:
        _evict(s, "t")
        faults.apply(IoRule(t, "delay", latency=Latency("fixed", 3000.0), max_inflight=limit))
        s.execute("SELECT count(*) FROM t")
    entries = faults.ledger()
    events = sorted([(e.start_ns, 1) for e in entries] + [(e.end_ns, -1) for e in entries])
    at_once = peak = 0
    for _, step in events:
        at_once += step
        peak = max(peak, at_once)
    assert 1 <= peak <= limit
    assert len({e.pid for e in entries}) >= 1


# -- isolation ------------------------------------------------------------------------------------
def test_the_interposer_touches_only_what_it_was_told(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    """Every read of ``t`` fails; ``u``, the catalogs and WAL read through the same library are
    untouched, and the ledger names only ``t``'s blocks."""
    _configure(ip_server, "sync")
    t = faults.target(ip_db.name, "t")
    faults.apply(IoRule(t, "eio"))
    with ip_db.session() as s:
        s.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        lsn = s.execute("SELECT pg_current_wal_lsn()")[0][0]
        _evict(s, "u", "pg_class", "pg_attribute")
        seen = faults.area.seen
        assert s.execute("SELECT count(*) FROM u") == [(_PAGES,)]
        catalog = s.execute("SELECT count(*) FROM pg_class JOIN pg_attribute ON attrelid = pg_class.oid")
        assert catalog[0][0] > 0
        s.execute("CREATE TABLE w AS SELECT g FROM generate_series(1, 1000) g")
        s.execute("CHECKPOINT")
        wal = s.execute("SELECT count(*) FROM pg_get_wal_records_info(%s, pg_current_wal_lsn())", (lsn,))
        assert wal[0][0] > 0
        assert faults.area.seen > seen, "the other reads did not pass through the interposer"
        assert faults.area.matched == 0 and faults.ledger() == []
        _evict(s, "t")
        with pytest.raises(psycopg.errors.IoError):
            s.execute("SELECT count(*) FROM t")
        s.execute("DROP TABLE w")
    entries = faults.ledger()
    assert entries and all(e.rule == 0 and e.first_block < _PAGES for e in entries)


def test_rules_on_two_relations_stay_apart(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    _configure(ip_server, "sync")
    t, u = faults.target(ip_db.name, "t"), faults.target(ip_db.name, "u")
    # A block range inside a relation: u's blocks 30..39 fail, a TID range scan of 0..19 does not
    # reach them; a second rule on u records what it did read.
    faults.apply(_observe(t), IoRule(u, "eio", blocks=(30, 39)), _observe(u))
    with ip_db.session() as s:
        _evict(s, "t", "u")
        assert s.execute("SELECT count(*) FROM t") == [(_PAGES,)]
        assert s.execute("SELECT count(*) FROM u WHERE ctid < '(20,0)'") == [(20,)]
        by_rule = {r: [e for e in faults.ledger() if e.rule == r] for r in (0, 1, 2)}
        assert sorted(_blocks_delivered(by_rule[0])) == list(range(_PAGES))
        assert by_rule[1] == []
        assert sorted(_blocks_delivered(by_rule[2])) == list(range(20))
        with pytest.raises(psycopg.errors.IoError, match=r"could not read blocks \d+\.\.3\d "):
            s.execute("SELECT count(*) FROM u")


def test_a_server_without_the_interposer_is_unchanged(
    pg_server: PgServer, ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    """The default server has no trace of the library; one with it but without rules reads the
    same blocks with the same I/Os, and counts nothing."""
    pg_server.configure(ServerSettings(io_method="sync"))
    _configure(ip_server, "sync")
    assert not pg_server.interposed
    with pytest.raises(PgNotAvailable, match="without the read interposer"):
        pg_server.faults  # noqa: B018
    plain_pid, ip_pid = pg_server.pid, ip_server.pid
    assert plain_pid is not None and ip_pid is not None
    assert "rsinterpose" not in _maps(plain_pid) and "rsinterpose" in _maps(ip_pid)
    environ = Path(f"/proc/{plain_pid}/environ").read_bytes()
    assert b"READSTREAM_INTERPOSE_CONTROL" not in environ
    plain_db = pg_server.scratch_database(label="plain")
    try:
        plain_db.create_wide_table("t", _PAGES)
        faults.clear()
        results = []
        for db in (plain_db, ip_db):
            with db.session(SessionSettings(io_combine_limit=8)) as s:
                _evict(s, "t")
                m = measure_statement(s, "SELECT count(*) FROM t", ["t"])
                results.append((m.io["normal"].reads, m.io["normal"].read_bytes))
        assert results[0] == results[1]
        assert faults.area.seen == 0  # no rules: every read passed straight through
    finally:
        plain_db.drop()


def test_switching_the_interposer_on_and_off(own_server: PgServer) -> None:
    try:
        assert own_server.set_interposer(True) == "restarted"
    except PgNotAvailable as err:
        pytest.skip(str(err))
    pid = own_server.pid
    assert pid is not None and "rsinterpose" in _maps(pid)
    assert own_server.set_interposer(True) == "unchanged"
    assert own_server.set_interposer(False) == "restarted"
    pid = own_server.pid
    assert pid is not None and "rsinterpose" not in _maps(pid)


# -- usage errors ---------------------------------------------------------------------------------
_T = RelationTarget("t", "main", (), ((1, 2, 0),))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action": "explode"}, "fault action 'explode' is not valid; allowed: delay, eio, short, hang"),
        ({"action": "eio", "blocks": (5, 2)}, "block range (5, 2) is not valid"),
        ({"action": "eio", "nth": 0}, "nth = 0 is not valid"),
        ({"action": "eio", "times": 0}, "times = 0 is not valid"),
        ({"action": "delay"}, "a delay rule needs latency=, per_byte_ns= or max_inflight="),
        ({"action": "delay", "max_inflight": 0}, "max_inflight = 0 is not valid"),
    ],
)
def test_bad_rules_are_one_line(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        IoRule(_T, **kwargs)
    assert "\n" not in str(info.value)


def test_bad_latency_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"latency distribution 'normal' is not valid; allowed: fixed"):
        Latency("normal", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"uniform latency high 1.0 µs is out of range"):
        Latency("uniform", 5.0, high_us=1.0)


def test_a_rule_without_files_is_refused_and_the_old_rules_stay(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector
) -> None:
    t = faults.target(ip_db.name, "t")
    faults.apply(_observe(t))
    empty = RelationTarget("gone", "main", (), ())
    with pytest.raises(ValueError, match=r"^relation 'gone' \(main\) has no file to act on$"):
        faults.apply(_observe(t), IoRule(empty, "eio"))
    assert faults.area.matched == 0 and faults.rules == (_observe(t),)
    with ip_db.session() as s:
        _evict(s, "t")
        s.execute("SELECT count(*) FROM t")
    assert faults.matched(0) > 0  # the rule installed before the refused call still acts


def test_device_profiles_become_rules() -> None:
    from pytest_readstream.postgres.faults import rule_for_device

    rule = rule_for_device(_T, "cloud-1ms", seed=3)
    assert rule.latency == Latency("fixed", 1000.0, seed=3) and rule.max_inflight == 32
    assert rule.per_byte_ns == pytest.approx(1000.0 / (250.0 * 1.048576))
    with pytest.raises(
        ValueError, match=r"^device profile 'hdd' has a sequential latency; allowed: profiles"
    ):
        rule_for_device(_T, "hdd")
