"""Backward heap scans and the scroll-cursor driver (``heapam.c``, ``pquery.c``).

The read counts, pins and resident pages of these cursors were measured on PostgreSQL 18.6 (the
``cursor-*`` oracle scenarios hold them exactly); here the rules behind them are checked one by
one in the model, and the rows each command returns against a plain list model of a cursor.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import Instance, ModelUsageError, Settings
from reference_impl.relations import RelationSpec, build_relation
from reference_impl.scans import run_scan
from reference_impl.scans.cursor import parse_commands

_ROWS_PER_PAGE = 3


def _cursor(
    commands: str,
    nblocks: int = 2000,
    io_method: str = "sync",
    variant: str = "streamed",
    tuples_per_page: Any = _ROWS_PER_PAGE,
    seed: int = 1,
) -> Any:
    inst = Instance(Settings(io_method=io_method, synchronize_seqscans=False), device="nvme")
    spec = RelationSpec(
        name="t", nblocks=nblocks, tuples_per_page=tuples_per_page, tuple_width=100, seed=seed
    )
    srel = build_relation(inst, spec)
    res = run_scan("cursor", inst.backend(), srel.heap, variant=variant, commands=commands)
    assert res.error is None, res.error
    assert res.pinned_after == 0
    return inst, srel, res


def test_backward_scan_from_the_end_reads_one_block_at_a_time() -> None:
    # FETCH LAST runs forward to the end first (DoPortalRunFetch), then one row backward; the
    # backward pass starts at the last block and never merges two blocks into one read.
    _, _, res = _cursor("FETCH BACKWARD 5; FETCH LAST; FETCH BACKWARD 600; CLOSE", nblocks=1000)
    assert res.result["rows_per_command"] == [0, 1, 600, 0]
    forward = [(r.start, r.nblocks) for r in res.reads]
    assert sum(n for _, n in forward) == 1000 and forward[0] == (0, 1)
    # The whole table was read forward (2,000 < NBuffers/4: no ring), so backward is all hits.
    assert res.read_blocks == 1000
    visited = list(res.blocks)
    assert visited[:1000] == list(range(1000))
    assert visited[1000:1003] == [999, 998, 997]


def test_backward_reads_in_a_ring_are_single_blocks_in_descending_order() -> None:
    # 5,000 blocks > NBuffers / 4: BULKREAD ring, so the backward pass must read again.
    _, _, res = _cursor("FETCH 4500; FETCH BACKWARD 3000; ROLLBACK", nblocks=5000)
    back = [(r.start, r.nblocks) for r in res.reads if r.start < 1500 and r.nblocks == 1 and r.start > 400]
    starts = [s for s, _ in back]
    assert starts == sorted(starts, reverse=True) and len(starts) > 900
    assert res.result["pins_per_command"][-1] == 0


def test_direction_change_resets_the_stream_and_resumes_next_to_the_current_block() -> None:
    # 300 rows forward end on block 99; the look-ahead has read far beyond it. Going backward
    # resets the stream (heap_fetch_next_buffer): the next page is block 98, and the blocks read
    # ahead are dropped from the look-ahead, not re-read.
    _, _, res = _cursor("FETCH 300; FETCH BACKWARD 10; FETCH 20; CLOSE", nblocks=2000)
    visited = list(res.blocks)
    assert visited[:100] == list(range(100))
    assert visited[100:104] == [98, 97, 96, 97]
    assert res.result["rows_per_command"] == [300, 10, 20, 0]
    # Blocks 96..98 were read in the first pass and are still in the pool (2,000 blocks: no
    # ring), so the backward pages are hits: no read starts below block 100 after the first.
    assert [r.start for r in res.reads if r.start < 100] == [0, 1, 3, 7, 15, 31, 47, 63, 79, 95]


def test_pins_between_fetches() -> None:
    # Between commands: the stream's look-ahead and the slot's page. After a direction change
    # the stream was reset (only the current page and the slot), after CLOSE nothing.
    _, _, res = _cursor("FETCH 300; FETCH BACKWARD 200; CLOSE", io_method="worker")
    pins = res.result["pins_per_command"]
    assert pins[0] > 2 and pins[1] == 2 and pins[2] == 0
    _, _, unstreamed = _cursor("FETCH 300; FETCH BACKWARD 200; CLOSE", variant="unstreamed")
    assert unstreamed.result["pins_per_command"] == [1, 1, 0]
    assert unstreamed.result["rows_per_command"] == res.result["rows_per_command"]


def test_rollback_drops_the_pins_without_draining() -> None:
    # Under worker the look-ahead reads already issued still complete; nothing else is read.
    _, _, closed = _cursor("FETCH 300; CLOSE", io_method="worker")
    _, _, rolled = _cursor("FETCH 300; ROLLBACK", io_method="worker")
    assert rolled.result["pins_per_command"][-1] == 0
    assert rolled.read_count <= closed.read_count


def test_absolute_near_the_start_rewinds_the_scan() -> None:
    # FETCH ABSOLUTE 100 after 600 rows: 99 <= 600 / 2, so the portal rewinds (heap_rescan): the
    # stream restarts at distance 1 and block 0 is visited again.
    _, _, res = _cursor("FETCH 600; FETCH ABSOLUTE 100; CLOSE")
    visited = list(res.blocks)
    assert visited[200] == 0 and res.result["rows_per_command"] == [600, 1, 0]
    # FETCH ABSOLUTE 400 from 600 is nearer here than the start: 201 rows back (to row 399 on
    # block 132), then one forward, which changes direction again onto block 133. No rewind.
    _, _, near = _cursor("FETCH 600; FETCH ABSOLUTE 400; CLOSE")
    assert list(near.blocks)[200:] == [*range(198, 131, -1), 133]


class _ListCursor:
    """The SQL standard's cursor over rows 1..n: position 0 is before the first row, n + 1
    after the last; each call returns how many rows the command returns."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.p = 0

    def _on_row(self) -> int:
        return 1 if 1 <= self.p <= self.n else 0

    def _goto(self, target: int) -> int:
        self.p = min(max(target, 0), self.n + 1)
        return self._on_row()

    def fetch(self, direction: str, count: int) -> int:
        n, p = self.n, self.p
        if direction == "absolute":
            return self._goto(0 if count == 0 else count if count > 0 else n + 1 + count)
        if direction == "relative" or count == 0:
            return self._goto(p + count)
        if direction == "forward":
            self.p = p + count if p + count <= n else n + 1
            return max(0, min(p + count, n) - p)
        self.p = p - count if p - count >= 1 else 0
        return max(0, min(count, p - 1))


_DIRECTIONS = st.one_of(
    st.tuples(st.sampled_from(["FORWARD", "BACKWARD"]), st.integers(0, 400)).map(lambda t: f"{t[0]} {t[1]}"),
    st.tuples(st.sampled_from(["ABSOLUTE", "RELATIVE"]), st.integers(-700, 700)).map(
        lambda t: f"{t[0]} {t[1]}"
    ),
    st.sampled_from(["NEXT", "PRIOR", "FIRST", "LAST", "ALL", "FORWARD ALL", "BACKWARD ALL"]),
)


@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(_DIRECTIONS, min_size=1, max_size=7),
    io_method=st.sampled_from(["sync", "worker"]),
    end=st.sampled_from(["CLOSE", "COMMIT", "ROLLBACK"]),
    seed=st.integers(0, 2**31),
)
def test_fetch_returns_the_rows_of_a_list_cursor(
    steps: list[str], io_method: str, end: str, seed: int
) -> None:
    # Variable rows per page (empty pages too): the executor's tuple-level walk must still give
    # exactly the standard's rows, whatever the page boundaries and direction changes.
    script = "; ".join(f"FETCH {s}" for s in steps) + f"; {end}"
    _, srel, res = _cursor(
        script, nblocks=150, io_method=io_method, tuples_per_page=("uniform", 0, 6), seed=seed
    )
    total = res.result["rows_per_command"]
    ref = _ListCursor(_count_rows(srel))
    expected = [ref.fetch(c.direction, c.count) for c in parse_commands(script)[:-1]]
    assert total[:-1] == expected, script
    unstreamed = _cursor(
        script,
        nblocks=150,
        io_method=io_method,
        variant="unstreamed",
        tuples_per_page=("uniform", 0, 6),
        seed=seed,
    )[2]
    assert unstreamed.result["rows_per_command"] == total


def _count_rows(srel: Any) -> int:
    from reference_impl.scans.base import heap_page_live

    return sum(heap_page_live(srel.heap, b) for b in range(srel.heap.nblocks()))


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("FETCH 10", "must end the cursor"),
        ("FETCH 10; CLOSE; FETCH 1; CLOSE", "has CLOSE before the end"),
        ("FETCH SIDEWAYS 3; CLOSE", "is invalid: allowed FETCH or MOVE"),
        ("FETCH ABSOLUTE x; CLOSE", "has count 'X', not an integer"),
        ("SELECT 1; CLOSE", "is invalid"),
        ("; CLOSE", "an empty command"),
    ],
)
def test_bad_scripts_are_one_clear_error(script: str, message: str) -> None:
    inst = Instance(Settings(io_method="sync"), device="nvme")
    srel = build_relation(inst, RelationSpec(name="t", nblocks=10, seed=1))
    with pytest.raises(ModelUsageError, match=message):
        run_scan("cursor", inst.backend(), srel.heap, commands=script)
    assert inst.backend().stats.reads == 0
