"""The expectations file: strict xfails, skips, reasons, matching and unused-line warnings."""

from __future__ import annotations

import pytest

from pytest_readstream.xfails import entry_matches

TESTS = """
import pytest

def test_known_bug():
    assert False, "still broken"

def test_fixed_meanwhile():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1

def test_known_bug_other():
    pass

class TestGroup:
    def test_one(self):
        assert False
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.mkpydir("suite")
    (pytester.path / "suite" / "test_things.py").write_text(TESTS)
    pytester.makefile(
        ".txt",
        known="""
        # The look-ahead is not written yet.
        suite/test_things.py::test_known_bug
        test_things.py::test_fixed_meanwhile   # fixed in 1.2, forgot to delete
        suite/test_things.py::test_param[2]
        suite/test_things.py::TestGroup
        suite/test_things.py::test_renamed_long_ago
        """,
    )
    return pytester


def test_listed_tests_become_strict_xfails(project: pytest.Pytester) -> None:
    result = project.runpytest("--readstream-xfails=known.txt", "-rxXf", "-W", "default")
    result.assert_outcomes(passed=2, xfailed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "[[]XPASS(strict)[]] fixed in 1.2, forgot to delete (known.txt:3)",
            "XFAIL suite/test_things.py::test_known_bug - The look-ahead is not written yet. (known.txt:2)",
            "XFAIL suite/test_things.py::TestGroup::test_one - The look-ahead is not written yet. (known.txt:5)",
            "FAILED suite/test_things.py::test_fixed_meanwhile - [[]XPASS(strict)[]]*",
        ],
        consecutive=False,
    )
    # test_known_bug_other shares a prefix with test_known_bug but is not listed.
    result.stdout.no_fnmatch_line("*test_known_bug_other*")
    result.stdout.fnmatch_lines(
        [
            "*known.txt:6: ReadstreamXfailsWarning: --readstream-xfails known.txt line 6: "
            "'suite/test_things.py::test_renamed_long_ago' matches no collected test*"
        ]
    )


def test_listed_tests_become_skips(project: pytest.Pytester) -> None:
    result = project.runpytest("--readstream-xfails=known.txt", "--readstream-xfails-as-skips", "-rs")
    result.assert_outcomes(passed=2, skipped=4)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] suite/test_things.py*: known failure (known.txt:2): The look-ahead is not written yet."
        ]
    )


def test_without_the_file_everything_runs(project: pytest.Pytester) -> None:
    project.runpytest().assert_outcomes(passed=3, failed=3)


@pytest.mark.parametrize(
    ("prefix", "nodeid", "expected"),
    [
        ("tests/test_a.py::test_x", "tests/test_a.py::test_x", True),
        ("tests/test_a.py::test_x", "tests/test_a.py::test_x[1-2]", True),
        ("tests/test_a.py::test_x", "tests/test_a.py::test_xy", False),
        ("test_a.py::test_x", "conformance/tests/test_a.py::test_x", True),
        ("tests/test_a.py", "tests/test_a.py::Cls::test_x", True),
        ("tests/", "tests/test_a.py::test_x", True),
        ("test_x", "tests/test_a.py::test_x", False),
        ("a.py::test_x", "tests/test_a.py::test_x", False),
        ("tests/test_a.py::Cls", "tests/test_a.py::Cls::test_x", True),
        ("tests/test_a.py::test_x[1", "tests/test_a.py::test_x[1-2]", False),
        ("tests/test_a.py::test_x[", "tests/test_a.py::test_x[1-2]", True),
    ],
)
def test_entry_matching(prefix: str, nodeid: str, expected: bool) -> None:
    assert entry_matches(prefix, nodeid) is expected


def test_entries_match_a_module_collected_from_outside_the_rootdir(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # ``pytest --pyargs package.module`` from elsewhere gives ids without the path ("::test_x");
    # the file's name must still match, as it does when the whole package is collected.
    site = tmp_path_factory.mktemp("site")
    (site / "pkgx").mkdir()
    (site / "pkgx" / "__init__.py").write_text("")
    (site / "pkgx" / "test_mod.py").write_text(TESTS)
    pytester.syspathinsert(site)
    pytester.makeini("[pytest]\n")
    pytester.makefile(".txt", known="test_mod.py::test_known_bug   # listed by file name\n")
    result = pytester.runpytest("--pyargs", "pkgx.test_mod", "--readstream-xfails=known.txt", "-rx")
    result.assert_outcomes(passed=3, xfailed=1, failed=2)
    result.stdout.fnmatch_lines(["XFAIL *test_known_bug - listed by file name (known.txt:1)"])


def test_a_shipped_expectations_file_is_found_by_name(pytester: pytest.Pytester) -> None:
    """Issue 15 item 9: the file the README cites ships with the plugin and is named, not pathed."""
    pytester.mkpydir("suite")
    (pytester.path / "suite" / "test_scans.py").write_text(
        "def test_rescan_that_adds_a_strategy_reads_through_the_ring():\n    assert False\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--readstream-xfails=postgresql-18", "-rx")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*heap_rescan keeps the stale no-strategy (18.6)*"])
    # A file of that name where pytest runs is the user's own and wins.
    pytester.makefile(".txt", **{"postgresql-18": "# none known here\n"})
    mine = pytester.runpytest("-p", "no:cacheprovider", "--readstream-xfails=postgresql-18.txt")
    mine.assert_outcomes(failed=1)


def test_shipped_expectations_files_are_package_data() -> None:
    """Every shipped file matches the wheel's package-data patterns (pyproject.toml)."""
    import fnmatch
    import tomllib
    from pathlib import Path

    from pytest_readstream.xfails import SHIPPED_DIR

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data.get("pytest_readstream", [])
    files = sorted(SHIPPED_DIR.glob("*.txt"))
    assert sorted(f.name for f in files) == [
        "postgresql-18-faults.txt",
        "postgresql-18.txt",
        "postgresql-19.txt",
        "postgresql-20devel.txt",
    ]
    for f in files:
        rel = f.relative_to(SHIPPED_DIR.parent).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), (rel, patterns)
