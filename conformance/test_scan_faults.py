"""Storage faults under whole scans: what a ``ScanRequest`` with a ``FaultPlan`` must come to.

These speak only ``ScanRequest`` / ``ScanOutcome``, so they run against the model and against a
real PostgreSQL server whose reads the harness can interpose (capability ``fault-injection``):

* an ``EIO`` on a block is an ``ERROR`` naming the read that covers it (``could not read blocks
  a..b``, ``md_readv_report`` in ``md.c``), and the abort leaves no buffer pinned;
* a short read is completed by a follow-up read: the scan returns what it returns without it;
* a latency spike delays the scan and changes nothing else.

The stream-level fault family (``test_faults.py``) asks more (which consumer call raises, what the
stream drained); it needs ``stream-api``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_readstream.protocol import ScanOutcome, ScanRequest
from reference_impl import Fault, FaultPlan, Settings
from reference_impl.relations.spec import RelationSpec

from ._oracle import native_settings

pytestmark = pytest.mark.readstream_requires("scans", "fault-injection")

_METHODS = ["sync", "worker"]
_NBLOCKS = 120
# The model and the server name the file differently; both name the read's blocks.
_READ_ERROR = re.compile(r"could not read blocks? (\d+)(?:\.\.(\d+))? in file.*: Input/output error")


def _spec() -> RelationSpec:
    return RelationSpec(name="t", nblocks=_NBLOCKS, seed=5)


def _seqscan(impl: Any, settings: Settings, faults: FaultPlan | None) -> ScanOutcome:
    if "streamed" not in impl.scan_variants("seqscan"):
        pytest.skip(f"implementation {impl.name!r} does not offer a streamed seqscan")
    return impl.run_scan(ScanRequest("seqscan", _spec(), settings=settings, faults=faults, seed=3))


@pytest.mark.readstream_invariant("faults", "MUST", kind="implementation")
@pytest.mark.parametrize("method", _METHODS)
@pytest.mark.parametrize("block", [0, 37, _NBLOCKS - 1])
def test_eio_during_a_scan_is_an_error_naming_its_read(readstream_impl: Any, method: str, block: int) -> None:
    plan = FaultPlan([Fault("eio", relation="t", block=block, times=None)])
    out = _seqscan(readstream_impl, native_settings(readstream_impl, io_method=method), plan)
    assert out.error is not None, "the scan of a relation with an unreadable block succeeded"
    match = _READ_ERROR.search(out.error)
    assert match is not None, f"not a read error: {out.error}"
    first = int(match.group(1))
    last = int(match.group(2) or first)
    assert first <= block <= last, f"the error names blocks {first}..{last}, the failed block is {block}"
    assert out.pinned_after == 0, f"{out.pinned_after} buffer(s) still pinned after the abort"
    fired = out.extra.get("faults_fired", [])
    assert fired and all(f["fault"] == "eio" for f in fired)


@pytest.mark.readstream_invariant("faults", "MUST", kind="contract")
@pytest.mark.parametrize("method", _METHODS)
@pytest.mark.parametrize("which", ["early", "later"])
def test_short_read_during_a_scan_is_completed(readstream_impl: Any, method: str, which: str) -> None:
    """A read cut short inside a multi-block read is completed by a follow-up read. The block is
    the second of the first (``early``) or last (``later``) multi-block read of a clean scan when
    the implementation reports its reads, else block 5 or 21 (inside PostgreSQL 18's [3-6] and
    [15-30] at ``io_combine_limit`` 16)."""
    settings = native_settings(readstream_impl, io_method=method, io_combine_limit=16)
    clean = _seqscan(readstream_impl, settings, None)
    multi = [(start, n) for start, n in clean.read_ranges if n > 1]
    if multi:
        start, _ = multi[0] if which == "early" else multi[-1]
        short_at = start + 1
    else:
        short_at = 5 if which == "early" else 21
    plan = FaultPlan([Fault("short_read", relation="t", block=short_at)])
    out = _seqscan(readstream_impl, settings, plan)
    assert out.error is None, out.error
    assert out.result == clean.result
    fired = out.extra.get("faults_fired", [])
    if not fired:
        pytest.skip(f"no read of more than one block covered block {short_at}, so none could come back short")
    assert [f["fault"] for f in fired] == ["short_read"]
    assert fired[0]["read_start"] < short_at < fired[0]["read_start"] + fired[0]["read_nblocks"]
    assert out.reads >= clean.reads + 1, "no follow-up read"
    assert out.pinned_after == 0


@pytest.mark.readstream_invariant("faults", "MUST", kind="contract")
@pytest.mark.parametrize("method", _METHODS)
def test_latency_spike_delays_a_scan_and_changes_nothing_else(readstream_impl: Any, method: str) -> None:
    settings = native_settings(readstream_impl, io_method=method)
    clean = _seqscan(readstream_impl, settings, None)
    plan = FaultPlan([Fault("latency", relation="t", block=3, extra_us=20_000)])
    out = _seqscan(readstream_impl, settings, plan)
    assert out.error is None, out.error
    assert out.result == clean.result and out.reads == clean.reads
    assert [f["fault"] for f in out.extra.get("faults_fired", [])] == ["latency"]
    if out.elapsed_us is not None:
        # The scan cannot finish before the delayed read of block 3 completed.
        assert out.elapsed_us >= 20_000
