"""A harness error is never a failure, also inside hypothesis (issue 26, class 11).

Under load a psycopg ``ConnectionTimeout`` during a settings reload once failed the stream state
machine on a clean tree, and hypothesis, replaying the example on a quieter machine, reported it
as a ``FlakyFailure``. The server turns a connection timeout into ``PgConnectionTimeout`` (a
harness error), the machine carries a harness error out of hypothesis at once (``HarnessAbort``),
and the report finds a harness error inside an exception group too.
"""

from __future__ import annotations

from typing import Any

import pytest
from readstream_conformance._harness import Scenario
from readstream_conformance._machine import HarnessAbort, machine_for

from pytest_readstream.harness_errors import harness_error_line
from pytest_readstream.postgres.errors import PgConnectionTimeout
from pytest_readstream.reference import ReferenceImplementation


def _timeout() -> PgConnectionTimeout:
    return PgConnectionTimeout("opening a probe session", TimeoutError("connection timeout expired"))


def test_a_connection_timeout_is_a_harness_error_alone_and_in_a_group() -> None:
    want = (
        "the harness could not reach the PostgreSQL server in time: connecting during opening a probe "
        "session timed out under load: connection timeout expired"
    )
    assert harness_error_line(_timeout()) == want
    group = BaseExceptionGroup("Hypothesis found 1 distinct failures, flaky", [ValueError("x"), _timeout()])
    assert harness_error_line(group) == want
    assert harness_error_line(BaseExceptionGroup("g", [ValueError("x")])) is None


class _TimesOut(ReferenceImplementation):
    """The reference, whose stream begin (the server's reload, a new session) times out."""

    def begin_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise _timeout()


def test_a_harness_error_in_a_rule_leaves_hypothesis_at_once() -> None:
    machine = machine_for(_TimesOut())()
    with pytest.raises(HarnessAbort) as info:
        machine.begin(scenario=Scenario(relation_blocks=8, blocks=[0, 1, 2]))
    assert isinstance(info.value.error, PgConnectionTimeout)
    # A BaseException: hypothesis neither shrinks nor replays it, so it cannot call it flaky.
    assert not isinstance(info.value, Exception)


def test_the_state_machine_test_reports_the_harness_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        impl_timeout="""
        from pytest_readstream.postgres.errors import PgConnectionTimeout
        from pytest_readstream.reference import ReferenceImplementation

        class TimesOut(ReferenceImplementation):
            def begin_stream(self, *args, **kwargs):
                raise PgConnectionTimeout("reloading the settings", TimeoutError("timeout expired"))

        IMPL = TimesOut()
        """
    )
    pytester.syspathinsert()
    report = pytester.path / "r.json"
    result = pytester.runpytest_inprocess(
        "--pyargs",
        "readstream_conformance.test_stateful",
        "--readstream-impl=impl_timeout:IMPL",
        "-p",
        "hypothesis",
        "--hypothesis-profile=ci",
        "-p",
        "no:cacheprovider",
        f"--readstream-report={report}",
    )
    out = result.stdout.str()
    assert "Flaky" not in out, out[-2000:]
    import json

    tests = json.loads(report.read_text())["tests"]
    assert len(tests) == 1
    assert tests[0]["harness_error"].startswith(
        "the harness could not reach the PostgreSQL server in time"
    ), tests
