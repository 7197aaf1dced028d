"""The model's read path produces exactly the stored traces (``tests/model/_identity.py``).

Each stored trace is the full event list of one scan (every ``StartReadBuffers``,
``WaitReadBuffers`` and ``ReleaseBuffer`` with its buffers and virtual times, every physical read,
every statistic and the whole pool at the end) as the model produced it before its read path was
restructured for speed. A failure names the case, its settings and the first differing event.
"""

from __future__ import annotations

import pytest

from tests.model._identity import CASES, Case, first_difference, load, run_case, stored_path, without_events


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trace_is_identical_to_the_stored_one(case: Case) -> None:
    assert stored_path(case).exists(), (
        f"no stored trace for {case.name}: python -m tests.model._identity --write"
    )
    diff = first_difference(load(case), run_case(case))
    assert diff is None, diff + f"\nreproduce: python -m tests.model._identity --only {case.name}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_unobserved_run_gives_the_same_trace(case: Case) -> None:
    """The read path with no observer attached (the path benchmarks and scans take) reads, waits,
    counts and leaves the pool exactly as the observed run did; only the event list is absent."""
    diff = first_difference(without_events(load(case)), run_case(case, observe=False))
    assert diff is None, (
        diff + f"\nreproduce: python -m tests.model._identity --unobserved --only {case.name}"
    )


def test_a_changed_event_is_reported_with_its_place() -> None:
    case = next(c for c in CASES if c.name == "fault-eio")
    expected = load(case)
    got = run_case(case)
    got["events"][5] = ["release", -7, 0]
    diff = first_difference(expected, got)
    assert diff is not None and "event 5" in diff and "fault-eio" in diff and "-7" in diff


def test_the_sample_covers_what_the_read_path_distinguishes() -> None:
    """The stored traces exercise hits inside runs, ring reuse, dirty victims, faults, rescans."""
    totals = {"hits": 0, "reuses": 0, "evictions": 0, "writes": 0}
    forwarded = errors = ledger = 0
    for case in CASES:
        t = load(case)
        for ctx in t["stats"]["io"].values():
            for k in totals:
                totals[k] += ctx[k]
        forwarded += sum(1 for e in t["events"] if e[0] == "start" and 0 < e[4] < e[2])
        errors += t["result"].get("error_type") is not None
        ledger += len(t["ledger"])
    assert all(v > 100 for v in totals.values()), totals
    assert forwarded > 100 and errors >= 1 and ledger >= 5
