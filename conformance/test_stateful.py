"""Stateful tests of the stream API: random scenarios and operations, every invariant after each.

See ``_machine.py`` for the machine and ``_harness.py`` for the checks. A failure prints the
shrunk sequence as ``d = Scenario(...).start(readstream_impl)`` followed by ``d.next()``-style
lines, each with its meaning in a comment: paste them into a test that takes ``readstream_impl``
(``from readstream_conformance import Scenario``) to keep the regression.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import hypothesis
import hypothesis.internal.conjecture.engine  # its shrink bound: _bounded_shrinking
import pytest
from hypothesis import HealthCheck, Phase
from hypothesis.stateful import run_state_machine_as_test

from ._machine import HarnessAbort, machine_for

pytestmark = pytest.mark.readstream_requires("stream-api")

NO_SHRINK_ENV = "READSTREAM_NO_SHRINK"
"""Set (by ``run_kill_matrix``) to skip hypothesis' shrink phase: a kill needs no minimal example."""


@pytest.mark.readstream_invariant("api", "MUST", kind="contract")
def test_stream_api_state_machine(readstream_impl: Any) -> None:
    """Pins within the limit, callback order, reads of produced blocks only (contiguous, within
    ``io_combine_limit`` and one segment), ``max_ios``, the pin budget, reset/end releasing all
    and starting nothing new, strategy swaps, pause/resume: under random operations
    (``read_stream.md`` §9)."""
    current = hypothesis.settings.default
    phases = tuple(current.phases) if current is not None else tuple(Phase)
    if os.environ.get(NO_SHRINK_ENV):
        # The mutant kill matrix only needs to know whether the test fails.
        phases = tuple(p for p in phases if p is not Phase.shrink)
    try:
        with _bounded_shrinking(readstream_impl):
            _run(readstream_impl, current, phases)
    except HarnessAbort as abort:
        # What the harness could not do, reported as such (never a failure, never flaky).
        raise abort.error from None


SERVER_SHRINK_SECONDS = 30
"""How long hypothesis may shrink a failure of a server implementation (its own bound is 300 s):
each replay of a server example is dozens of SQL round trips, so an unbounded shrink takes
minutes on a loaded machine. The example found is printed either way, as the driver's steps."""


@contextlib.contextmanager
def _bounded_shrinking(impl: Any) -> Iterator[None]:
    """Shrinking bounded to :data:`SERVER_SHRINK_SECONDS` for an implementation that runs on a
    server (one that names its server's model version); the model's runs shrink as hypothesis does."""
    engine = sys.modules.get("hypothesis.internal.conjecture.engine")
    bound = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if not isinstance(getattr(impl, "model_version", None), str) or not isinstance(bound, int):
        yield
        return
    engine.MAX_SHRINKING_SECONDS = min(bound, SERVER_SHRINK_SECONDS)  # type: ignore[union-attr]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = bound  # type: ignore[union-attr]


def _run(readstream_impl: Any, current: Any, phases: tuple[Any, ...]) -> None:
    run_state_machine_as_test(
        machine_for(readstream_impl),
        settings=hypothesis.settings(
            current,
            stateful_step_count=40,
            deadline=None,
            report_multiple_bugs=False,
            phases=phases,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
