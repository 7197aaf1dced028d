"""Which conformance tests and checks state a per-version expectation, until the suite says so.

The conformance suite is gaining a "contract or implementation" axis (issue 26 item 9): each
MUST test's ``readstream_invariant`` marker will carry ``kind="implementation"`` when it states
what a version merely does, and the harness raises ``ImplementationExpectation`` for such a check.
Until that reaches this checkout, the review reads the same classification from here: the test
functions the suite's branch marks ``kind="implementation"``, and the harness check it raises as
``ImplementationExpectation`` (reset and end returning with started reads never waited for).
Whatever a test or its failure says itself is read first (:func:`.report.kind_of`); this table
is never consulted then, and can go once every test carries its kind.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTATION_CHECKS", "IMPLEMENTATION_TESTS"]

#: ``file::function`` of the tests whose marker is ``kind="implementation"`` on the suite's branch.
IMPLEMENTATION_TESTS = frozenset(
    {
        "test_faults.py::test_io_error_surfaces_when_the_consumer_reaches_its_read",
        "test_faults.py::test_foreign_io_in_progress_is_waited_for_not_repeated",
        "test_faults.py::test_two_blocks_of_one_foreign_io",
        "test_lifecycle.py::test_end_surfaces_errors_of_started_reads_only",
        "test_missed.py::test_a_pin_budget_beyond_int16_is_capped_not_wrapped",
        "test_missed.py::test_read_ahead_advice_of_each_start_is_the_models",
        "test_missed.py::test_a_cached_stream_asks_the_callback_one_block_ahead",
        "test_missed.py::test_an_all_cached_stream_takes_the_fast_path",
        "test_pins.py::test_stream_pins_never_exceed_its_limit",
        "test_scan_facts.py::test_system_repeatable_samples_postgresqls_block_set",
        "test_scan_facts.py::test_bernoulli_repeatable_samples_postgresqls_tuples",
        "test_scan_facts.py::test_system_rows_visits_blocks_in_one_stride_order",
        "test_scan_facts.py::test_vacuum_skips_runs_of_at_least_32_all_visible_pages",
        "test_scan_facts.py::test_vacuum_always_reads_the_last_page",
        "test_scan_facts.py::test_bulkread_ring_only_above_a_quarter_of_shared_buffers",
        "test_scan_facts.py::test_bulkread_ring_has_getaccessstrategys_size",
        "test_scan_facts.py::test_pg_prewarm_buffer_mode_reads_every_block_without_a_ring",
        "test_scan_faults.py::test_eio_during_a_scan_is_an_error_naming_its_read",
        "test_scans.py::test_rescan_that_adds_a_strategy_reads_through_the_ring",
        "test_strategy.py::test_rescan_that_adds_a_strategy_uses_its_ring",
    }
)

#: Words of a harness check's failure that states a per-version expectation (``_harness.py``'s
#: drain check: PostgreSQL 18 to master wait for every started read in reset and end; what callers
#: are promised is only that the pins are gone by the end of the statement).
IMPLEMENTATION_CHECKS = ("started read(s) never waited for",)
