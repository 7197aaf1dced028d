"""Stateful tests of the stream API: random scenarios and operations, every invariant after each.

See ``_machine.py`` for the machine and ``_harness.py`` for the checks. A failure prints the
shrunk sequence as ``d = Scenario(...).start(readstream_impl)`` followed by ``d.next()``-style
lines, each with its meaning in a comment: paste them into a test that takes ``readstream_impl``
(``from readstream_conformance import Scenario``) to keep the regression.
"""

from __future__ import annotations

import os
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase
from hypothesis.stateful import run_state_machine_as_test

from ._machine import machine_for

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
