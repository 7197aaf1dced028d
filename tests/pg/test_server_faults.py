"""Faults PostgreSQL 18 verifies itself, and another backend's read in progress, on a real server.

* The interposer's ``corrupt`` rule damages the pages a read returns (never the file): the
  server's own page verification fails on the checksum (``data_checksums`` is on: PostgreSQL 18's
  initdb default), and ``ignore_checksum_failure`` / ``zero_damaged_pages`` decide what follows.
* Another backend's read is staged with a second session whose ``pg_preadv`` the interposer
  holds; the stream under test waits for it and is released only once it is seen waiting.
* A model whose ``max_connections`` differs from the server's runs when the per-backend share
  of the pool (``GetPinLimit()``) is the same.

Every assertion is about what the server did (an error's text, a warning, a page's content, a
ledger entry), never about how fast the machine is; every wait polls a condition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conformance._harness import BlockSource, StreamDriver
from pytest_readstream.postgres import (
    PgServer,
    PgSettingUnavailable,
    ScratchDatabase,
    ServerSettings,
)
from pytest_readstream.postgres.faults import FaultInjector, IoRule
from pytest_readstream.postgres.impl.implementation import PostgresImplementation

pytestmark = pytest.mark.postgres

_PAGES = 12
_BAD = 3


@pytest.fixture(scope="module")
def ip_db(ip_server: PgServer) -> ScratchDatabase:
    db = ip_server.scratch_database(label="faults")
    db.create_wide_table("t", _PAGES)  # one row of 5000 bytes per page
    return db


@pytest.fixture
def faults(ip_server: PgServer) -> Iterator[FaultInjector]:
    yield ip_server.faults
    ip_server.faults.clear()


def _session(server: PgServer, db: ScratchDatabase, notices: list[str]) -> psycopg.Connection[Any]:
    conn = server.connect(db.name)
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("SELECT pg_buffercache_evict_relation('t')")
    return conn


def _file_digest(server: PgServer, db: ScratchDatabase) -> str:
    with server.connect(db.name) as conn:
        row = conn.execute("SELECT pg_relation_filepath('t')").fetchone()
    assert row is not None and server.data_dir is not None
    return hashlib.sha256((Path(server.data_dir) / str(row[0])).read_bytes()).hexdigest()


@pytest.mark.parametrize("method", ["sync", "worker"])
def test_a_damaged_page_fails_the_servers_own_checksum(
    ip_server: PgServer, ip_db: ScratchDatabase, faults: FaultInjector, method: str
) -> None:
    """The error names the damaged block; ignore_checksum_failure lets the page through as read
    (only a checksum failure with a sane header can be ignored: a page whose header is wrong is
    an error even then); zero_damaged_pages zeroes it and its row is gone. The file is untouched."""
    ip_server.configure(ServerSettings(io_method=method))
    before = _file_digest(ip_server, ip_db)
    notices: list[str] = []
    with _session(ip_server, ip_db, notices) as conn:
        assert conn.execute("SHOW data_checksums").fetchone() == ("on",)
        relpath = conn.execute("SELECT pg_relation_filepath('t')").fetchone()
        faults.apply(IoRule(faults.target(ip_db.name, "t"), "corrupt", blocks=(_BAD, _BAD)))
        with pytest.raises(psycopg.errors.DataCorrupted) as info:
            conn.execute("SELECT count(*) FROM t")
        assert relpath is not None
        assert f'invalid page in block {_BAD} of relation "{relpath[0]}"' in str(info.value)
        assert faults.fired(0) >= 1

        conn.execute("SELECT pg_buffercache_evict_relation('t')")
        conn.execute("SET ignore_checksum_failure = on")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (_PAGES,)
        assert any(f"ignoring checksum failure in block {_BAD}" in n for n in notices), notices
        conn.execute("RESET ignore_checksum_failure")

        conn.execute("SELECT pg_buffercache_evict_relation('t')")
        conn.execute("SET zero_damaged_pages = on")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (_PAGES - 1,)
        assert any(f"invalid page in block {_BAD} " in n and "zeroing out page" in n for n in notices), (
            notices
        )
        conn.execute("RESET zero_damaged_pages")
        faults.clear()
        conn.execute("SELECT pg_buffercache_evict_relation('t')")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (_PAGES,)
    assert _file_digest(ip_server, ip_db) == before


# ------------------------------------------------------------------------------ through the stream
@pytest.fixture(scope="module")
def traced_impl(
    pg_source_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresImplementation]:
    """The postgres implementation with the traced copy of the server's read_stream.c."""
    impl = PostgresImplementation(
        workdir=tmp_path_factory.mktemp("impl"), pytest_mode=True, source=pg_source_tree
    )
    from reference_impl import Settings

    caps = impl.capabilities_for(Settings())
    if not {"stream-api", "fault-injection"} <= caps:
        impl.close()
        pytest.skip(
            impl.why_lacking("stream-api") or impl.fault_injection_unavailable or "no fault injection"
        )
    yield impl
    impl.close()


def _driver(
    impl: PostgresImplementation, settings: dict[str, Any], blocks: list[int], prepare: Any
) -> StreamDriver:
    from reference_impl import FaultPlan, Instance, Settings

    plan = FaultPlan()
    inst = Instance(Settings(**settings), faults=plan, debug=True)
    rel = inst.create_relation("t", 20)
    be = inst.backend("consumer")
    prepare(inst, rel, plan)

    def begin(rel_: Any, cb: Any, private: Any, **kw: Any) -> Any:
        return impl.begin_stream(be, rel_, cb, private, **kw)

    return StreamDriver(begin, inst, be, rel, BlockSource(blocks))


@pytest.mark.parametrize("method", ["sync", "worker"])
@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "fails"])
def test_another_backends_read_is_held_until_the_stream_waits_for_it(
    traced_impl: PostgresImplementation, method: str, fails: bool
) -> None:
    """004_read_stream.pl on the server: the foreign backend's read of block 5 is in progress
    when the stream begins; the stream is seen waiting for it (only then is it released), and
    reads block 5 itself only when that read failed (EIO in the foreign session)."""
    from reference_impl import ForeignIO

    def prepare(inst: Any, rel: Any, plan: Any) -> None:
        inst.start_foreign_io(ForeignIO(rel.name, 5, 1, duration_us=20_000, fails=fails))

    d = _driver(traced_impl, {"io_method": method, "io_combine_limit": 1}, [0, 2, 5, 7], prepare)
    streams = traced_impl._streams
    assert streams is not None
    (held,) = streams.foreign.reads
    assert held.first == 5 and not held.released
    assert d.consume() == [0, 2, 5, 7]
    assert held.released and held.seen_waiting, "the read was released before the stream waited for it"
    assert isinstance(held.error, psycopg.errors.IoError) == fails
    # The foreign backend's one request, which the hang rule held (the ledger has it once for
    # each rule it matched: the hang rule and the rule recording every request of the table).
    foreign = [e for e in traced_impl.server.faults.ledger() if e.pid == held.pid and e.rule == held.rule]
    assert [(e.first_block, e.nblocks, e.fired, e.action) for e in foreign] == [
        (5, 1, True, "hang_eio" if fails else "hang")
    ]
    assert sorted(d.read_counts) == ([0, 2, 5, 7] if fails else [0, 2, 7])
    assert all(n == 1 for n in d.read_counts.values())
    d.end()
    assert d.stream_pins == 0


@pytest.mark.parametrize("method", ["sync", "worker"])
def test_two_blocks_of_one_held_read(traced_impl: PostgresImplementation, method: str) -> None:
    """The foreign backend reads blocks 2..4 in one request; the stream over 0, 2, 4 waits for
    it and reads neither 2 nor 4."""
    from reference_impl import ForeignIO

    def prepare(inst: Any, rel: Any, plan: Any) -> None:
        inst.start_foreign_io(ForeignIO(rel.name, 2, 3, duration_us=20_000))

    d = _driver(traced_impl, {"io_method": method, "io_combine_limit": 1}, [0, 2, 4], prepare)
    streams = traced_impl._streams
    assert streams is not None
    (held,) = streams.foreign.reads
    assert d.consume() == [0, 2, 4]
    assert held.seen_waiting and held.error is None
    foreign = [e for e in traced_impl.server.faults.ledger() if e.pid == held.pid and e.rule == held.rule]
    assert [(e.first_block, e.nblocks, e.result) for e in foreign] == [(2, 3, 3 * 8192)]
    assert sorted(d.read_counts) == [0]
    d.end()


@pytest.mark.parametrize("outcome", ["error", "zeroed", "accepted"])
def test_a_damaged_page_through_the_servers_stream(traced_impl: PostgresImplementation, outcome: str) -> None:
    """The tables standing in for model relations are all-zero pages; a damaged one gets a sane
    header first, so it fails on its checksum: an error at the consumer call due the read's first
    block, zeroed, or accepted as read (not all zeroes)."""
    from reference_impl import ChecksumFailure, Fault

    settings: dict[str, Any] = {"io_method": "worker", "io_combine_limit": 4}
    if outcome == "zeroed":
        settings["zero_damaged_pages"] = True
    if outcome == "accepted":
        settings["ignore_checksum_failure"] = True

    def prepare(inst: Any, rel: Any, plan: Any) -> None:
        plan.faults.append(Fault("checksum", relation=rel.name, block=9, times=None))

    d = _driver(traced_impl, settings, list(range(20)), prepare)
    if outcome == "error":
        got: list[int] = []
        with pytest.raises(ChecksumFailure) as info:
            while True:
                d.next()
                got.append(d.returned[-1])
        assert info.value.block == 9
        first = next(s.blocknum for s in d.observer.starts if s.blocknum <= 9 < s.blocknum + s.accepted)
        assert got == list(range(first))
        d.abort()
        return
    for block in range(20):
        buf = d.next(keep=True)
        assert d.returned[-1] == block
        assert d.buffer_is_zeroed(buf) == (outcome == "zeroed" and block == 9)
        if block == 9:
            assert d.obs._zero_page[buf] == (outcome == "zeroed")  # type: ignore[attr-defined]
        d.release_held()
    d.end()


def test_a_short_read_is_followed_up_in_the_read_log(traced_impl: PostgresImplementation) -> None:
    """The follow-up request WaitReadBuffers issues after a short read is in the read log."""
    from reference_impl import READ_STREAM_FULL, Fault, FaultPlan, Instance, Settings

    plan = FaultPlan()
    inst = Instance(Settings(io_method="sync", io_combine_limit=8), faults=plan, debug=True)
    rel = inst.create_relation("t", 20)
    be = inst.backend("consumer")
    plan.faults.append(Fault("short_read", relation=rel.name, block=3))
    d = StreamDriver(
        lambda r, cb, p, **kw: traced_impl.begin_stream(be, r, cb, p, **kw),
        inst,
        be,
        rel,
        BlockSource(list(range(16))),
        flags=READ_STREAM_FULL,
    )
    assert d.consume() == list(range(16))
    # (the log lists a start when the stream starts it, the follow-up when its request is seen)
    assert sorted((r.start, r.nblocks) for r in d.reads) == [(0, 8), (3, 5), (8, 8)]
    assert all(d.read_counts[b] == 1 for b in range(16))
    d.end()


def test_a_max_connections_that_gives_the_same_pin_limit_runs(traced_impl: PostgresImplementation) -> None:
    from reference_impl import Settings

    # 20 buffers: GetPinLimit() is 0 with max_connections 1 and with the server's 100.
    traced_impl.configure(Settings(shared_buffers=20, max_connections=1))
    with pytest.raises(
        PgSettingUnavailable, match=r"max_connections.*GetPinLimit\(\) 132 where the server gives 94"
    ):
        traced_impl.configure(Settings(max_connections=50))


def test_a_checksum_fault_is_a_corrupt_rule_where_checksums_are_on() -> None:
    from pytest_readstream.postgres.faults import RelationTarget, rule_for_fault, unsupported_fault
    from reference_impl import Fault

    target = RelationTarget("t", "main", (), ((1, 2, 0),))
    fault = Fault("checksum", relation="t", block=4, times=None)
    assert rule_for_fault(fault, target) == IoRule(target, "corrupt", blocks=(4, 4), times=None)
    assert unsupported_fault(fault) is None
    why = unsupported_fault(fault, data_checksums=False)
    assert why is not None and "no data checksums" in why
    assert unsupported_fault(Fault("eio", block=4), data_checksums=False) is None


@pytest.mark.parametrize("method", ["sync", "worker"])
@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "fails"])
def test_another_backends_read_under_a_scan(
    traced_impl: PostgresImplementation, method: str, fails: bool
) -> None:
    """A ScanRequest's ForeignIO (block 37 of a 120-block seqscan, in progress when the scan
    begins): the scan is seen waiting for it; it splits the scan's reads as in the model (one
    read more than a clean scan), and block 37 is a hit for the scan unless the other read failed."""
    from pytest_readstream._reference_scans import run_scan as model_run
    from pytest_readstream.protocol import ScanRequest
    from reference_impl import FaultPlan, ForeignIO, Settings
    from reference_impl.relations.spec import RelationSpec

    spec = RelationSpec(name="t", nblocks=120, seed=5)
    settings = Settings(io_method=method)
    clean = ScanRequest("seqscan", spec, settings=settings, seed=3)
    req = ScanRequest(
        "seqscan",
        spec,
        settings=settings,
        seed=3,
        faults=FaultPlan(foreign_ios=[ForeignIO("t", 37, 1, fails=fails)]),
    )
    base, out = traced_impl.run_scan(clean), traced_impl.run_scan(req)
    model_base, model = model_run(clean), model_run(req)
    assert traced_impl._streams is not None
    (held,) = traced_impl._streams.foreign.last
    assert held.first == 37 and held.seen_waiting
    assert out.error is None and out.result == base.result and out.pinned_after == 0
    assert (out.reads, model.reads) == (base.reads + 1, model_base.reads + 1)
    assert out.hits - base.hits == model.hits - model_base.hits == (0 if fails else 1)


def test_a_foreign_read_at_a_chosen_time_is_refused_for_a_scan(traced_impl: PostgresImplementation) -> None:
    from pytest_readstream.protocol import ScanRequest
    from reference_impl import FaultPlan, ForeignIO
    from reference_impl.relations.spec import RelationSpec

    spec = RelationSpec(name="t", nblocks=40, seed=5)
    plan = FaultPlan(foreign_ios=[ForeignIO("t", 5, 1, starts_at_us=500)])
    # (inside pytest the implementation turns what a server cannot run into a skip)
    with pytest.raises(pytest.skip.Exception, match="starts_at_us = 500: a server has no virtual time"):
        traced_impl.run_scan(ScanRequest("seqscan", spec, faults=plan))
