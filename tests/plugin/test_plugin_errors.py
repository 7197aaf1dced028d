"""Every error path: one clear ``pytest.UsageError`` at start-up, naming what was given."""

from __future__ import annotations

import textwrap

import pytest

import pytest_readstream.implementations as implementations

PASSING = "def test_nothing():\n    pass\n"


def _single_error_line(result: pytest.RunResult) -> str:
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, result.errlines
    assert errors[0].startswith("ERROR: ")
    return errors[0]


def test_unknown_name_exits_with_one_line_listing_available_names(pytester: pytest.Pytester) -> None:
    """The issue's acceptance check, in a real subprocess: ``pytest --readstream-impl=no_such_impl``."""
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess("--readstream-impl=no_such_impl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert "'no_such_impl'" in line
    assert "available: reference, postgres, " in line
    assert "mutant:" in line
    assert line.endswith("or package.module:attr")
    result.stdout.no_fnmatch_line("*passed*")


def test_unknown_name_from_environment_says_where_it_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("READSTREAM_IMPL", "typo")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "(from environment variable READSTREAM_IMPL): unknown implementation 'typo'" in _single_error_line(
        result
    )


def test_bad_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=no_such_pkg.impl:Impl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert "cannot import module 'no_such_pkg.impl'" in line
    assert "No module named 'no_such_pkg'" in line
    assert "'pythonpath' ini option" in line


def test_module_that_fails_to_import(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING, broken="raise RuntimeError('boom at import')\n")
    pytester.syspathinsert()
    result = pytester.runpytest("--readstream-impl=broken:Impl")
    line = _single_error_line(result)
    assert (
        "importing module 'broken' for implementation 'broken:Impl' failed: RuntimeError: boom at import"
        in line
    )


def test_missing_attribute(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING, myimpl="X = 1\n")
    pytester.syspathinsert()
    result = pytester.runpytest("--readstream-impl=myimpl:Nope")
    assert "module 'myimpl' has no attribute 'Nope'" in _single_error_line(result)


def test_not_of_the_form_module_attr(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=myimpl:")
    assert "'myimpl:' is not of the form package.module:attr" in _single_error_line(result)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "class Impl:\n    name = 'x'\n    capabilities = frozenset({'stream-api'})\n",
            "capability 'stream-api' needs a callable begin_stream()",
        ),
        (
            "class Impl:\n    name = 'x'\n    capabilities = frozenset({'scans'})\n"
            "    def scan_variants(self, scan): return ()\n",
            "capability 'scans' needs a callable run_scan()",
        ),
        (
            "class Impl:\n    name = 'x'\n    capabilities = frozenset({'stream-api', 'telepathy'})\n"
            "    def begin_stream(self, *a, **k): pass\n",
            "unknown capabilities telepathy",
        ),
        ("class Impl:\n    name = 'x'\n", "it has no 'capabilities' set of strings"),
        (
            "class Impl:\n    name = 'x'\n    capabilities = frozenset({'virtual-time'})\n",
            "it offers neither 'stream-api' nor 'scans'",
        ),
        ("Impl = 42\n", "'myimpl:Impl' is a int, neither an implementation"),
        (
            "class Impl:\n    def __init__(self):\n        raise ValueError('needs a licence key')\n",
            "creating implementation 'myimpl:Impl' failed: ValueError: needs a licence key",
        ),
    ],
    ids=[
        "missing-begin_stream",
        "missing-run_scan",
        "unknown-capability",
        "no-capabilities",
        "no-api",
        "int",
        "init",
    ],
)
def test_object_not_satisfying_the_protocol(pytester: pytest.Pytester, body: str, expected: str) -> None:
    pytester.makepyfile(PASSING, myimpl=body)
    pytester.syspathinsert()
    result = pytester.runpytest("--readstream-impl=myimpl:Impl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert expected in line, line


def test_unknown_mutant(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=mutant:no-such-bug")
    line = _single_error_line(result)
    assert "unknown mutant 'mutant:no-such-bug'" in line
    for name in implementations.available_names():
        assert name in line


def test_every_mutant_loads() -> None:
    names = [n for n in implementations.available_names() if n.startswith("mutant:")]
    for name in names:
        impl = implementations.load_implementation(name)
        assert impl.name == name
        assert "stream-api" in impl.capabilities


def test_postgres_without_the_extra(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(implementations, "_EXTRA_MODULES", ("no_such_driver_module",))
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=postgres")
    line = _single_error_line(result)
    assert "needs the postgres extra (module 'no_such_driver_module' is not installed)" in line
    assert "pip install 'pytest-readstream[postgres]'" in line


def test_postgres_module_missing(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(implementations, "_EXTRA_MODULES", ())
    monkeypatch.setattr(implementations, "_POSTGRES_TARGET", "no_such_pg_module:PostgresImplementation")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=postgres")
    assert "implementation 'postgres' is not part of this installation" in _single_error_line(result)


def test_postgres_resolves_lazily_and_gets_dsn_and_bindir(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(implementations, "_EXTRA_MODULES", ())
    monkeypatch.setattr(implementations, "_POSTGRES_TARGET", "fakepg:PostgresImplementation")
    pytester.makepyfile(
        fakepg="""
        class PostgresImplementation:
            name = "postgres"
            capabilities = frozenset({"scans"})
            def __init__(self, dsn=None, bindir=None):
                self.dsn, self.bindir = dsn, bindir
            def scan_variants(self, scan):
                return ("streamed",)
            def run_scan(self, request):
                raise AssertionError("not run here")
        """,
        test_pg="""
        def test_pg(readstream_impl):
            assert (readstream_impl.dsn, readstream_impl.bindir) == ("postgresql:///db", "/pg/bin")
        """,
    )
    pytester.syspathinsert()
    assert "fakepg" not in __import__("sys").modules
    result = pytester.runpytest(
        "--readstream-impl=postgres", "--readstream-pg-dsn=postgresql:///db", "--readstream-pg-bindir=/pg/bin"
    )
    result.assert_outcomes(passed=1)


def _write_entry_point(pytester: pytest.Pytester, name: str, value: str) -> None:
    dist = pytester.mkdir("thirdparty_impl-1.0.dist-info")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-impl\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[readstream.implementations]\n{name} = {value}\n")
    pytester.syspathinsert()


def test_entry_point_implementation(pytester: pytest.Pytester, with_no_lookahead: str) -> None:
    _write_entry_point(pytester, "simple", with_no_lookahead)
    pytester.makepyfile(
        """
        def test_impl(readstream_impl):
            assert readstream_impl.name == "no-lookahead"
        """
    )
    assert "simple" in implementations.available_names()
    result = pytester.runpytest("--readstream-impl=simple")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("--readstream-impl=nothing")
    assert ", simple, or package.module:attr" in _single_error_line(result)


def test_entry_point_that_fails_to_load(pytester: pytest.Pytester) -> None:
    _write_entry_point(pytester, "brokenep", "no_such_module_for_ep:Impl")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-impl=brokenep")
    line = _single_error_line(result)
    assert "entry point 'brokenep' (no_such_module_for_ep:Impl) of group 'readstream.implementations'" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("dir", "is not a file"),
        (b"\xff\xfe bad bytes\n", "is not UTF-8 text"),
        ("test_a.py::test_x with spaces\n", "line 1: 'test_a.py::test_x with spaces' is not a test id"),
        (
            "test_a.py::test_x\n# again\ntest_a.py::test_x  # dup\n",
            "line 3: 'test_a.py::test_x' repeats line 1",
        ),
    ],
    ids=["missing", "directory", "not-utf8", "spaces", "duplicate"],
)
def test_bad_xfails_file(pytester: pytest.Pytester, content: object, expected: str) -> None:
    pytester.makepyfile(PASSING)
    path = pytester.path / "xfails.txt"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    result = pytester.runpytest("--readstream-xfails=xfails.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert "--readstream-xfails" in line and expected in line, line


@pytest.mark.parametrize(
    "where, expected",
    [
        ("directory", "is a directory; give a file path"),
        ("under-a-file", "a-file' is not a directory"),
    ],
)
def test_bad_report_path_is_refused_before_the_run(
    pytester: pytest.Pytester, where: str, expected: str
) -> None:
    # Otherwise the run would go on and fail to write its report only at the very end.
    pytester.makepyfile(PASSING)
    (pytester.path / "a-file").write_text("")
    (pytester.path / "out").mkdir()
    target = "out" if where == "directory" else "a-file/sub/report.json"
    result = pytester.runpytest(f"--readstream-report={target}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert "--readstream-report" in line and expected in line, line
    result.stdout.no_fnmatch_line("*passed*")


def test_report_directories_are_not_created(pytester: pytest.Pytester) -> None:
    """One rule for every output (issue 15 item 7): its directory must exist, as for --plot DIR."""
    pytester.makepyfile(PASSING)
    result = pytester.runpytest("--readstream-report=new/sub/report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "new/sub' does not exist (create it first)" in _single_error_line(result)
    assert not (pytester.path / "new").exists()


def test_unregistered_hypothesis_profile_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_subprocess("-p", "hypothesis", "--hypothesis-profile=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = _single_error_line(result)
    assert "--hypothesis-profile 'nope' is not registered: available " in line
    assert all(name in line for name in ("ci", "dev", "thorough")), line


def test_malformed_markers_fail_their_test_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.readstream_invariant("pins", "SOMETIMES")
            def test_bad_tier():
                pass

            @pytest.mark.readstream_invariant("", "MUST")
            def test_no_family():
                pass

            @pytest.mark.readstream_requires("telepathy")
            def test_bad_capability():
                pass

            @pytest.mark.readstream_invariant("pins", "must")
            def test_fine():
                pass
            """
        )
    )
    result = pytester.runpytest("-rE")
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*readstream_invariant('pins', 'SOMETIMES'): tier must be one of MUST, SHOULD, MAY*",
            "*readstream_invariant needs a family name*",
            "*readstream_requires: unknown capability 'telepathy': allowed stream-api, *",
        ],
        consecutive=False,
    )
