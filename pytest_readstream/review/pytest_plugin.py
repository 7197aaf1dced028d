"""``readstream review`` as a pytest run, for CI jobs that collect pytest results (JUnit, TAP).

Load it with ``-p pytest_readstream.review.pytest_plugin`` and give the review's inputs as
options; the session then holds one test, ``readstream-review``, which runs the review and

* passes when the patched side keeps every invariant the base keeps (changed per-version
  expectations, fixed tests, timing and scenario differences are reported, not failures);
* fails with the review's text report when a contract is broken or the patched side's verdict is
  worse than the base's;
* is an error (one line) for bad input, as ``readstream review`` exits 2.

::

    pytest -p pytest_readstream.review.pytest_plugin -p no:cacheprovider \\
        --readstream-review-base=TREE --readstream-review-patch=FILE \\
        [--readstream-review-json=PATH] [--readstream-tap=PATH -p pytest_readstream.tap]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

__all__ = ["ReviewItem"]

_ORDER = {"conforms": 0, "INCOMPLETE": 1, "DOES NOT CONFORM": 2, "ERROR": 3}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("readstream-review", "readstream review as a pytest run")
    group.addoption("--readstream-review-base", metavar="TREE", help="the PostgreSQL tree the patch is for")
    group.addoption("--readstream-review-patch", metavar="FILE", help="the patch (a unified diff)")
    group.addoption(
        "--readstream-review-patched", metavar="TREE", help="instead of a patch: the patched tree"
    )
    group.addoption("--readstream-review-json", metavar="PATH", help="write the review's JSON report here")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("readstream_review_base") is None:
        return
    from .inputs import ReviewInputError, check_inputs

    try:
        config.stash[_INPUTS] = check_inputs(
            config.getoption("readstream_review_base"),
            config.getoption("readstream_review_patch"),
            config.getoption("readstream_review_patched"),
        )
    except ReviewInputError as err:
        raise pytest.UsageError(f"--readstream-review: {err}") from None


_INPUTS = pytest.StashKey[Any]()


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if _INPUTS in config.stash:
        items[:] = [ReviewItem.from_parent(session, name="readstream-review")]


class ReviewItem(pytest.Item):
    """The review of the session's inputs (:func:`.run.run_review`), judged as described above."""

    def runtest(self) -> None:
        from .report import format_text
        from .run import ReviewOptions, prepare, run_review

        inputs = self.config.stash[_INPUTS]
        report = run_review(inputs, ReviewOptions(), prepared=prepare(inputs))
        path = self.config.getoption("readstream_review_json")
        if path:
            Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")
        self.user_properties.append(("readstream_review", report["conclusion"]))
        verdicts = report.get("verdicts") or {}
        worse = _ORDER.get(verdicts.get("patched", {}).get("verdict", "conforms"), 3) > _ORDER.get(
            verdicts.get("base", {}).get("verdict", "conforms"), 3
        )
        if report["changed_tests"]["broken_invariants"] or worse:
            raise ReviewFailed(format_text(report))
        print(format_text(report))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ReviewFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]

    def reportinfo(self) -> tuple[str, int, str]:
        return "readstream-review", 0, "readstream review"


class ReviewFailed(AssertionError):
    """The patched side breaks an invariant the base keeps (the message is the report)."""
