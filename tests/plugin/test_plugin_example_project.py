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
