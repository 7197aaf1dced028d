"""I/O methods: sync, worker (N I/O workers) and io_uring, over buffered or direct storage."""

from .methods import (
    IOMethod,
    IoUringIOMethod,
    SyncIOMethod,
    WorkerIOMethod,
    make_io_method,
)

__all__ = [
    "IOMethod",
    "SyncIOMethod",
    "WorkerIOMethod",
    "IoUringIOMethod",
    "make_io_method",
]
