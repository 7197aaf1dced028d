"""Synchronized sequential scans: the shared table of scan positions (``syncscan.c``).

Large sequential scans of the same table can share I/O if a new scan starts where a running one
currently is. PostgreSQL keeps, in shared memory, a small LRU list (20 entries) of relation →
last reported block. A scan allowed to synchronize asks for the location when it starts
(``ss_get_location``: the stored block, or 0 for a relation not in the list, or 0 if the stored
block is past the relation's end) and reports its position as it goes (``ss_report_location``),
but only every ``SYNC_SCAN_REPORT_INTERVAL`` = 16 blocks (128 kB).

The reported position is the *look-ahead* position of a streamed scan (the callback runs ahead
of the tuples), and a scan stopped early leaves its last report behind, so the next large scan
of the table starts there: both are observable on a real server and reproduced here.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["SyncScanTable", "SYNC_SCAN_NELEM", "SYNC_SCAN_REPORT_INTERVAL"]

SYNC_SCAN_NELEM = 20
SYNC_SCAN_REPORT_INTERVAL = 16


class SyncScanTable:
    """``scan_locations``: the shared LRU of (relation → block) (``syncscan.c``)."""

    def __init__(self) -> None:
        self._locs: OrderedDict[int, int] = OrderedDict()
        self.reports = 0

    def _set(self, relid: int, block: int) -> None:
        locs = self._locs
        locs[relid] = block
        locs.move_to_end(relid, last=False)
        while len(locs) > SYNC_SCAN_NELEM:
            locs.popitem(last=True)

    def get_location(self, relid: int, nblocks: int) -> int:
        """``ss_get_location``: where a new synchronized scan of ``relid`` should start."""
        start = self._locs.get(relid)
        if start is None:
            self._set(relid, 0)
            return 0
        self._locs.move_to_end(relid, last=False)
        return start if start < nblocks else 0

    def report_location(self, relid: int, block: int) -> None:
        """``ss_report_location``: store ``block`` when it is a multiple of 16."""
        if block % SYNC_SCAN_REPORT_INTERVAL == 0:
            self.reports += 1
            self._set(relid, block)

    def peek(self, relid: int) -> int | None:
        """The stored location (no LRU update), for tests."""
        return self._locs.get(relid)
