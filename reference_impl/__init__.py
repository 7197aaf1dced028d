"""reference_impl: an executable model of PostgreSQL's streaming read path.

The model does the same reads, in the same order, with the same pins as PostgreSQL 18 (or, with
``Settings(version="19")`` or ``"20devel"`` / ``"master"``, those versions), on simulated storage and a virtual
clock. Start from an :class:`Instance`::

    from reference_impl import Instance, Settings, begin_stream, block_range_read_stream_cb
    from reference_impl import BlockRangeReadStreamPrivate, INVALID_BUFFER

    inst = Instance(Settings(io_method="worker"), device="cloud-1ms")
    rel = inst.create_relation("t", 1000)
    be = inst.backend()
    stream = begin_stream(be, rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 1000))
    for buf in stream:
        be.release_buffer(buf)
    stream.end()
    print(be.stats.reads, inst.clock.now)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .buffers.bufmgr import Backend, ReadBuffersOperation
from .buffers.pool import INVALID_BUFFER, BufferPool
from .buffers.strategy import (
    BAS_BULKREAD,
    BAS_BULKWRITE,
    BAS_NORMAL,
    BAS_VACUUM,
    BufferAccessStrategy,
    BufferAccessStrategyType,
    get_access_strategy,
    get_access_strategy_pin_limit,
    get_access_strategy_with_size,
)
from .clock import Simulation, VirtualClock
from .costs import CpuCosts
from .errors import (
    ChecksumFailure,
    InvariantViolation,
    ModelUsageError,
    NoUnpinnedBuffers,
    PgError,
    PinLeakError,
    QueryCanceled,
    ReadBeyondEOF,
    ReadIOError,
    ReadStreamModelError,
    SettingError,
)
from .instance import Instance
from .observer import ReadPathObserver, WaitRecorder
from .read_stream import (
    READ_STREAM_DEFAULT,
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_SEQUENTIAL,
    READ_STREAM_USE_BATCHING,
    STREAM_CLASSES,
    BlockRangeReadStreamPrivate,
    IOStats,
    ReadStream,
    ReadStream19,
    ReadStream20devel,
    ReadStreamBase,
    ReadStreamMaster,
    StreamIOStats,
    block_range_read_stream_cb,
)
from .settings import Settings
from .storage import (
    BLCKSZ,
    DEVICE_PROFILES,
    RELSEG_SIZE,
    CancelAt,
    Device,
    DeviceProfile,
    Fault,
    FaultPlan,
    ForeignIO,
    ForkNumber,
    InvalidBlockNumber,
    Relation,
)

__all__ = [
    "Instance",
    "Settings",
    "CpuCosts",
    "VirtualClock",
    "Simulation",
    "Backend",
    "ReadPathObserver",
    "WaitRecorder",
    "BufferPool",
    "ReadBuffersOperation",
    "INVALID_BUFFER",
    "InvalidBlockNumber",
    "BLCKSZ",
    "RELSEG_SIZE",
    "ForkNumber",
    "Relation",
    "Device",
    "DeviceProfile",
    "DEVICE_PROFILES",
    "Fault",
    "FaultPlan",
    "ForeignIO",
    "CancelAt",
    "BufferAccessStrategy",
    "BufferAccessStrategyType",
    "BAS_NORMAL",
    "BAS_BULKREAD",
    "BAS_BULKWRITE",
    "BAS_VACUUM",
    "get_access_strategy",
    "get_access_strategy_with_size",
    "get_access_strategy_pin_limit",
    "ReadStream",
    "ReadStream19",
    "ReadStream20devel",
    "ReadStreamMaster",
    "ReadStreamBase",
    "STREAM_CLASSES",
    "IOStats",
    "StreamIOStats",
    "begin_stream",
    "BlockRangeReadStreamPrivate",
    "block_range_read_stream_cb",
    "READ_STREAM_DEFAULT",
    "READ_STREAM_MAINTENANCE",
    "READ_STREAM_SEQUENTIAL",
    "READ_STREAM_FULL",
    "READ_STREAM_USE_BATCHING",
    "ReadStreamModelError",
    "SettingError",
    "ModelUsageError",
    "InvariantViolation",
    "PgError",
    "ReadIOError",
    "ChecksumFailure",
    "ReadBeyondEOF",
    "NoUnpinnedBuffers",
    "QueryCanceled",
    "PinLeakError",
]


def begin_stream(
    backend: Backend,
    rel: Relation,
    callback: Any,
    private: Any = None,
    *,
    fork: ForkNumber = ForkNumber.MAIN,
    flags: int = READ_STREAM_DEFAULT,
    strategy: BufferAccessStrategy | None = None,
    per_buffer_data: bool = False,
) -> ReadStreamBase:
    """``read_stream_begin_relation``: the stream class of the instance's ``version``
    (:data:`STREAM_CLASSES`: ``"18"``, ``"19"``, ``"20devel"``)."""
    return _begin_stream_of(
        STREAM_CLASSES,
        backend,
        rel,
        callback,
        private,
        fork=fork,
        flags=flags,
        strategy=strategy,
        per_buffer_data=per_buffer_data,
    )


def _begin_stream_of(
    stream_classes: Mapping[str, type[ReadStreamBase]],
    backend: Backend,
    rel: Relation,
    callback: Any,
    private: Any,
    *,
    fork: ForkNumber,
    flags: int,
    strategy: BufferAccessStrategy | None,
    per_buffer_data: bool,
    debug: bool | None = None,
) -> ReadStreamBase:
    """:func:`begin_stream` with its stream classes given, by model version.

    The class is ``stream_classes[backend.settings.version]``, the one rule :func:`begin_stream`
    and the harness's known-bug variants (``pytest_readstream.mutants``, which begin subclasses of
    these with ``debug=False``) share. ``debug=None`` leaves it to the instance's ``debug``.
    """
    cls = stream_classes[backend.settings.version]
    stream = cls(
        backend,
        rel,
        callback,
        private,
        fork=fork,
        flags=flags,
        strategy=strategy,
        per_buffer_data=per_buffer_data,
        debug=debug,
    )
    observer = getattr(backend, "_stream_observer", None)
    if observer is not None:
        observer.stream_begun(backend, stream)
    return stream
