"""The limits a stream and a scan must respect, written from PostgreSQL's definitions.

The harness never asks the model (or the implementation) for a limit it then holds the
implementation to: a wrong ring size or pin budget in the buffer manager would otherwise be
invisible, the yardstick being wrong in the same way. Each function below is one definition of
PostgreSQL 18.6, named after the C function or variable it restates, computed from the GUCs alone
(``Settings`` is read only for its raw values, never for its derived properties). The project's
tests hold these formulas against the model and against a real server.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BLCKSZ_KB",
    "REFCOUNT_ARRAY_ENTRIES",
    "NUM_AUXILIARY_PROCS",
    "NUM_SPECIAL_WORKER_PROCS",
    "INT16_MAX",
    "effective_io_combine_limit",
    "max_backends",
    "max_proportional_pins",
    "additional_pin_limit",
    "bulkread_threshold",
    "native_settings",
    "default_ring_kb",
    "ring_buffers",
    "strategy_pin_limit",
    "stream_max_ios",
    "stream_max_pinned_buffers",
]

BLCKSZ_KB = 8
"""``BLCKSZ / 1024``: a page is 8 kB."""
REFCOUNT_ARRAY_ENTRIES = 8
"""``bufmgr.c``: pins a backend tracks in its private array before overflowing to a hash table."""
NUM_AUXILIARY_PROCS = 6 + 32
"""``proc.h`` (PostgreSQL 18): 6 auxiliary processes plus ``MAX_IO_WORKERS`` (32)."""
NUM_SPECIAL_WORKER_PROCS = 2
"""``proc.h`` (PostgreSQL 18): the autovacuum launcher and the slot-sync worker."""
INT16_MAX = 32767


def effective_io_combine_limit(settings: Any) -> int:
    """``io_combine_limit`` as ``bufmgr.c`` uses it: ``assign_io_combine_limit`` and
    ``assign_io_max_combine_limit`` (``variable.c``) keep it at ``Min(io_max_combine_limit,
    io_combine_limit_guc)``, whichever GUC is set last."""
    return min(int(settings.io_combine_limit), int(settings.io_max_combine_limit))


def max_backends(settings: Any) -> int:
    """``InitializeMaxBackends`` (``postinit.c``)."""
    return (
        int(settings.max_connections)
        + int(settings.autovacuum_worker_slots)
        + int(settings.max_worker_processes)
        + int(settings.max_wal_senders)
        + NUM_SPECIAL_WORKER_PROCS
    )


def max_proportional_pins(settings: Any) -> int:
    """``MaxProportionalPins`` (``InitBufferManagerAccess``), i.e. ``GetPinLimit()``."""
    return int(settings.shared_buffers) // (max_backends(settings) + NUM_AUXILIARY_PROCS)


def additional_pin_limit(settings: Any, overflowed: int) -> int:
    """``GetAdditionalPinLimit()``: the fair share less an *estimate* of the pins held, which is
    ``PrivateRefCountOverflowed + REFCOUNT_ARRAY_ENTRIES`` (the private array counted as full)."""
    estimated = overflowed + REFCOUNT_ARRAY_ENTRIES
    limit = max_proportional_pins(settings)
    return 0 if estimated > limit else limit - estimated


def bulkread_threshold(settings: Any) -> int:
    """``initscan`` (``heapam.c``): a table of more than ``NBuffers / 4`` blocks gets a BULKREAD
    ring (``rs_nblocks > NBuffers / 4``)."""
    return int(settings.shared_buffers) // 4


def default_ring_kb(kind: str, settings: Any, *, eic: int | None = None) -> int:
    """``GetAccessStrategy``'s ring size in kB (``freelist.c``, 18.6).

    BULKREAD: ``Min(Max(256 kB, GetPinLimit() × 8 kB), 256 kB + 8 kB × io_combine_limit ×
    effective_io_concurrency)``; BULKWRITE 16 MB; VACUUM 2 MB.
    """
    if kind == "bulkread":
        concurrency = int(settings.effective_io_concurrency) if eic is None else eic
        ring_kb = 256
        ring_max_kb = max(ring_kb, max_proportional_pins(settings) * BLCKSZ_KB)
        ring_kb += BLCKSZ_KB * effective_io_combine_limit(settings) * concurrency
        return min(ring_kb, ring_max_kb)
    if kind == "bulkwrite":
        return 16 * 1024
    if kind == "vacuum":
        return 2048
    raise ValueError(f"strategy type {kind!r} is invalid: allowed bulkread, bulkwrite, vacuum")


def ring_buffers(kind: str, ring_kb: int | None, settings: Any) -> int:
    """Buffers in the ring ``GetAccessStrategyWithSize`` makes: ``ring_kb / 8``, at most
    ``NBuffers / 8``; ``ring_kb`` None is :func:`default_ring_kb`. 0 means no strategy."""
    kb = default_ring_kb(kind, settings) if ring_kb is None else ring_kb
    n = kb // BLCKSZ_KB
    if n == 0:
        return 0
    return max(1, min(int(settings.shared_buffers) // 8, n))


def strategy_pin_limit(kind: str | None, nring: int, nbuffers: int) -> int:
    """``GetAccessStrategyPinLimit``: ``NBuffers`` without a strategy; a BULKREAD ring whole
    (it rejects dirty buffers itself); half of any other ring."""
    if kind is None:
        return nbuffers
    if kind == "bulkread":
        return nring
    return nring // 2


def _raw_max_ios(settings: Any, rel: Any, flags: int, maintenance_flag: int) -> int:
    if rel.is_catalog:
        raw = settings.effective_io_concurrency
    elif flags & maintenance_flag:
        raw = rel.tablespace_mic if rel.tablespace_mic is not None else settings.maintenance_io_concurrency
    else:
        raw = rel.tablespace_eic if rel.tablespace_eic is not None else settings.effective_io_concurrency
    return min(int(raw), INT16_MAX)


def stream_max_ios(settings: Any, rel: Any, flags: int, maintenance_flag: int) -> int:
    """``max_ios`` of a new stream (``read_stream_begin_impl``; 0 becomes 1, synchronous)."""
    return max(1, _raw_max_ios(settings, rel, flags, maintenance_flag))


def stream_max_pinned_buffers(
    settings: Any, rel: Any, flags: int, maintenance_flag: int, strategy_limit: int
) -> int:
    """``max_pinned_buffers`` of a new stream, in the order ``read_stream_begin_impl`` caps it:
    ``(max_ios + 1) × io_combine_limit``, then ``PG_INT16_MAX − queue_overflow − 1``, the
    strategy's pin limit, ``GetPinLimit()``, and at least 1."""
    icl = effective_io_combine_limit(settings)
    mp = (_raw_max_ios(settings, rel, flags, maintenance_flag) + 1) * icl
    mp = min(mp, INT16_MAX - (icl - 1) - 1)
    mp = min(mp, strategy_limit)
    mp = min(mp, max_proportional_pins(settings))
    return max(1, mp)


def native_settings(impl: Any, **changes: Any) -> Any:
    """``Settings(**changes)`` of the model version that judges ``impl``: a PostgreSQL server's own
    version (its ``model_version``), the ``Settings`` default for other implementations. A test
    that builds its settings itself uses this, so a 19 or master server is held to its own model."""
    from reference_impl import Settings

    version = getattr(impl, "model_version", None)
    base = Settings(version=version) if isinstance(version, str) else Settings()
    return base.replace(**changes)
