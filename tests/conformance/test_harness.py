"""The conformance harness itself: its oracle, its checks and the reproductions it prints."""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck
from hypothesis.stateful import run_state_machine_as_test
from readstream_conformance import ConformanceViolation, Scenario
from readstream_conformance._harness import expected_max_ios, expected_max_pinned, make_strategy
from readstream_conformance._machine import machine_for

from pytest_readstream.implementations import ReferenceImplementation
from pytest_readstream.mutants import MUTANTS
from reference_impl import READ_STREAM_MAINTENANCE, Instance, Settings


@pytest.mark.parametrize(
    ("settings", "strategy", "flags", "expected"),
    [
        # read_stream.md §2's table.
        ({}, None, 0, 94),
        ({}, ("bulkread", None), 0, 94),
        ({}, ("vacuum", 2048), READ_STREAM_MAINTENANCE, 94),
        ({"effective_io_concurrency": 0}, None, 0, 16),
        ({"effective_io_concurrency": 1, "shared_buffers": 131072}, None, 0, 32),
        ({"shared_buffers": 16}, None, 0, 1),
        ({}, ("vacuum", 8), 0, 1),
    ],
)
def test_expected_max_pinned_follows_the_spec_table(
    settings: dict[str, Any], strategy: Any, flags: int, expected: int
) -> None:
    inst = Instance(Settings(**settings))
    rel = inst.create_relation("t", 10)
    strat = make_strategy(inst, strategy)
    assert expected_max_pinned(inst.settings, rel, flags, strat) == expected
    assert expected_max_ios(inst.settings, rel, flags) == max(1, inst.settings.effective_io_concurrency)


def test_scenario_code_rebuilds_the_same_scenario() -> None:
    scenario = Scenario(
        settings=Settings(io_combine_limit=4, io_method="sync"),
        relation_blocks=30,
        blocks=[1, 2, 9],
        cached=[2],
        strategy=("vacuum", 64),
    )
    namespace: dict[str, Any] = {"Scenario": Scenario, "readstream_impl": ReferenceImplementation()}
    exec(scenario.code(), namespace)
    d = namespace["d"]
    assert d.settings.io_combine_limit == 4 and d.settings.io_method == "sync"
    assert d.consume() == [1, 2, 9]
    d.end()


def test_violation_message_carries_pasteable_steps() -> None:
    impl = MUTANTS["end-leaks-queued-pins"]()
    d = Scenario(relation_blocks=50, blocks=list(range(50))).start(impl)
    d.consume(3)
    with pytest.raises(ConformanceViolation) as info:
        d.end()
    text = str(info.value)
    assert "end() left" in text and "pin" in text
    assert "d = Scenario(relation_blocks=50" in text
    assert text.count("d.next()") == 3 and "d.end()" in text
    assert "# block 0 returned" in text


def test_a_second_forced_pin_limit_replaces_the_first() -> None:
    """The stream asks the last answer chosen: the driver once kept the first forced answer
    (3) while judging the stream by the second (0), so the reference itself failed the state
    machine (hypothesis found these steps, seed 1998470984)."""
    d = Scenario(
        settings={"io_combine_limit": 2, "io_max_combine_limit": 2, "effective_io_concurrency": 0},
        relation_blocks=6,
        blocks=[5, 0, 1],
    ).start(ReferenceImplementation())
    d.evict()
    d.force_additional_pin_limit(3)
    d.force_additional_pin_limit(0)
    d.next()
    assert d.returned == [5]
    # With nothing pinned and no pin to spare, the stream reads one block at a time.
    assert [(e.blocknum, e.requested) for e in d.observer.starts] == [(5, 1), (0, 1)]
    d.force_additional_pin_limit(3)
    assert d.consume() == [0, 1]
    d.end()
    assert [e.additional_limit for e in d.observer.starts] == [0, 0, 3]


@pytest.mark.parametrize(
    ("mutant", "scenario", "message"),
    [
        (
            "ignores-additional-pin-limit",
            Scenario(
                settings={"io_combine_limit": 128, "io_max_combine_limit": 128},
                relation_blocks=300,
                blocks=list(range(300)),
            ),
            "GetAdditionalPinLimit",
        ),
        (
            "read-crosses-segment",
            Scenario(relation_blocks=131100, blocks=list(range(131060, 131091)), flags=4),
            "crosses a segment boundary",
        ),
        (
            "fast-path-not-left-after-miss",
            Scenario(relation_blocks=30, blocks=list(range(30)), cached=[b for b in range(30) if b != 12]),
            "not valid",
        ),
        (
            "unget-block-lost",
            Scenario(
                settings={"effective_io_concurrency": 1}, relation_blocks=100, blocks=[5, 50, 7, 80, 3, 60]
            ),
            "callback's order requires",
        ),
    ],
)
def test_harness_names_the_broken_invariant(mutant: str, scenario: Scenario, message: str) -> None:
    d = scenario.start(MUTANTS[mutant]())
    with pytest.raises(ConformanceViolation, match=message):
        d.consume()
        d.end()


def test_reference_passes_the_same_scenarios() -> None:
    impl = ReferenceImplementation()
    for scenario in (
        Scenario(
            settings={"io_combine_limit": 128, "io_max_combine_limit": 128},
            relation_blocks=300,
            blocks=list(range(300)),
        ),
        Scenario(relation_blocks=131100, blocks=list(range(131060, 131091)), flags=4),
        Scenario(settings={"effective_io_concurrency": 1}, relation_blocks=100, blocks=[5, 50, 7, 80, 3, 60]),
    ):
        d = scenario.start(impl)
        assert d.consume() == scenario.blocks
        d.end()


def test_state_machine_failure_carries_pasteable_steps() -> None:
    """Driving the machine by hand into a mutant's bug: the violation it raises holds the
    scenario and each step as Python, with the meaning of each step in a comment."""
    machine = machine_for(MUTANTS["unget-block-lost"]())()
    scenario = Scenario(
        settings={"effective_io_concurrency": 1}, relation_blocks=100, blocks=[5, 50, 7, 80, 3, 60]
    )
    machine.begin(scenario)
    with pytest.raises(ConformanceViolation) as info:
        machine.next_buffers(count=10, keep=True)
    text = str(info.value)
    assert "d = Scenario(settings={'effective_io_concurrency': 1}, relation_blocks=100" in text
    assert "d.next(keep=True)" in text and "# block 5 returned, the consumer keeps its pin" in text
    namespace: dict[str, Any] = {"Scenario": Scenario, "readstream_impl": MUTANTS["unget-block-lost"]()}
    replay = text.split("Steps (paste into a regression test):\n", 1)[1]
    with pytest.raises(ConformanceViolation):
        exec(replay, namespace)


def test_state_machine_runs_clean_on_the_reference() -> None:
    run_state_machine_as_test(
        machine_for(ReferenceImplementation()),
        settings=hypothesis.settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
