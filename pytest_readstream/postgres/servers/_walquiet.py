"""Keeping the WAL flush pointer still while a measured scan sets hint bits.

With data checksums a hint bit set on a page that has no full-page image since the last
checkpoint is WAL-logged (``MarkBufferDirtyHint`` -> ``XLogSaveBufferForHint``), and the buffer's
LSN becomes that record's end. A BULKREAD ring refuses to reuse such a dirty buffer only while
that WAL is not flushed (``GetVictimBuffer`` in ``bufmgr.c``: ``XLogNeedsFlush`` and then
``StrategyRejectBuffer`` in ``freelist.c``). Any WAL flush during the scan therefore lets the
ring reuse the buffers it holds at that moment, and their blocks leave shared buffers: which
blocks depends on when the flush came. The model (like the spec) never flushes during a scan.

Who flushes WAL while one backend only reads:

* the WAL writer, every ``wal_writer_delay`` or after ``wal_writer_flush_after`` of unflushed
  WAL (``XLogBackgroundFlush`` in ``xlog.c``);
* the background writer when it writes a dirty buffer (``FlushBuffer`` calls ``XLogFlush``);
* a checkpoint (time- or WAL-size triggered);
* the backend itself when its WAL write finishes a segment (``XLogWrite`` fsyncs and advances
  the flush pointer at the end of every WAL segment).

:data:`QUIET_WAL_GUCS` (every cluster the harness runs) takes the background writer's LRU
writes away, makes time-driven checkpoints as rare as PostgreSQL allows and stretches the WAL
writer's period to its maximum; :func:`fresh_wal_segment` (before a measured scan that sets hint
bits) checkpoints, so nothing is left for a background process to write, and starts a new WAL
segment, so a small scan's WAL ends no segment and a large one's ends them at the same points in
every run (such a flush trails the insert position by ``wal_buffers`` and frees no ring buffer).
What no setting can stop is the WAL writer's own timer: :func:`flushed_within_segment` lets
the measurement see whether it fired inside the measured statement.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QUIET_WAL_GUCS", "flushed_within_segment", "fresh_wal_segment"]

#: Server settings of every cluster the harness runs (each at PostgreSQL 18's limit). None of
#: them changes which blocks a scan reads; they only keep background processes from flushing WAL.
QUIET_WAL_GUCS: dict[str, str] = {
    # The WAL writer's longest period (guc_tables.c: 1 .. 10000 ms) ...
    "wal_writer_delay": "10s",
    # ... and no flush for the amount of WAL alone (0 would mean: flush at once).
    "wal_writer_flush_after": "2147483647",
    # The background writer writes no dirty buffers, so it never calls XLogFlush.
    "bgwriter_lru_maxpages": "0",
    # No time-driven checkpoint (the longest timeout); the harness checkpoints itself.
    "checkpoint_timeout": "1d",
}


def fresh_wal_segment(conn: Any) -> None:
    """Checkpoint, then start a new WAL segment (``pg_switch_wal`` flushes up to its end)."""
    conn.execute("CHECKPOINT")
    conn.execute("SELECT pg_switch_wal()")


def flushed_within_segment(conn: Any) -> bool:
    """Whether WAL was flushed past the start of the segment the next record goes to.

    After :func:`fresh_wal_segment` the backend's own WAL writes flush only when they finish a
    segment, which leaves the flush position on a segment boundary at the same point of every
    run. A flush position inside the current segment comes from somebody else (the WAL
    writer's timer); one inside an earlier, finished segment is hidden by that segment's end.
    """
    row = conn.execute(
        "SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn, pg_current_wal_insert_lsn() - '0/0'::pg_lsn, "
        "setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'"
    ).fetchone()
    assert row is not None
    flush, insert, segment = (int(v) for v in row)
    return flush != insert - insert % segment
