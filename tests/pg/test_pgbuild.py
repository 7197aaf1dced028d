"""PostgreSQL built from source (``readstream pg-build``, ``--readstream-pg-build``).

Everything but the last test runs without a build: the meson options, the cache key, the one-line
reasons a build cannot happen (each tool missing in turn, a failing configure), and the start-up
refusals of the plugin and the command. The last test uses the build when an earlier
``readstream pg-build`` left one in the cache; CI never builds PostgreSQL.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_readstream.cli import main
from pytest_readstream.postgres.builds import pgbuild
from pytest_readstream.postgres.builds.pgbuild import (
    BuildOptions,
    PgBuildUnavailable,
    build_key,
    ensure_build,
    find_build,
    meson_options,
)


def test_meson_options_enable_io_uring_assertions_and_injection_points() -> None:
    opts = meson_options(BuildOptions())
    assert {"-Dliburing=enabled", "-Dcassert=true", "-Dinjection_points=true"} <= set(opts)
    # Nothing optional is left to "auto": the build is the same on every machine.
    assert "-Dicu=disabled" in opts and "-Dreadline=disabled" in opts and "-Dssl=none" in opts
    # A relative run path: the install still runs from the copy a server user can reach.
    assert "-Drpath=false" in opts and "-Dc_link_args=-Wl,-rpath,$ORIGIN/../lib" in opts
    assert "-Dlibdir=lib" in opts  # where that run path looks (not Debian's lib/<triplet>)
    plain = meson_options(BuildOptions(cassert=False, injection_points=False))
    assert "-Dcassert=false" in plain and "-Dinjection_points=false" in plain


def test_cache_key_covers_version_options_compiler_and_liburing_not_jobs() -> None:
    base = build_key(BuildOptions(), "gcc 12.2", "2.3")
    assert base == build_key(BuildOptions(jobs=1), "gcc 12.2", "2.3")  # parallelism changes nothing built
    others = {
        build_key(BuildOptions(cassert=False), "gcc 12.2", "2.3"),
        build_key(BuildOptions(injection_points=False), "gcc 12.2", "2.3"),
        build_key(BuildOptions(version="18.5"), "gcc 12.2", "2.3"),
        build_key(BuildOptions(), "gcc 13.1", "2.3"),
        build_key(BuildOptions(), "gcc 12.2", "2.5"),
        build_key(BuildOptions(), "gcc 12.2", "2.3", source="/src/my-postgres"),  # not the release
    }
    assert base not in others and len(others) == 6
    assert len(base) == 16 and int(base, 16) >= 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"version": "master"},
            "cannot build PostgreSQL 'master': allowed PostgreSQL 18.x, 19.x and master",
        ),
        ({"version": "17.4"}, "cannot build PostgreSQL '17.4': allowed"),
        ({"jobs": 0}, "cannot build with jobs = 0: allowed 1 or more"),
    ],
)
def test_bad_options_are_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PgBuildUnavailable, match=message) as err:
        BuildOptions(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def _toolbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tools: tuple[str, ...]) -> None:
    """PATH holds only ``tools``, and no program is found beside this Python either.

    Each is the real program when it is installed, else a stand-in: the build's checks only look
    a program up or read the first line of its ``--version`` (a stand-in ``pkg-config`` knows no
    package, as a real one without liburing-dev), so the tests run on a machine with none of them.
    """
    box = tmp_path / "bin"
    box.mkdir()
    for name in tools:
        real = pgbuild._which(name)
        if real is not None:
            (box / name).symlink_to(real)
            continue
        body = "exit 1" if name == "pkg-config" else f"echo '{name} (stand-in) 1.0'"
        (box / name).write_text(f"#!/bin/sh\n{body}\n")
        (box / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(box))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here" / "python"))


#: In the order the build looks for them: a test of one missing needs only those before it.
_ALL = ("meson", "ninja", "bison", "flex", "perl", "cc", "pkg-config")


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("meson", r"meson is not installed \(pip install 'pytest-readstream\[pgbuild\]'\)"),
        ("ninja", r"ninja is not installed \(pip install 'pytest-readstream\[pgbuild\]'\)"),
        ("bison", r"bison is not on PATH \(Debian: apt-get install bison\)"),
        ("flex", r"flex is not on PATH \(Debian: apt-get install flex\)"),
        ("cc", r"no C compiler \(cc or gcc\) on PATH"),
        ("pkg-config", r"pkg-config is not on PATH"),
    ],
)
def test_a_missing_tool_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str, message: str
) -> None:
    _toolbox(tmp_path, monkeypatch, _ALL[: _ALL.index(missing)])
    with pytest.raises(PgBuildUnavailable, match=r"^cannot build PostgreSQL.*" + message) as err:
        ensure_build(cache_dir=tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists()  # refused before anything was written


def test_missing_liburing_headers_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _toolbox(tmp_path, monkeypatch, _ALL)
    # pkg-config then knows no library at all, as on a machine without liburing-dev.
    empty = tmp_path / "pc"
    empty.mkdir()
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(empty))
    monkeypatch.setenv("PKG_CONFIG_PATH", str(empty))
    with pytest.raises(
        PgBuildUnavailable,
        match=r"^cannot build PostgreSQL with io_uring: liburing's headers are not installed "
        r"\(Debian: apt-get install liburing-dev\)$",
    ):
        ensure_build(cache_dir=tmp_path / "cache")
    assert find_build(BuildOptions(), cache_dir=tmp_path / "cache") is None


def _tools_or_skip() -> None:
    try:
        pgbuild._find_tools()
    except PgBuildUnavailable as err:
        pytest.skip(str(err))


def _fake_tree(tmp_path: Path, version: str, meson_build: str) -> Path:
    tree = tmp_path / "src"
    (tree / "src/backend/storage/aio").mkdir(parents=True)
    (tree / "src/backend/storage/aio/read_stream.c").write_text("/* not PostgreSQL */\n")
    (tree / "meson.build").write_text(meson_build.replace("VERSION", version))
    return tree


def test_a_source_of_another_version_is_refused(tmp_path: Path) -> None:
    _tools_or_skip()
    tree = _fake_tree(tmp_path, "18.5", "project('postgresql', 'c', version: 'VERSION')\n")
    with pytest.raises(PgBuildUnavailable, match=r"is PostgreSQL 18.5, not 18.6: give the tree of 18.6$"):
        ensure_build(cache_dir=tmp_path / "cache", source=tree)


def test_a_failing_configure_is_one_line_naming_the_log(tmp_path: Path) -> None:
    _tools_or_skip()
    # A meson.build with the right version whose configure step fails at once (it declares
    # none of PostgreSQL's options): no compile.
    tree = _fake_tree(tmp_path, "18.6", "project('postgresql', 'c', version: 'VERSION')\n")
    cache = tmp_path / "cache"
    with pytest.raises(PgBuildUnavailable, match=r"^building PostgreSQL failed at meson setup: .*") as err:
        ensure_build(cache_dir=cache, source=tree, progress=lambda line: None)
    text = str(err.value)
    assert "\n" not in text and "ERROR: Unknown option" in text
    log = Path(text.rsplit("(full log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "meson setup" in log.read_text()
    # Nothing half-built is left where a finished build would be found.
    assert [p.name for p in cache.iterdir() if not p.name.endswith((".log", ".lock"))] == []
    assert find_build(BuildOptions(), cache_dir=cache) is None


def test_ninja_progress_is_a_line_per_tenth() -> None:
    said: list[str] = []
    progress = pgbuild._NinjaProgress(said.append)
    for i in range(1, 201):
        progress(f"[{i}/200] Compiling C object x{i}.o\n")
    progress("some warning without a step\n")
    assert len(said) == 10
    assert said[0] == "compiling: 20/200 steps (10%)" and said[-1] == "compiling: 200/200 steps (100%)"


# ------------------------------------------------------------------------------ start-up refusals
PASSING = "def test_nothing(readstream_impl):\n    pass\n"


def _one_error(result: pytest.RunResult) -> str:
    lines = [line for line in result.errlines if line.strip() and not line.startswith("readstream pg-build:")]
    assert len(lines) == 1, result.errlines
    assert "Traceback" not in result.stdout.str()
    result.stdout.no_fnmatch_line("*passed*")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--readstream-pg-build",),
            "ERROR: --readstream-pg-build needs --readstream-impl=postgres (the implementation is reference)",
        ),
        (
            ("--readstream-impl=postgres", "--readstream-pg-build", "--readstream-pg-bindir=/nowhere/bin"),
            "ERROR: give either --readstream-pg-build (a server built from source) or "
            "--readstream-pg-bindir /nowhere/bin, not both",
        ),
        (
            ("--readstream-impl=postgres", "--readstream-pg-build", "--readstream-pg-dsn=postgresql:///x"),
            "ERROR: give either --readstream-pg-build (a server built from source) or --readstream-pg-dsn, "
            "not both",
        ),
    ],
    ids=["other-impl", "with-bindir", "with-dsn"],
)
def test_plugin_refuses_what_cannot_go_with_a_build(
    pytester: pytest.Pytester, args: tuple[str, ...], expected: str
) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _one_error(result) == expected


def test_plugin_refuses_a_source_tree_with_a_build(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(
        "--readstream-impl=postgres", "--readstream-pg-build", f"--readstream-pg-source={pytester.path}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _one_error(result).startswith(
        "ERROR: --readstream-pg-build builds the fetched source of the embedded server's version"
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_plugin_says_in_one_line_why_it_cannot_build(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: tuple[str, ...]
) -> None:
    pytest.importorskip("psycopg", reason="the postgres implementation needs the postgres extra (psycopg)")
    monkeypatch.setenv("CC", "no-such-cc-for-readstream")
    monkeypatch.setenv("XDG_CACHE_HOME", str(pytester.path / "cache"))
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess(*workers, "--readstream-impl=postgres", "--readstream-pg-build")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _one_error(result)
    assert line.startswith("ERROR: --readstream-pg-build: cannot build PostgreSQL")
    if pgbuild._which("meson") and pgbuild._which("ninja") and shutil.which("bison") and shutil.which("flex"):
        assert line.endswith("the C compiler CC='no-such-cc-for-readstream' is not on PATH")


def test_command_refuses_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["pg-build", "--jobs", "0"])
    assert exit_.value.code == 2
    assert "--jobs: 0 is invalid: allowed >= 1" in capsys.readouterr().err
    assert main(["pg-build", "--pg-version", "17.4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "readstream pg-build: --pg-version 17.4: cannot build PostgreSQL '17.4': allowed PostgreSQL 18.x, "
        "19.x and master (20devel) (a release such as 18.6, a 19 beta such as 19beta1, or 20devel)"
    )


def test_command_check_finds_no_build_in_an_empty_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["pg-build", "--check"]) == 1
    assert "no build of PostgreSQL 18.6 with these options in the cache" in capsys.readouterr().out


def test_command_says_in_one_line_why_it_cannot_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _toolbox(tmp_path, monkeypatch, _ALL[: _ALL.index("bison")])
    assert main(["pg-build"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "readstream pg-build: cannot build PostgreSQL: bison is not on PATH (Debian: apt-get install bison)"
    )


# ------------------------------------------------------------------------------ with a build
@pytest.mark.postgres
def test_the_build_runs_io_uring_with_assertions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cached build (``readstream pg-build``) starts, runs io_uring and checks assertions."""
    build = find_build(BuildOptions())
    if build is None:
        pytest.skip("no PostgreSQL built from source in the cache (make one with: readstream pg-build)")
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    from pytest_readstream.postgres import PgServer, ServerSettings, measure_statement

    assert os.access(build.bindir / "postgres", os.X_OK) and build.options.version == "18.6"
    assert main(["pg-build", "--check"]) == 0
    assert capsys.readouterr().out.strip() == str(build.bindir)
    if shutil.which("ldd"):
        # initdb loads the build's own libpq (relative run path), not a system one.
        out = subprocess.run(["ldd", str(build.bindir / "initdb")], capture_output=True, text=True).stdout
        libpq = [line for line in out.splitlines() if "libpq" in line]
        assert libpq and str(build.prefix) in libpq[0], out
    with PgServer.from_bindir(
        build.bindir, tmp_path, settings=ServerSettings(io_method="io_uring")
    ) as server:
        db = server.scratch_database(label="pgbuild")
        db.create_wide_table("t", pages=64)
        with db.session() as s:
            assert s.execute("SHOW io_method") == [("io_uring",)]
            assert s.execute("SHOW debug_assertions") == [("on",)]
            m = measure_statement(s, "SELECT count(*) FROM t", ["t"])
        assert m.io.total().reads >= 1  # the evicted table was read back through io_uring


def test_faults_under_io_uring_are_refused_only_where_the_kernel_does_the_read() -> None:
    """Under io_uring the interposer acts on submission and completion: eio, short_read and
    checksum faults run; a latency fault and another backend's held read are refused with the
    reason (a skip) before the stream starts."""
    pytest.importorskip("psycopg", reason="the server harness needs the postgres extra (psycopg)")
    from types import SimpleNamespace

    from pytest_readstream.postgres.faults import URING_NO_DELAY
    from pytest_readstream.postgres.faults.stream_faults import StreamFaults, io_method_problem

    assert io_method_problem("io_uring", ["eio", "short_read", "checksum"]) is None
    assert io_method_problem("io_uring", ["eio", "latency"]) == f"latency fault: {URING_NO_DELAY}"
    assert URING_NO_DELAY.startswith("io_method=io_uring: the kernel performs the read")
    assert [io_method_problem(m, ["latency"]) for m in ("sync", "worker", None)] == [None, None, None]
    uring, worker = SimpleNamespace(io_method="io_uring"), SimpleNamespace(io_method="worker")
    why = StreamFaults.why_not_io_method
    assert why(uring, kinds=(), held=False) is None  # no fault, nothing for the interposer
    assert why(uring, kinds=("checksum",), held=False) is None
    assert why(worker, kinds=("latency",), held=True) is None
    assert why(uring, kinds=("latency",), held=False) == io_method_problem("io_uring", ["latency"])
    held = why(uring, kinds=(), held=True)
    assert held == f"another backend's I/O in progress is a read the interposer holds, and {URING_NO_DELAY}"


@pytest.mark.postgres
def test_the_stream_families_run_io_uring_on_the_build(tmp_path: Path) -> None:
    """On the cached build the io_uring cases of the stream families run (none skips for want of
    io_uring) and none fails, those with faults included (the interposer acts on io_uring's
    submission and completion)."""
    if find_build(BuildOptions()) is None:
        pytest.skip("no PostgreSQL built from source in the cache (make one with: readstream pg-build)")
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs",
        "readstream_conformance.test_reads", "readstream_conformance.test_faults",
        "--readstream-impl=postgres", "--readstream-pg-build", "--readstream-pg-fetch-source", "--readstream-seed=1",
        "--readstream-xfails=postgresql-18-faults",
        "-p", "no:cacheprovider", "-q", "-rs", f"--basetemp={tmp_path / 'basetemp'}",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert not [line for line in skipped if "cannot set io_method = 'io_uring'" in line], tail
    # The interposer acts on io_uring reads: no fault test skips for io_uring's sake, except
    # those holding another backend's read, which only a pread can be.
    uring = [line for line in skipped if "io_method=io_uring" in line]
    assert all("a read the interposer holds" in line for line in uring), tail
    summary = re.search(r"(\d+) passed", out.stdout)
    assert summary is not None and int(summary.group(1)) >= 60, tail
