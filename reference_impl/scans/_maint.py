"""Pieces every maintenance scan shares: the dead-TID store, the ring, cost-based delay, results.

VACUUM's phases and the index AMs' bulk-delete routines talk to each other through three things,
modelled here once:

* the **dead-TID store** (``TidStore`` in ``vacuumlazy.c``): phase I adds the LP_DEAD items of
  each pruned heap page; index bulk delete asks, for each index tuple, whether its heap TID is in
  the store (``vac_tid_reaped``); phase III walks it block by block in ascending order.
  :class:`DeadItems` keeps, per heap block, a sorted array of offsets, and answers membership for
  a whole index page's TIDs at once (TIDs encoded as ``block * 65536 + offset``);
* the **VACUUM ring** (``GetAccessStrategyWithSize(BAS_VACUUM, vacuum_buffer_usage_limit)``, or
  the ``BUFFER_USAGE_LIMIT`` option; 0 means no strategy at all), one ring for every phase;
* the **cost-based delay** (``vacuum_delay_point``): when ``vacuum_cost_delay`` > 0 the buffer
  manager charges page hits, misses and dirtyings to the backend's balance, and each delay point
  sleeps ``delay × balance / limit`` (at most four times the delay) once the balance reaches
  ``vacuum_cost_limit``. Sleeping is virtual time.

:class:`IndexBulkDeleteResult` is what an index AM returns to VACUUM (``genam.h``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..buffers.bufmgr import Backend
from ..buffers.strategy import BAS_VACUUM, BufferAccessStrategy, get_access_strategy_with_size
from ..errors import ModelUsageError

__all__ = [
    "DeadItems",
    "IndexBulkDeleteResult",
    "encode_tids",
    "vacuum_strategy",
    "vacuum_delay_point",
    "begin_vacuum_cost",
    "end_vacuum_cost",
]

_OFFSET_BITS = 16


def encode_tids(blocks: npt.ArrayLike, offsets: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """TIDs as sortable integers: ``block << 16 | offset``."""
    b = np.asarray(blocks, dtype=np.int64)
    o = np.asarray(offsets, dtype=np.int64)
    return (b << _OFFSET_BITS) | o


class DeadItems:
    """The dead-TID store (``TidStore`` + ``VacDeadItemsInfo``) of one VACUUM."""

    __slots__ = ("_blocks", "num_items", "_encoded")

    def __init__(self) -> None:
        self._blocks: dict[int, npt.NDArray[np.int64]] = {}
        self.num_items = 0
        self._encoded: npt.NDArray[np.int64] | None = None

    def add(self, block: int, offsets: npt.ArrayLike) -> None:
        """``dead_items_add``: the LP_DEAD offsets of one heap page (each page added once)."""
        offs = np.unique(np.asarray(offsets, dtype=np.int64))
        if offs.size == 0:
            return
        if block in self._blocks:
            raise ModelUsageError(f"heap block {block} was added to the dead-TID store twice")
        self._blocks[block] = offs
        self.num_items += int(offs.size)
        self._encoded = None

    def reset(self) -> None:
        """``dead_items_reset``: forget everything (after a round of index and heap vacuuming)."""
        self._blocks.clear()
        self.num_items = 0
        self._encoded = None

    def __len__(self) -> int:
        return len(self._blocks)

    def blocks(self) -> list[int]:
        """Heap blocks with dead items, ascending (``TidStoreIterateNext`` order)."""
        return sorted(self._blocks)

    def offsets(self, block: int) -> npt.NDArray[np.int64]:
        return self._blocks[block]

    def _sorted(self) -> npt.NDArray[np.int64]:
        enc = self._encoded
        if enc is None:
            if self._blocks:
                parts = [encode_tids(np.full(o.size, b), o) for b, o in sorted(self._blocks.items())]
                enc = np.concatenate(parts)
            else:
                enc = np.empty(0, dtype=np.int64)
            self._encoded = enc
        return enc

    def contains(self, tids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """``vac_tid_reaped`` for many encoded TIDs at once."""
        enc = self._sorted()
        if enc.size == 0 or tids.size == 0:
            return np.zeros(tids.shape, dtype=bool)
        pos = np.searchsorted(enc, tids)
        pos[pos >= enc.size] = enc.size - 1
        return enc[pos] == tids


@dataclass
class IndexBulkDeleteResult:
    """``IndexBulkDeleteResult`` (``genam.h``): what ``ambulkdelete``/``amvacuumcleanup`` report."""

    num_pages: int = 0
    estimated_count: bool = False
    num_index_tuples: int = 0
    tuples_removed: int = 0
    pages_newly_deleted: int = 0
    pages_deleted: int = 0
    pages_free: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def vacuum_strategy(backend: Backend, buffer_usage_limit: int | None) -> BufferAccessStrategy | None:
    """The command's ring: ``BUFFER_USAGE_LIMIT`` (kB) if given, else ``vacuum_buffer_usage_limit``."""
    settings = backend.settings
    kb = settings.vacuum_buffer_usage_limit if buffer_usage_limit is None else buffer_usage_limit
    if kb != 0 and not 128 <= kb <= 16 * 1024 * 1024:
        raise ModelUsageError(
            f"BUFFER_USAGE_LIMIT = {kb} kB is invalid: allowed 0 (no ring) or 128 kB .. 16 GB"
        )
    return get_access_strategy_with_size(BAS_VACUUM, kb, settings.nbuffers)


def begin_vacuum_cost(backend: Backend) -> None:
    """``VacuumCostActive = (vacuum_cost_delay > 0)``, balance reset (``vacuum()``)."""
    backend.vacuum_cost_active = backend.settings.vacuum_cost_delay > 0
    backend.stats.vacuum_cost_balance = 0


def end_vacuum_cost(backend: Backend) -> None:
    backend.vacuum_cost_active = False
    backend.stats.vacuum_cost_balance = 0


def vacuum_delay_point(backend: Backend) -> int:
    """``vacuum_delay_point``: sleep (virtual µs) if the cost balance reached the limit."""
    backend.check_for_interrupts()
    if not backend.vacuum_cost_active:
        return 0
    settings = backend.settings
    st = backend.stats
    if st.vacuum_cost_balance < settings.vacuum_cost_limit:
        return 0
    delay_ms = settings.vacuum_cost_delay
    msec = delay_ms * st.vacuum_cost_balance / settings.vacuum_cost_limit
    msec = min(msec, delay_ms * 4)
    us = int(msec * 1000)
    backend.clock.advance(us)
    st.vacuum_cost_balance = 0
    return us
