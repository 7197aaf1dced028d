"""The example project reuses the installed plugin's fixtures in its own tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reuse_fixtures"


def test_example_project_passes(pytester: pytest.Pytester) -> None:
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True)
    result = pytester.runpytest("-p", "no:cacheprovider", "--readstream-seed=3")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "readstream: implementation reference (ReferenceImplementation, from ini option readstream_impl)*",
            "I/O figures from 3 test(s): *",
        ],
        consecutive=False,
    )


def test_example_project_against_another_implementation(pytester: pytest.Pytester) -> None:
    """The same tests run against the demo implementation: its streams are correct, only slower.

    The implementation's module sits in the project and is made importable the way a user
    would, with pytest's ``pythonpath`` ini option.
    """
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True)
    shutil.copy(Path(__file__).parent / "no_lookahead.py", pytester.path / "no_lookahead.py")
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-o",
        "pythonpath=.",
        "--readstream-impl=no_lookahead:NoLookaheadImplementation",
    )
    result.assert_outcomes(passed=6)


def test_example_readme_installs_from_the_checkout() -> None:
    """Issue 15 item 9: the package is not published, so the README installs the checkout."""
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0].split() for line in text.splitlines() if "pip install" in line]
    assert commands, "the README says how to install the plugin"
    for cmd in commands:
        target = cmd[-1]
        assert target != "pytest-readstream", cmd  # not on PyPI
        assert (EXAMPLE / target / "pyproject.toml").is_file(), cmd  # the checkout's root
