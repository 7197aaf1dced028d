"""Buffer access strategies: the small private rings bulk operations recycle (``freelist.c``).

A bulk reader should not flush the whole buffer pool, so PostgreSQL gives it a ring of buffers
(``BufferAccessStrategy``) that it reuses in turn. When the reader needs a new buffer it first
advances to the next ring slot (``GetBufferFromRing``): an empty slot, or one whose buffer is
pinned (by anybody, this backend included) or has a usage count above 1, is not reused, and a
buffer from the free list / clock sweep takes the slot instead (``AddBufferToRing``). The page
in the refused buffer simply stays in the pool: it "escapes" the ring. Hits never touch the
ring.

A strategy also caps how many buffers a read stream may pin (``GetAccessStrategyPinLimit``):
all of a BULKREAD ring (its dirty buffers are rejected rather than written), half of the others.

Ring sizes are those of PostgreSQL 18's ``GetAccessStrategy``: BULKREAD grows with the
effective ``io_combine_limit`` × ``effective_io_concurrency`` but never beyond the backend's pin
limit (nor below 256 kB), BULKWRITE 16 MB, VACUUM 2 MB; ``GetAccessStrategyWithSize`` (VACUUM and
ANALYZE with ``vacuum_buffer_usage_limit``) caps any ring at ``NBuffers / 8``.
"""

from __future__ import annotations

from enum import Enum

from ..errors import SettingError
from ..settings import Settings

__all__ = [
    "BufferAccessStrategyType",
    "BufferAccessStrategy",
    "get_access_strategy",
    "get_access_strategy_with_size",
    "get_access_strategy_pin_limit",
    "io_context_for_strategy",
    "BAS_NORMAL",
    "BAS_BULKREAD",
    "BAS_BULKWRITE",
    "BAS_VACUUM",
]


class BufferAccessStrategyType(Enum):
    """``BufferAccessStrategyType`` (``bufmgr.h``)."""

    NORMAL = "normal"
    BULKREAD = "bulkread"
    BULKWRITE = "bulkwrite"
    VACUUM = "vacuum"


BAS_NORMAL = BufferAccessStrategyType.NORMAL
BAS_BULKREAD = BufferAccessStrategyType.BULKREAD
BAS_BULKWRITE = BufferAccessStrategyType.BULKWRITE
BAS_VACUUM = BufferAccessStrategyType.VACUUM


class BufferAccessStrategy:
    """``BufferAccessStrategyData``: a ring of buffer slots and the current position."""

    __slots__ = ("btype", "context", "nbuffers", "buffers", "current", "freed", "uses_after_free")

    def __init__(self, btype: BufferAccessStrategyType, nbuffers: int) -> None:
        if nbuffers < 1:
            raise SettingError(f"a {btype.value} ring needs at least 1 buffer, got {nbuffers}")
        self.btype = btype
        # IOContextForStrategy, taken once: every read through the ring is counted in it.
        self.context = btype.value
        self.nbuffers = nbuffers
        self.buffers: list[int] = [-1] * nbuffers
        self.current = 0  # palloc0: the first GetBufferFromRing call advances to slot 1
        self.freed = False
        self.uses_after_free = 0

    def pin_limit(self) -> int:
        """``GetAccessStrategyPinLimit`` for this (non-null) strategy."""
        if self.btype is BAS_BULKREAD:
            return self.nbuffers
        return self.nbuffers // 2

    def free(self) -> None:
        """``FreeAccessStrategy``. A freed strategy must not be used again (a dangling pointer
        in C); the model marks it so that use-after-free is caught instead of silently working."""
        self.freed = True

    def ring_members(self) -> list[int]:
        return [b for b in self.buffers if b >= 0]

    def __repr__(self) -> str:
        state = ", freed" if self.freed else ""
        return f"BufferAccessStrategy({self.btype.name}, ring={self.nbuffers}{state})"


def get_access_strategy_with_size(
    btype: BufferAccessStrategyType, ring_size_kb: int, nbuffers_pool: int
) -> BufferAccessStrategy | None:
    """``GetAccessStrategyWithSize``: ``ring_size_kb`` of 0 means no strategy at all."""
    if ring_size_kb < 0:
        raise SettingError(f"ring size {ring_size_kb} kB is invalid: allowed >= 0")
    ring_buffers = ring_size_kb // 8
    if ring_buffers == 0:
        return None
    ring_buffers = min(nbuffers_pool // 8, ring_buffers)
    return BufferAccessStrategy(btype, max(ring_buffers, 1))


def get_access_strategy(
    btype: BufferAccessStrategyType,
    settings: Settings,
    *,
    effective_io_concurrency: int | None = None,
) -> BufferAccessStrategy | None:
    """``GetAccessStrategy``: the default ring of each type (``None`` for BAS_NORMAL)."""
    if btype is BAS_NORMAL:
        return None
    if btype is BAS_BULKREAD:
        eic = (
            settings.effective_io_concurrency
            if effective_io_concurrency is None
            else effective_io_concurrency
        )
        ring_kb = 256
        ring_max_kb = max(ring_kb, settings.pin_limit * 8)
        ring_kb += 8 * settings.effective_io_combine_limit * eic
        ring_kb = min(ring_kb, ring_max_kb)
    elif btype is BAS_BULKWRITE:
        ring_kb = 16 * 1024
    else:
        ring_kb = 2048
    return get_access_strategy_with_size(btype, ring_kb, settings.nbuffers)


def get_access_strategy_pin_limit(strategy: BufferAccessStrategy | None, nbuffers_pool: int) -> int:
    """``GetAccessStrategyPinLimit``: ``NBuffers`` without a strategy."""
    if strategy is None:
        return nbuffers_pool
    return strategy.pin_limit()


def io_context_for_strategy(strategy: BufferAccessStrategy | None) -> str:
    """``IOContextForStrategy``: the ``pg_stat_io`` context reads are counted in."""
    if strategy is None:
        return "normal"
    return strategy.context
