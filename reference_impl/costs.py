"""CPU costs of the simulated backends: how much virtual time work takes when it is not I/O.

The device decides how long a read takes; these numbers decide how long everything around it
takes (a buffer lookup, submitting an I/O, copying a page out of the kernel's page cache, a
scan examining a page). They are simulation parameters, not GUCs, and they only move time, never
change which blocks are read. The defaults are rough figures for a current x86 server; the
benchmarks calibrate the ones that matter against the published seed-thread measurements.

The virtual clock counts whole microseconds, so fractional costs accumulate per backend and the
clock moves when a whole microsecond has been spent (``Backend.cpu``).

``io_submit_us`` is CPU the backend spends issuing each I/O (a ``preadv``, an ``io_uring``
submission, a hand-off to a worker); ``stream_buffer_us`` is the stream's own bookkeeping per
buffer it returns (queue management, look-ahead decisions), which is why a fully cached streamed
scan is a little slower than an unstreamed one (the sample-scan thread measured 1–2 %).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from .errors import SettingError

__all__ = ["CpuCosts"]


@dataclass(frozen=True, slots=True)
class CpuCosts:
    """Per-operation CPU time in microseconds (models the backend and I/O worker CPU work)."""

    buffer_hit_us: float = 0.1
    buffer_alloc_us: float = 0.3
    io_submit_us: float = 3.0
    io_complete_us: float = 1.0
    copy_us_per_block: float = 0.8
    worker_dispatch_us: float = 15.0
    worker_wakeup_us: float = 5.0
    fadvise_us: float = 2.0
    wal_flush_us: float = 200.0
    page_process_us: float = 1.0
    tuple_process_us: float = 0.05
    stream_buffer_us: float = 0.1

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 1e7):
                raise SettingError(f"cost {f.name} = {v!r} is out of range: allowed 0..10000000 µs")

    def with_changes(self, **changes: float) -> CpuCosts:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)
