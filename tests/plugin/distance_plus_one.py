"""A stream whose look-ahead distance grows by one block per wait instead of doubling.

The slower ramp of issue 18: every MUST invariant still holds (pins, order, reads, lifecycle),
so only the SHOULD tests that compare the read pattern with PostgreSQL's notice it. The plugin's
tests use it to check that ``readstream check`` says "conforms" and still shows the SHOULD
failures. It is the reference with one change to ``read_stream_next_buffer``'s distance update
(``read_stream.c``: ``distance * 2`` after a wait, here ``distance + 1``).
"""

from __future__ import annotations

from typing import Any

from pytest_readstream.mutants import MutantImplementation


class _DistancePlusOne:
    """``read_stream_next_buffer``'s growth step, by one block instead of a doubling."""

    distance: int
    max_pinned_buffers: int

    def _after_wait(self, op: Any, needed_wait: bool) -> None:
        # Called where PostgreSQL doubles the distance; the look-ahead still never exceeds
        # max_pinned_buffers, so the pin invariants hold and only the ramp is slower.
        if self.distance > 0:
            self.distance = min(self.distance + 1, self.max_pinned_buffers)
            self._note_distance()  # type: ignore[attr-defined]


def DistancePlusOneImplementation() -> MutantImplementation:
    """The reference whose streams ramp their look-ahead up by one block per wait."""
    impl = MutantImplementation(
        "distance-plus-one",
        "look-ahead distance grows by one instead of doubling after a wait",
        _DistancePlusOne,
    )
    impl.name = "distance-plus-one"  # a user's implementation, not one of the project's mutants
    return impl
