"""The probe extension and the remote stream: build, load, layout check, one stream end to end.

The probe is built against the embedded server's headers; the traced tests use the server's own
``read_stream.c`` (``pg_source_tree``: given, fetched on request, or left in the cache by an
earlier fetch) and skip with one reason without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conformance._harness import ConformanceViolation, Scenario
from pytest_readstream.postgres import PgServer, ScratchDatabase, embedded_bindir
from pytest_readstream.postgres.builds._cbuild import CBuildUnavailable, find_compiler
from pytest_readstream.postgres.builds.pgsource import READ_STREAM_C
from pytest_readstream.postgres.builds.probe_build import ProbeInstall, build_probe
from pytest_readstream.postgres.impl.implementation import PostgresImplementation

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def probe() -> ProbeInstall:
    try:
        find_compiler()
        return build_probe(embedded_bindir())
    except CBuildUnavailable as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def traced_probe(pg_source_tree: Path) -> ProbeInstall:
    """The probe built with the traced copy of the embedded server's own read_stream.c."""
    try:
        find_compiler()
        return build_probe(embedded_bindir(), traced_source=pg_source_tree / READ_STREAM_C)
    except CBuildUnavailable as err:
        pytest.skip(str(err))


def _session(probe: ProbeInstall, server: PgServer, db: ScratchDatabase) -> Iterator[Any]:
    with server.connect(db.name) as conn:
        for stmt in probe.session_sql():
            conn.execute(stmt)
        # Each build is its own install directory; the database keeps one extension at a time.
        conn.execute("DROP EXTENSION IF EXISTS rsprobe")
        conn.execute("CREATE EXTENSION rsprobe")
        conn.execute("BEGIN")
        yield conn
        conn.execute("ROLLBACK")


@pytest.fixture
def probe_conn(probe: ProbeInstall, default_server: PgServer, pg_db: ScratchDatabase) -> Iterator[Any]:
    """A session of the test database with the probe loaded, inside a transaction."""
    yield from _session(probe, default_server, pg_db)


@pytest.fixture
def traced_conn(
    traced_probe: ProbeInstall, default_server: PgServer, pg_db: ScratchDatabase
) -> Iterator[Any]:
    """The same with the traced probe loaded."""
    yield from _session(traced_probe, default_server, pg_db)


def _call(conn: Any, fn: str, *args: Any) -> dict[str, Any]:
    row = conn.execute(f"SELECT {fn}({', '.join(['%s'] * len(args))})", args).fetchone()
    return dict(json.loads(row[0]))


def _table(conn: Any, name: str, nblocks: int) -> int:
    conn.execute(f"CREATE TABLE {name} (x int) WITH (autovacuum_enabled = off)")
    conn.execute("SELECT rsp_extend(%s::regclass, %s)", (name, nblocks))
    row = conn.execute("SELECT %s::regclass::oid", (name,)).fetchone()
    return int(row[0])


def test_build_is_cached_and_lays_out_an_extension_directory(probe: ProbeInstall) -> None:
    assert probe.library.is_file() and probe.library.stat().st_mode & 0o005 == 0o005
    for name in ("rsprobe.control", "rsprobe--1.0.sql"):
        assert (probe.directory / "extension" / name).is_file()
    assert probe.server_version.startswith("18.") and not probe.traced
    mtime = probe.library.stat().st_mtime_ns
    again = build_probe(embedded_bindir())
    assert again.directory == probe.directory and again.library.stat().st_mtime_ns == mtime


def test_a_build_without_pg_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CBuildUnavailable, match="no pg_config in") as err:
        build_probe(tmp_path)
    assert "\n" not in str(err.value)


def test_a_mutant_needs_a_source(probe: ProbeInstall) -> None:
    with pytest.raises(ValueError, match="mutant='x' needs traced_source"):
        build_probe(embedded_bindir(), mutant="x")


def test_loads_through_the_path_settings_only(probe_conn: Any, default_server: PgServer) -> None:
    info = _call(probe_conn, "rsp_info")
    assert info["version_num"] == default_server.version_num
    # Untraced, struct ReadStream is unknown: it is read only from the server's own source.
    assert info["traced"] is False and info["layout"] == "none" and "source tree" in info["layout_why"]
    assert info["pause_resume"] is (default_server.version_num >= 190000)
    # Nothing was written into the installation: its own extension directory has no probe.
    share = Path(embedded_bindir()).parent / "share"
    assert not list(share.rglob("rsprobe*"))


def test_untraced_the_stream_state_is_unknown(probe_conn: Any) -> None:
    oid = _table(probe_conn, "probe_untraced", 8)
    begun = _call(probe_conn, "rsp_begin", oid, 0, 0, None, None, False, [0, 1])
    assert begun["layout_verified"] is False and begun["stream"] is None and begun["trace"] is None
    assert _call(probe_conn, "rsp_next", begun["id"], [])["block"] == 0


@pytest.mark.parametrize("own", [False, True], ids=["traced-copy", "servers-own"])
def test_the_stream_reports_its_own_fields(traced_conn: Any, own: bool) -> None:
    """The accessor generated from the tree's struct ReadStream reads the traced copy's stream and
    the server's own (same source, same struct): PostgreSQL 18's fields under their names."""
    oid = _table(traced_conn, f"probe_layout_{int(own)}", 64)
    begun = _call(traced_conn, "rsp_begin", oid, 0, 0, None, None, True, list(range(10)), None, None, own)
    assert begun["layout_verified"] is True
    stream = begun["stream"]
    # max_pinned_buffers = min((eic 16 + 1) * icl 16, GetPinLimit() 94) at the default settings.
    assert (stream["max_ios"], stream["io_combine_limit"], stream["max_pinned_buffers"]) == (16, 16, 94)
    assert stream["queue_size"] == 95 and stream["per_buffer_data_size"] == 8
    assert (stream["distance"], stream["pinned_buffers"]) == (1, 0)
    assert "readahead_distance" not in stream  # 19's field, not 18's
    first = _call(traced_conn, "rsp_next", begun["id"], [])
    assert (first["block"], first["valid"], first["data"]) == (0, True, 0)
    assert first["held"] == [first["buffer"]]  # the caller's pin, until released
    assert first["callback"][0] == 0 and first["blocks_read"] >= 1
    assert first["stream"]["pinned_buffers"] == len(first["stream"]["buffers"])
    if own:
        assert first["trace"] == []  # the server's own stream makes no traced calls
    else:
        # [kind, buffer, block, asked, accepted, forwarded, limit, flags, must_wait, returned]:
        # StartReadBuffers' result is traced; 18's WaitReadBuffers returns nothing (null).
        starts = [e for e in first["trace"] if e[0] == 1]
        waits = [e for e in first["trace"] if e[0] == 2]
        assert starts and all(e[9] == int(e[8]) for e in starts)
        assert waits and all(e[9] is None for e in waits)
    second = _call(traced_conn, "rsp_next", begun["id"], [first["buffer"]])
    assert second["block"] == 1 and first["buffer"] not in second["held"]
    ended = _call(traced_conn, "rsp_end", begun["id"], [second["buffer"]])
    assert ended["stream"] is None and ended["held"] == [] and ended["rel_pins"] == []


def test_the_traced_probe_says_where_the_state_comes_from(traced_conn: Any) -> None:
    info = _call(traced_conn, "rsp_info")
    assert info["layout"] == "source" and info["traced"] is True and info["layout_why"] == ""


def test_consumer_pins_shrink_the_additional_pin_limit(probe_conn: Any) -> None:
    oid = _table(probe_conn, "probe_pins", 64)
    before = _call(probe_conn, "rsp_info")["additional_pin_limit"]
    for block in range(40):
        last = _call(probe_conn, "rsp_pin", oid, 0, block)
    # GetPinLimit() 94 minus the pins the backend is estimated to hold: the 8 entries of
    # PrivateRefCountArray always count, then every overflowed one: 40 pins give 94 - 40 = 54,
    # as the model computes (docs/fidelity.md: the "86 to 51" is not 40 pins alone).
    assert (before, last["additional_pin_limit"]) == (86, 54)
    _call(probe_conn, "rsp_release", last["held"])
    assert _call(probe_conn, "rsp_info")["additional_pin_limit"] == 86


def test_a_stream_outlives_its_statement_but_not_its_transaction(probe_conn: Any) -> None:
    oid = _table(probe_conn, "probe_txn", 8)
    begun = _call(probe_conn, "rsp_begin", oid, 0, 0, None, None, False, [0, 1])
    probe_conn.execute("SELECT 1")
    assert _call(probe_conn, "rsp_next", begun["id"], [])["block"] == 0
    probe_conn.execute("ROLLBACK")
    probe_conn.execute("BEGIN")
    with pytest.raises(psycopg.Error, match="no stream"):
        _call(probe_conn, "rsp_next", begun["id"], [])


def test_outside_a_transaction_the_probe_says_so(
    probe: ProbeInstall, default_server: PgServer, pg_db: Any
) -> None:
    with default_server.connect(pg_db.name) as conn:
        for stmt in probe.session_sql():
            conn.execute(stmt)
        conn.execute("CREATE EXTENSION IF NOT EXISTS rsprobe")
        with pytest.raises(psycopg.Error, match="call BEGIN first"):
            conn.execute("SELECT rsp_state(1)")


# ------------------------------------------------------------------------------ the remote stream
@pytest.fixture(scope="module")
def impl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresImplementation]:
    impl = PostgresImplementation(workdir=tmp_path_factory.mktemp("impl"), pytest_mode=True)
    yield impl
    impl.close()


def test_untraced_server_offers_the_stream_capabilities_it_has(impl: PostgresImplementation) -> None:
    from reference_impl import Settings

    caps = impl.capabilities_for(Settings())
    if "stream-api" not in caps:
        pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
    # The read interposer (its own capability) builds wherever the probe does, unless it cannot.
    faults = {"fault-injection"} if impl.fault_injection_unavailable is None else set()
    assert caps == {"scans", "stream-api", "per-buffer-data"} | faults
    assert "set-strategy" not in caps and "pause-resume" not in caps
    # Introspection needs the server's struct ReadStream, which only a source tree gives.
    assert "--readstream-pg-source" in (impl.why_lacking("introspection") or "")
    assert "declares no read_stream_pause() and no read_stream_resume()" in (
        impl.why_lacking("pause-resume") or ""
    )


def test_untraced_stream_is_judged_and_reads_are_unseen(impl: PostgresImplementation) -> None:
    from reference_impl import Settings

    if "stream-api" not in impl.capabilities_for(Settings()):
        pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
    d = Scenario(relation_blocks=40, blocks=list(range(40)), cached=[3, 4], per_buffer_data=True).start(impl)
    assert d.consume() == list(range(40))
    assert d.max_stream_pins >= 2  # the stream looked ahead on the server
    with pytest.raises(pytest.skip.Exception, match="traced copy"):
        _ = d.reads
    d.end()
    assert d.stream_pins == 0


def test_the_remote_stream_refuses_misuse(impl: PostgresImplementation) -> None:
    """After its plan the server's stream reports the end, a release of a buffer the consumer
    never had is refused, and the driver refuses a next() on an ended stream."""
    from reference_impl import Settings

    if "stream-api" not in impl.capabilities_for(Settings()):
        pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
    d = Scenario(relation_blocks=8, blocks=[5, 6]).start(impl)
    assert d.consume() == [5, 6]
    assert d.next() == -1
    with pytest.raises(Exception, match="does not hold"):
        d.obs.release_buffer(123456)
    d.end()
    with pytest.raises(ConformanceViolation, match="ended stream"):
        d.next()


def test_other_backends_pins_are_mirrored_and_released(impl: PostgresImplementation) -> None:
    """A scenario's other backends keep their pins; the test's other backend drops its own."""
    from reference_impl import Settings

    if "stream-api" not in impl.capabilities_for(Settings()):
        pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
    d = Scenario(relation_blocks=16, blocks=list(range(8, 16)), other_pins=[1, 2]).start(impl)
    d.other_pin(5)
    d.next()
    assert {1, 2, 5} <= set(d.obs.shared_pins)
    d.other_release()
    d.next()
    assert {1, 2} <= set(d.obs.shared_pins) and 5 not in d.obs.shared_pins
    d.end()


def test_one_stream_traced_end_to_end(pg_source_tree: Path, tmp_path: Path) -> None:
    """With the server's own read_stream.c traced, every read the stream made is seen: a cold
    FULL scan of 40 blocks (PostgreSQL 18.6: [0] [1-2] [3-6] [7-14] [15-30] [31-39] without FULL)."""
    from reference_impl import Settings

    impl = PostgresImplementation(workdir=tmp_path, pytest_mode=True, source=pg_source_tree)
    try:
        if "stream-api" not in impl.capabilities_for(Settings()):
            pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
        assert "introspection" in impl.capabilities_for(Settings())
        d = Scenario(relation_blocks=40, blocks=list(range(40))).start(impl)
        assert d.consume() == list(range(40))
        ranges = [(r.start, r.start + r.nblocks - 1) for r in d.reads]
        assert ranges == [(0, 0), (1, 2), (3, 6), (7, 14), (15, 30), (31, 39)], ranges
        assert len(d.observer.starts) >= len(ranges) and not d.observer.outstanding
        assert 1 <= d.observer.max_outstanding <= d.max_ios
        d.end()
    finally:
        impl.close()


# ------------------------------------------------------------------------------ every version
def test_each_version_is_driven_with_its_own_fields(
    pg_version_build: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """On 18.6, 19 and master (traced from the tree): the stream's state comes under the
    version's own field names, and where the server declares read_stream_pause/resume the
    callback pauses the stream and resume() lets it go on, in order."""
    from reference_impl import Settings

    label, tree, bindir = pg_version_build
    bindir_arg = None if label == "18" else str(bindir)
    impl = PostgresImplementation(bindir=bindir_arg, workdir=tmp_path, pytest_mode=True, source=tree)
    try:
        caps = impl.capabilities_for(Settings())
        if "stream-api" not in caps:
            pytest.skip(impl.why_lacking("stream-api") or "no stream-api")
        assert "introspection" in caps, impl.why_lacking("introspection")
        assert ("pause-resume" in caps) == (label != "18"), impl.why_lacking("pause-resume")
        if label == "18":
            d = Scenario(relation_blocks=40, blocks=list(range(40))).start(impl)
            assert d.consume(3) == [0, 1, 2]
            assert "distance" in d.stream.state and "readahead_distance" not in d.stream.state
            d.end()
            return
        d = Scenario(relation_blocks=60, blocks=list(range(60)), pause_at=[10, 30]).start(impl)
        got = d.consume()
        state = d.stream.state
        for name in (
            "readahead_distance",
            "combine_distance",
            "distance_decay_holdoff",
            "resume_readahead_distance",
        ):
            assert name in state, name
        assert "distance" not in state and d.stream.distance == state["readahead_distance"]
        assert got == list(range(10)) and d.source.paused
        d.resume()
        got += d.consume()
        assert got == list(range(30)) and d.source.paused
        d.resume()
        got += d.consume()
        assert got == list(range(60))
        d.end()
    finally:
        impl.close()


def test_the_extension_files_are_written_safely_from_many_threads(tmp_path: Path) -> None:
    """A systematic run builds one mutant's probe from two threads at once; with a temporary
    name shared by the threads of a process, one thread's rename took the other's file away
    (FileNotFoundError in chmod) and stopped the run."""
    import threading

    from pytest_readstream.postgres.builds.probe_build import _write_extension_files

    texts = {"rsprobe.control": "comment = 'x'\n", "rsprobe--1.0.sql": "SELECT 1;\n" * 2000}
    errors: list[BaseException] = []
    for round_ in range(30):
        ext_dir = tmp_path / f"r{round_}"
        barrier = threading.Barrier(8)

        def write(ext_dir: Path = ext_dir, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                _write_extension_files(ext_dir, texts)
            except BaseException as err:  # collected for the assertion below
                errors.append(err)

        threads = [threading.Thread(target=write) for _ in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(p.name for p in ext_dir.iterdir()) == sorted(texts)
        assert all((ext_dir / n).read_text() == t for n, t in texts.items())
    assert not errors, errors[:3]
