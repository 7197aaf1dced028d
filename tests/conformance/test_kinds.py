"""Every MUST test says what it states: a contract of PostgreSQL or what a version merely does.

``readstream review`` (and a reader of the JSON report) tells a changed per-version expectation
from a broken invariant by the kind: the test's (``readstream_meta``'s ``invariant.kind``) and,
for a failure, the kind of the check that failed (``readstream_failure_kind``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


def _must_markers() -> list[tuple[str, str, str | None]]:
    out = []
    for path in sorted(CONFORMANCE.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (
                    isinstance(dec, ast.Call)
                    and isinstance(dec.func, ast.Attribute)
                    and dec.func.attr == "readstream_invariant"
                    and len(dec.args) > 1
                    and isinstance(dec.args[1], ast.Constant)
                    and dec.args[1].value == "MUST"
                ):
                    kind = next((k.value for k in dec.keywords if k.arg == "kind"), None)
                    out.append(
                        (
                            f"{path.name}::{node.name}",
                            "MUST",
                            kind.value if isinstance(kind, ast.Constant) else None,
                        )
                    )
    return out


def test_every_must_test_has_a_kind() -> None:
    markers = _must_markers()
    assert len(markers) >= 50
    assert [name for name, _tier, kind in markers if kind not in ("contract", "implementation")] == []


def test_what_the_reset_no_wait_patch_changes_is_an_implementation_expectation() -> None:
    """The in-flight patch read-stream-reset-no-wait lets ``read_stream_reset`` abandon the reads
    in flight: the tests it fails on purpose fail on the driver's check that reset and end waited
    for every started read, and on ``end()`` raising the error of a read it no longer waits for.
    Both are per-version expectations."""
    import readstream_conformance._harness as harness

    src = Path(harness.__file__).read_text()
    check = src.index("started read(s) never waited for")
    assert 'kind="implementation"' in src[check : check + 200]
    kinds = {name: kind for name, _tier, kind in _must_markers()}
    assert kinds["test_lifecycle.py::test_end_surfaces_errors_of_started_reads_only"] == "implementation"
    # What the patch keeps (its resowner waits for the I/O by the end of the statement): contracts.
    assert kinds["test_lifecycle.py::test_abort_without_end_drops_every_pin"] == "contract"
    assert kinds["test_order.py::test_buffers_come_back_in_callback_order_each_once"] == "contract"


def test_the_report_carries_the_kind_of_the_test_and_of_the_failed_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_k="""
        import pytest
        from readstream_conformance._harness import ConformanceViolation, ImplementationExpectation

        @pytest.mark.readstream_invariant("lifecycle", "MUST", kind="contract")
        def test_contract_broken_by_an_implementation_check(readstream_impl):
            raise ImplementationExpectation("reset() returned with 1 started read(s) never waited for")

        @pytest.mark.readstream_invariant("order", "MUST", kind="contract")
        def test_contract_broken(readstream_impl):
            raise ConformanceViolation("block 3 came back twice")

        @pytest.mark.readstream_invariant("reads", "SHOULD")
        def test_should_is_implementation(readstream_impl):
            pass

        @pytest.mark.readstream_invariant("reads", "MUST", kind="promised")
        def test_bad_kind(readstream_impl):
            pass
        """
    )
    report = pytester.path / "r.json"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--readstream-report={report}")
    result.assert_outcomes(passed=1, failed=2, errors=1)
    assert "kind must be one of contract, implementation" in result.stdout.str()
    data = json.loads(report.read_text())
    tests = {t["nodeid"].split("::")[-1]: t for t in data["tests"]}
    assert tests["test_should_is_implementation"]["invariant"]["kind"] == "implementation"
    assert tests["test_contract_broken"]["invariant"]["kind"] == "contract"
    assert tests["test_contract_broken"]["failure_kind"] == "contract"
    broken = tests["test_contract_broken_by_an_implementation_check"]
    assert broken["invariant"]["kind"] == "contract"
    assert broken["failure_kind"] == "implementation"
