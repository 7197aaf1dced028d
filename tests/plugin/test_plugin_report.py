"""The terminal summary and the JSON report: pass, fail, interruption, and xdist merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_readstream.fixtures import derive_seed
from pytest_readstream.reporting import SCHEMA, SCHEMA_VERSION, write_json_atomically

from ._helpers import comparable, read_report

SUITE = """
import pytest
from reference_impl import BlockRangeReadStreamPrivate, block_range_read_stream_cb

def scan(rel, backend, factory, n):
    stream = factory(rel.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, n))
    while (buf := stream.next_buffer()) >= 0:
        backend.release_buffer(buf)
    stream.end()

@pytest.mark.readstream_invariant("combining", "MUST")
@pytest.mark.parametrize("n", [1, 16, 100, 1000])
def test_scan(n, readstream_relation, readstream_backend, readstream_stream_factory, readstream_stats):
    scan(readstream_relation, readstream_backend, readstream_stream_factory, n)
    readstream_stats.record_backend(readstream_backend)
    readstream_stats.record(blocks_per_read=n / readstream_backend.stats.reads)
    assert readstream_backend.stats.reads <= n

@pytest.mark.readstream_invariant("combining", "SHOULD")
@pytest.mark.readstream_settings(io_combine_limit=1)
def test_combines_even_with_limit_one(readstream_relation, readstream_backend, readstream_stream_factory):
    scan(readstream_relation, readstream_backend, readstream_stream_factory, 64)
    assert readstream_backend.stats.reads < 64

@pytest.mark.readstream_invariant("pause", "MAY")
@pytest.mark.readstream_requires("pause-resume")
def test_pause(readstream_impl):
    pass

@pytest.mark.readstream_invariant("known", "MUST")
def test_known_failure(readstream_seed):
    assert False

def test_plain():
    pass
"""


# Subprocess runs start pytest afresh: leave out the plugins these tests do not need and
# assertion rewriting (which pytest applies to every module of this distribution) to keep
# process start-up short. Both runs compared use the same flags.
_LEAN = ("-p", "no:Faker", "-p", "no:benchmark", "--assert=plain")


def _run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> pytest.RunResult:
    pytester.makefile(".txt", known="test_suite.py::test_known_failure  # a known bug\n")
    pytester.makepyfile(test_suite=SUITE)
    if subprocess:
        return pytester.runpytest_subprocess(
            *_LEAN, "-p", "no:cacheprovider", "--readstream-xfails=known.txt", *args
        )
    return pytester.runpytest("-p", "no:cacheprovider", "--readstream-xfails=known.txt", *args)


def test_report_on_a_run_with_failures(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--readstream-report=report.json", "--readstream-seed=77")
    result.assert_outcomes(passed=5, failed=1, skipped=1, xfailed=1)
    report = read_report(pytester.path / "report.json")
    assert (report["schema"], report["schema_version"]) == (SCHEMA, SCHEMA_VERSION)
    assert report["seed"] == 77 and report["exitstatus"] == 1 and report["interrupted"] is False
    assert report["implementation"]["spec"] == "reference"
    assert "stream-api" in report["implementation"]["capabilities"]
    assert report["summary"] == {
        "passed": 5,
        "failed": 1,
        "error": 0,
        "skipped": 1,
        "xfailed": 1,
        "xpassed": 0,
        "incomplete": 0,
        "total": 8,
    }
    assert report["families"]["combining"]["MUST"]["passed"] == 4
    assert report["families"]["combining"]["SHOULD"]["failed"] == 1
    assert report["families"]["pause"]["MAY"]["skipped"] == 1
    assert report["missing_capabilities"] == {"pause-resume": 1}
    tests = {t["nodeid"]: t for t in report["tests"]}
    assert list(tests) == sorted(tests)
    failed = tests["test_suite.py::test_combines_even_with_limit_one"]
    assert failed["outcome"] == "failed" and failed["message"] == "AssertionError: assert 64 < 64"
    assert failed["scenario"]["settings"] == {"io_combine_limit": 1}
    assert failed["scenario"]["rerun"].endswith("--readstream-seed=77 --readstream-impl=reference")
    assert failed["scenario"]["relations"][0]["name"] == "small"
    assert failed["invariant"] == {"family": "combining", "tier": "SHOULD", "kind": "implementation"}
    assert tests["test_suite.py::test_known_failure"]["outcome"] == "xfailed"
    assert "a known bug" in tests["test_suite.py::test_known_failure"]["message"]
    assert tests["test_suite.py::test_pause"]["missing_capabilities"] == ["pause-resume"]
    assert tests["test_suite.py::test_plain"]["implementation"] is None  # not a readstream test
    big = tests["test_suite.py::test_scan[1000]"]["stats"]
    assert big[0]["read_blocks"] == 1000 and big[0]["reads"] < 1000
    assert big[1]["blocks_per_read"] == 1000 / big[0]["reads"]
    totals = report["stats_totals"]
    assert totals["tests_reporting"] == 4
    assert "blocks_per_read" not in totals  # a ratio summed over tests means nothing
    assert totals["read_blocks"] == 1 + 16 + 100 + 1000
    result.stdout.fnmatch_lines(
        [
            "*= readstream =*",
            "implementation: reference (ReferenceImplementation); capabilities: *",
            "seed: 77 (command line; reproduce with --readstream-seed=77)",
            "invariant family  tier *passed   failed    error  skipped  xfailed  xpassed",
            "combining         MUST *4        0        0        0        0        0",
            "combining         SHOULD *0        1        0        0        0        0",
            "known             MUST *0        0        0        0        1        0",
            "pause             MAY *0        0        0        1        0        0",
            "skipped for missing capabilities: pause-resume (1)",
            f"I/O figures from 4 test(s): reads {totals['reads']}; blocks/read *; hits *; waits *; simulated time * ms",
            f"report written to {pytester.path / 'report.json'}",
        ]
    )


def test_report_on_a_passing_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok(readstream_impl):\n    pass\n")
    # One rule for every output (issue 15 item 7): the directory must exist, nothing is created.
    missing = pytester.runpytest("--readstream-report=sub/dir/r.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(
        [
            "ERROR: --readstream-report * cannot be written: directory *sub/dir' does not exist (create it first)"
        ]
    )
    assert not (pytester.path / "sub").exists()
    (pytester.path / "sub" / "dir").mkdir(parents=True)
    result = pytester.runpytest("--readstream-report=sub/dir/r.json")
    result.assert_outcomes(passed=1)
    report = read_report(pytester.path / "sub" / "dir" / "r.json")
    assert report["exitstatus"] == 0
    assert report["tests"][0]["outcome"] == "passed"
    assert report["tests"][0]["scenario"]["seed"] == report["seed"]
    assert sorted(p.name for p in (pytester.path / "sub" / "dir").iterdir()) == [
        "r.json"
    ]  # no temp file left


def test_report_after_keyboard_interrupt(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_1(readstream_impl):
            pass

        def test_2(readstream_impl):
            raise KeyboardInterrupt

        def test_3(readstream_impl):
            pass
        """
    )
    (pytester.path / "r.json").write_text('{"stale": true}')
    # In-process, so the interrupt must not be re-raised into this session.
    result = pytester.runpytest("--readstream-report=r.json", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = read_report(pytester.path / "r.json")
    assert report["interrupted"] is True and report["exitstatus"] == int(pytest.ExitCode.INTERRUPTED)
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in report["tests"]}
    assert outcomes == {"test_1": "passed", "test_2": "incomplete"}
    assert report["summary"]["incomplete"] == 1


def test_atomic_write_keeps_the_old_file_on_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json_atomically(path, {"version": 1})
    with pytest.raises(TypeError):
        write_json_atomically(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_an_atomic_write_is_readable_as_any_file_the_user_writes(tmp_path: Path) -> None:
    """mkstemp makes the temporary file 0600: the report kept it (a CI artifact only its owner
    could read), where a plain write gives 0666 less the umask."""
    import os
    import stat

    mask = os.umask(0o022)
    try:
        write_json_atomically(tmp_path / "r.json", {"version": 1})
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(mask)
    mode = stat.S_IMODE((tmp_path / "r.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644


def test_unwritable_report_path_is_reported(pytester: pytest.Pytester) -> None:
    # A path that is unwritable at start is a usage error (test_plugin_errors); this one becomes
    # unwritable only during the run, so the failure shows at the end, after the outcomes.
    pytester.mkdir("taken")
    pytester.makepyfile(
        "from pathlib import Path\n\n"
        "def test_ok():\n"
        "    Path('taken').rmdir()\n"
        "    Path('taken').write_text('a file, not a directory')\n"
    )
    result = pytester.runpytest("--readstream-report=taken/r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["could not write --readstream-report *taken/r.json*"])


def test_summary_stays_out_of_unrelated_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    pass\n")
    result = pytester.runpytest()
    result.stdout.no_fnmatch_line("*= readstream =*")


def test_xdist_run_matches_serial_run(pytester: pytest.Pytester) -> None:
    """``-n 2`` with a random seed, then a serial run with that seed: same outcomes, same report."""
    parallel = _run(pytester, "-n", "2", "--readstream-report=parallel.json", subprocess=True)
    b = read_report(pytester.path / "parallel.json")
    seed = b["seed"]
    parallel.stdout.fnmatch_lines(
        [f"readstream: seed {seed} (random; *", "*= readstream =*"], consecutive=False
    )
    serial = _run(pytester, "--readstream-report=serial.json", f"--readstream-seed={seed}", subprocess=True)
    assert serial.parseoutcomes() == parallel.parseoutcomes()
    a = read_report(pytester.path / "serial.json")
    assert len(b["tests"]) == 8
    assert comparable(a) == comparable(b)
    # Every worker drew from the controller's seed: each test's seed derives from it.
    for t in b["tests"]:
        if t["scenario"]:
            assert t["scenario"]["test_seed"] == derive_seed(seed, t["nodeid"])


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_report_counts_deselected_tests_per_tier(pytester: pytest.Pytester, workers: tuple[str, ...]) -> None:
    """A verdict says how many tests of a tier exist: deselected ones are counted, once, also
    when xdist workers did the deselecting."""
    _run(pytester, *workers, "-k", "not test_scan", "--readstream-report=r.json", subprocess=True)
    report = read_report(pytester.path / "r.json")
    assert report["deselected"] == {"MUST": 4}
    assert not [t for t in report["tests"] if "test_scan" in t["nodeid"]]
