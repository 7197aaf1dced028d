"""Statistics the model keeps, shaped like what a PostgreSQL server lets you observe.

* ``IOContextStats`` is one row of ``pg_stat_io`` for a client backend and object ``relation``
  (``reads`` counts I/Os, ``read_bytes`` their size, ``hits``, ``evictions``, ``reuses``,
  ``writes``, ``extends``), kept per context (``normal``, ``bulkread``, ``bulkwrite``,
  ``vacuum``), exactly where ``bufmgr.c`` counts them (``pgstat_count_io_op``).
* ``RelationStats`` is ``pg_statio_*_tables``' blocks fetched and hit per relation
  (``pgstat_count_buffer_read``/``_hit``): every pin attempt is a fetch, counted when the block is
  pinned (look-ahead time for a stream).
* ``ReadRecord`` is one physical read in the order it was issued, with its submit and
  completion times: what ``strace`` shows on a real server, and what ``readstream trace`` prints.
* ``BackendStats`` gathers them for one backend, with ``pgBufferUsage``-like totals, waits and
  the vacuum cost balance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "IOContextStats",
    "RelationStats",
    "ReadRecord",
    "BackendStats",
    "IO_CONTEXTS",
]

IO_CONTEXTS = ("normal", "bulkread", "bulkwrite", "vacuum")


@dataclass(slots=True)
class IOContextStats:
    """One ``pg_stat_io`` row (client backend, object relation, one context)."""

    reads: int = 0
    read_bytes: int = 0
    hits: int = 0
    evictions: int = 0
    reuses: int = 0
    writes: int = 0
    extends: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True)
class RelationStats:
    """``pg_statio_user_tables``-style counters for one relation (all forks together)."""

    blks_fetched: int = 0
    blks_hit: int = 0

    @property
    def blks_read(self) -> int:
        return self.blks_fetched - self.blks_hit


@dataclass(slots=True)
class ReadRecord:
    """One physical read: ``nblocks`` blocks from ``start`` of ``relation``/``fork``."""

    relation: str
    fork: str
    start: int
    nblocks: int
    submit_us: int
    complete_us: int
    context: str
    backend: int
    synchronous: bool
    error: str | None = None
    ok_blocks: int | None = None  # blocks the read delivered (fewer after a short read); set at completion

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class BackendStats:
    """Everything one backend counted (``pgBufferUsage``, ``pg_stat_io``, per-relation)."""

    io: dict[str, IOContextStats] = field(default_factory=lambda: {c: IOContextStats() for c in IO_CONTEXTS})
    relations: dict[str, RelationStats] = field(default_factory=dict)
    shared_blks_hit: int = 0
    shared_blks_read: int = 0
    shared_blks_written: int = 0
    # Temporary relations (local buffers): pg_stat_io's object "temp relation" (context normal)
    # and pgBufferUsage's local_blks_*.
    io_temp: IOContextStats = field(default_factory=IOContextStats)
    local_blks_hit: int = 0
    local_blks_read: int = 0
    local_blks_written: int = 0
    waits: int = 0
    wait_us: int = 0
    vacuum_cost_balance: int = 0
    read_log: list[ReadRecord] | None = field(default_factory=list)

    def relation(self, name: str) -> RelationStats:
        rs = self.relations.get(name)
        if rs is None:
            rs = self.relations[name] = RelationStats()
        return rs

    @property
    def reads(self) -> int:
        return sum(c.reads for c in self.io.values())

    @property
    def read_bytes(self) -> int:
        return sum(c.read_bytes for c in self.io.values())

    @property
    def hits(self) -> int:
        return sum(c.hits for c in self.io.values())

    def io_dict(self) -> dict[str, dict[str, int]]:
        return {ctx: s.as_dict() for ctx, s in self.io.items()}
