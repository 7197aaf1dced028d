"""Every option from the command line, the environment and the ini file, and their precedence."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ._helpers import read_report

PROBE = """
    from pytest_readstream.config import get_options

    def test_probe(pytestconfig, readstream_impl, readstream_seed):
        opts = get_options(pytestconfig)
        print()
        print("IMPL", readstream_impl.name, opts.impl_source)
        print("SEED", readstream_seed, opts.seed_source)
        print("REPORT", opts.report)
        print("XFAILS", opts.xfails, opts.xfails_as_skips)
        print("PG", opts.pg_dsn, opts.pg_bindir)
"""


def _probe(result: pytest.RunResult, key: str) -> list[str]:
    for line in result.outlines:
        m = re.search(rf"(?:^|\s){key} (.*)$", line)
        if m:
            return m.group(1).split()
    raise AssertionError(f"no {key} line in:\n{result.stdout.str()}")


@pytest.fixture
def probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("READSTREAM_IMPL", raising=False)
    pytester.makepyfile(test_probe=PROBE)
    return pytester


def test_defaults(probe: pytest.Pytester) -> None:
    result = probe.runpytest("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert _probe(result, "IMPL") == ["reference", "default"]
    seed, source = _probe(result, "SEED")
    assert source == "random"
    assert _probe(result, "REPORT") == ["None"]
    assert _probe(result, "XFAILS") == ["None", "False"]
    assert _probe(result, "PG") == ["None", "None"]
    result.stdout.fnmatch_lines(
        [
            "readstream: implementation reference (ReferenceImplementation); capabilities: *stream-api*",
            f"readstream: seed {seed} (random; reproduce with --readstream-seed={seed})",
        ]
    )


def test_impl_from_command_line(probe: pytest.Pytester, with_no_lookahead: str) -> None:
    result = probe.runpytest("-s", f"--readstream-impl={with_no_lookahead}")
    result.assert_outcomes(passed=1)
    assert _probe(result, "IMPL") == ["no-lookahead", "command", "line"]
    result.stdout.fnmatch_lines(["readstream: implementation no_lookahead:* from --readstream-impl*"])


def test_impl_from_environment(
    probe: pytest.Pytester, with_no_lookahead: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("READSTREAM_IMPL", with_no_lookahead)
    result = probe.runpytest("-s")
    assert _probe(result, "IMPL") == ["no-lookahead", "environment"]


def test_impl_from_ini(probe: pytest.Pytester, with_no_lookahead: str) -> None:
    probe.makeini(f"[pytest]\nreadstream_impl = {with_no_lookahead}\n")
    result = probe.runpytest("-s")
    assert _probe(result, "IMPL") == ["no-lookahead", "ini"]


def test_precedence_command_line_over_environment_over_ini(
    probe: pytest.Pytester, with_no_lookahead: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe.makeini("[pytest]\nreadstream_impl = no_such_impl_in_ini\n")
    monkeypatch.setenv("READSTREAM_IMPL", with_no_lookahead)
    result = probe.runpytest("-s")
    assert _probe(result, "IMPL") == ["no-lookahead", "environment"]
    monkeypatch.setenv("READSTREAM_IMPL", "no_such_impl_in_env")
    result = probe.runpytest("-s", "--readstream-impl=reference")
    assert _probe(result, "IMPL") == ["reference", "command", "line"]


def test_seed_from_command_line_and_ini(probe: pytest.Pytester) -> None:
    result = probe.runpytest("-s", "--readstream-seed=12345")
    assert _probe(result, "SEED") == ["12345", "command", "line"]
    result.stdout.fnmatch_lines(
        ["readstream: seed 12345 (command line; reproduce with --readstream-seed=12345)"]
    )
    probe.makeini("[pytest]\nreadstream_seed = 0x10\n")
    result = probe.runpytest("-s")
    assert _probe(result, "SEED") == ["16", "ini"]
    result = probe.runpytest("-s", "--readstream-seed=7")
    assert _probe(result, "SEED") == ["7", "command", "line"]


def test_random_seeds_differ_between_runs(probe: pytest.Pytester) -> None:
    seeds = {_probe(probe.runpytest("-s"), "SEED")[0] for _ in range(3)}
    assert len(seeds) > 1


@pytest.mark.parametrize("bad", ["abc", "-1", str(2**32)])
def test_bad_seed_on_command_line(probe: pytest.Pytester, bad: str) -> None:
    result = probe.runpytest(f"--readstream-seed={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--readstream-seed*allowed 0..4294967295*"])


def test_bad_seed_in_ini(probe: pytest.Pytester) -> None:
    probe.makeini("[pytest]\nreadstream_seed = twelve\n")
    result = probe.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option readstream_seed = 'twelve' is not an integer*"])


def test_report_path_from_command_line_and_ini(probe: pytest.Pytester) -> None:
    probe.mkdir("out")  # an output's directory must exist (one rule for every output)
    result = probe.runpytest("-s", "--readstream-report=out/r.json")
    assert _probe(result, "REPORT") == [str(probe.path / "out" / "r.json")]
    assert read_report(probe.path / "out" / "r.json")["summary"]["passed"] == 1
    sub = probe.mkdir("cfg")
    (sub / "pytest.ini").write_text("[pytest]\nreadstream_report = from-ini.json\n")
    result = probe.runpytest("-s", "-c", str(sub / "pytest.ini"), "--rootdir", str(probe.path))
    assert _probe(result, "REPORT") == [str(sub / "from-ini.json")]
    assert (sub / "from-ini.json").is_file()


def test_xfails_options_from_command_line_and_ini(probe: pytest.Pytester) -> None:
    probe.makefile(".txt", known="# nothing known\n")
    result = probe.runpytest("-s", "--readstream-xfails=known.txt", "--readstream-xfails-as-skips")
    assert _probe(result, "XFAILS") == [str(probe.path / "known.txt"), "True"]
    probe.makeini("[pytest]\nreadstream_xfails = known.txt\nreadstream_xfails_as_skips = true\n")
    result = probe.runpytest("-s")
    assert _probe(result, "XFAILS") == [str(probe.path / "known.txt"), "True"]


def test_pg_options_from_command_line_and_ini(probe: pytest.Pytester) -> None:
    # On the command line they are for --readstream-impl=postgres alone (issue 15 item 5: they
    # were silently ignored); test_postgres_resolves_lazily_and_gets_dsn_and_bindir checks that
    # the command line's values reach the postgres implementation.
    result = probe.runpytest(
        "-s", "--readstream-pg-dsn=postgresql:///x", "--readstream-pg-bindir=/opt/pg/bin"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --readstream-pg-dsn applies only to --readstream-impl=postgres*"])
    probe.makeini("[pytest]\nreadstream_pg_dsn = postgresql:///y\nreadstream_pg_bindir = /usr/lib/pg\n")
    result = probe.runpytest("-s")
    assert _probe(result, "PG") == ["postgresql:///y", "/usr/lib/pg"]


def test_options_are_listed_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    for option in (
        "--readstream-impl=NAME",
        "--readstream-seed=N",
        "--readstream-report=PATH.json",
        "--readstream-xfails=FILE",
        "--readstream-xfails-as-skips",
        "--readstream-pg-dsn=URI",
        "--readstream-pg-bindir=DIR",
    ):
        result.stdout.fnmatch_lines([f"*{option}*"])
    for ini in ("readstream_impl", "readstream_seed", "readstream_report", "readstream_xfails_as_skips"):
        result.stdout.fnmatch_lines([f"*{ini} (*"])


@pytest.fixture
def keep_hypothesis_state() -> Iterator[None]:
    """In-process runs load hypothesis profiles and seeds into this process: put them back."""
    import hypothesis.core
    from hypothesis import settings

    profile, seed = settings.get_current_profile_name(), hypothesis.core.global_force_seed
    registry = settings._profiles  # hypothesis has no public way to unregister a profile
    saved = dict(registry)
    yield
    registry.clear()
    registry.update(saved)
    settings.load_profile(profile)
    hypothesis.core.global_force_seed = seed


@pytest.mark.usefixtures("keep_hypothesis_state")
def test_hypothesis_profiles_and_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import hypothesis
        from hypothesis import given, strategies as st

        def test_profile(pytestconfig):
            current = hypothesis.settings.default
            print("PROFILE", hypothesis.settings.get_current_profile_name(), current.max_examples,
                  current.database, current.deadline, pytestconfig.option.hypothesis_seed)

        @given(st.integers())
        def test_given(x):
            pass
        """
    )
    result = pytester.runpytest("-s", "--hypothesis-profile=ci", "--readstream-seed=99")
    result.assert_outcomes(passed=2)
    assert _probe(result, "PROFILE") == ["ci", "25", "None", "None", "99"]
    result = pytester.runpytest(
        "-s", "-k", "test_profile", "--hypothesis-profile=thorough", "--hypothesis-seed=5"
    )
    line = _probe(result, "PROFILE")
    assert line[:2] == ["thorough", "1000"]
    assert line[-1] == "5"  # an explicit --hypothesis-seed wins
    result = pytester.runpytest("-s", "-k", "test_profile", "--hypothesis-profile=thorough")
    line = _probe(result, "PROFILE")
    assert line[:2] == ["thorough", "1000"]
    assert re.fullmatch(r"\d+", line[-1])  # the run's random seed seeds hypothesis too
    result = pytester.runpytest("-s", "-k", "test_profile", "--hypothesis-profile=dev")
    line = _probe(result, "PROFILE")
    assert line[:2] == ["dev", "100"]
    assert line[-1] == "None"  # dev keeps hypothesis' own seeding and its example database


@pytest.mark.usefixtures("keep_hypothesis_state")
def test_own_profile_of_the_same_name_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from hypothesis import settings
        settings.register_profile("ci", max_examples=3)
        """
    )
    pytester.makepyfile(
        """
        import hypothesis
        def test_profile():
            print("PROFILE", hypothesis.settings.default.max_examples)
        """
    )
    result = pytester.runpytest("-s", "--hypothesis-profile=ci")
    assert _probe(result, "PROFILE") == ["3"]


MODEL_VERSION_PROBE = """
    import pytest
    from pytest_readstream.scenario import model_versions
    from conformance_probe import scenario_version

    def test_unnamed(pytestconfig, readstream_settings):
        from pytest_readstream.config import get_options

        print()
        print("UNNAMED", readstream_settings.version, *model_versions())
        print("SCENARIO", scenario_version())
        print("RERUN", "x", *get_options(pytestconfig).rerun_args())

    @pytest.mark.readstream_settings(version="18")
    def test_named(readstream_settings):
        print()
        print("NAMED", readstream_settings.version)
"""

CONFORMANCE_PROBE = """
    from readstream_conformance._harness import Scenario

    def scenario_version():
        return Scenario(settings={"io_method": "sync"}).start(
            __import__("pytest_readstream.reference", fromlist=["x"]).ReferenceImplementation()
        ).backend.settings.version
"""


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "18"), ("19", "19"), ("20devel", "20devel"), ("master", "20devel")]
)
def test_model_version_applies_to_tests_that_name_none(
    pytester: pytest.Pytester, given: str | None, expected: str
) -> None:
    """--readstream-model-version sets the version of every Settings the harness makes for a
    test that names none (fixtures and conformance scenarios); a test that names one keeps it."""
    pytester.makepyfile(test_mv=MODEL_VERSION_PROBE, conformance_probe=CONFORMANCE_PROBE)
    args = ["-s", "-p", "no:cacheprovider"] + (
        [] if given is None else [f"--readstream-model-version={given}"]
    )
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2)
    unnamed = _probe(result, "UNNAMED")
    assert unnamed[0] == expected
    assert unnamed[1:] == (["18", "19", "20devel"] if given is None else [expected])
    assert _probe(result, "SCENARIO") == [expected]
    assert _probe(result, "NAMED") == ["18"]
    assert _probe(result, "RERUN") == ["x"] + (
        [] if given is None else [f"--readstream-model-version={expected}"]
    )
    if given is not None:
        result.stdout.fnmatch_lines([f"readstream: model version {expected} (--readstream-model-version)"])


def test_bad_model_version(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mv="def test_x(): pass\n")
    result = pytester.runpytest("--readstream-model-version=17")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--readstream-model-version: version = '17' has no model: allowed 18, 19, 20devel*"]
    )
