"""An ``Instance``: one simulated PostgreSQL server with its shared state, and its backends.

Everything backends share lives here, built from one ``Settings`` object: the virtual clock,
the device and page cache, the storage manager with its relations, the shared buffer pool and the
I/O method (with its I/O workers). ``backend()`` starts a backend (a client connection) with its
own private reference counts and statistics; several backends share the pool and the device,
and ``simulate()`` runs functions as concurrent backends on the virtual clock.

This is the object tests, scans, the CLI and benchmarks start from::

    inst = Instance(Settings(io_method="sync"), device="cloud-1ms", seed=7)
    rel = inst.create_relation("t", 10_000)
    be = inst.backend()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .buffers.bufmgr import Backend
from .buffers.bufmgr19 import Backend19
from .buffers.pool import BufferPool, BufferPool19, InflightIO
from .buffers.strategy import (
    BufferAccessStrategy,
    BufferAccessStrategyType,
    get_access_strategy,
    get_access_strategy_with_size,
)
from .clock import Simulation, VirtualClock
from .costs import CpuCosts
from .errors import ModelUsageError, ReadIOError
from .io.methods import make_io_method
from .settings import Settings
from .storage.device import Device, DeviceProfile
from .storage.faults import FaultPlan, ForeignIO
from .storage.pagecache import PageCache
from .storage.relation import FORK_NAMES, ForkNumber, PageContent, Relation
from .storage.smgr import ReadOutcome, Storage

__all__ = ["Instance"]


class Instance:
    """One simulated PostgreSQL server instance (postmaster, shared memory, storage)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        device: str | DeviceProfile | Device = "nvme",
        costs: CpuCosts | None = None,
        seed: int = 0,
        faults: FaultPlan | None = None,
        page_cache_blocks: int = 262144,
        readahead_kb: int = 128,
        record_reads: bool = True,
        debug: bool = False,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.seed = seed
        self.clock = VirtualClock()
        self.costs = costs if costs is not None else CpuCosts()
        self.device = device if isinstance(device, Device) else Device(device, seed=seed)
        self.device.attach_clock(self.clock)  # the horizon of the device's timetables
        self.page_cache = PageCache(self.device, capacity_blocks=page_cache_blocks, readahead_kb=readahead_kb)
        self.storage = Storage(
            self.device,
            direct_io=self.settings.io_direct_data,
            page_cache=self.page_cache,
            faults=faults if faults is not None else FaultPlan(),
        )
        # PostgreSQL 18's buffer manager, or 19's (no free list; the read path of bufmgr19).
        v18 = self.settings.version == "18"
        self.pool: BufferPool = (BufferPool if v18 else BufferPool19)(self.settings, self.clock, self.storage)
        self._backend_class: type[Backend] = Backend if v18 else Backend19
        self.io_method = make_io_method(
            self.settings.io_method, self.storage, self.costs, settings=self.settings
        )
        self.record_reads = record_reads
        self.debug = debug
        self.backends: list[Backend] = []

    # ------------------------------------------------------------------------------ backends
    def backend(self, name: str | None = None, *, record_reads: bool | None = None) -> Backend:
        """Start a new backend (client connection) on this instance."""
        bid = len(self.backends) + 1
        be = self._backend_class(
            self,
            bid,
            name or f"backend{bid}",
            record_reads=self.record_reads if record_reads is None else record_reads,
        )
        self.backends.append(be)
        return be

    def simulate(self, *procs: Callable[[], Any], names: list[str] | None = None) -> list[Any]:
        """Run each function as a concurrent process on the virtual clock; their results."""
        sim = Simulation(self.clock)
        for i, fn in enumerate(procs):
            sim.spawn(fn, name=(names[i] if names else f"proc{i + 1}"))
        return sim.run()

    # ------------------------------------------------------------------------------ relations
    def create_relation(
        self,
        name: str,
        main_blocks: int = 0,
        *,
        forks: dict[ForkNumber, int] | None = None,
        content: PageContent | None = None,
        is_catalog: bool = False,
        temp_of: Backend | None = None,
    ) -> Relation:
        """Create a relation directly in storage (the fixture back door); with ``temp_of``, a
        temporary relation of that backend (``CREATE TEMP TABLE`` in its session), read through
        its local buffers."""
        return self.storage.create_relation(
            name,
            main_blocks,
            forks=forks,
            content=content,
            is_catalog=is_catalog,
            persistence="p" if temp_of is None else "t",
            temp_owner=None if temp_of is None else temp_of.id,
        )

    def relation(self, name: str) -> Relation:
        return self.storage.relation(name)

    # ------------------------------------------------------------------------------ strategies
    def strategy(
        self, btype: BufferAccessStrategyType | str, ring_kb: int | None = None
    ) -> BufferAccessStrategy | None:
        """``GetAccessStrategy`` (or ``GetAccessStrategyWithSize`` when ``ring_kb`` is given)."""
        if isinstance(btype, str):
            try:
                btype = BufferAccessStrategyType(btype)
            except ValueError:
                allowed = ", ".join(t.value for t in BufferAccessStrategyType)
                raise ModelUsageError(f"strategy {btype!r} is invalid: allowed {allowed}") from None
        if ring_kb is None:
            return get_access_strategy(btype, self.settings)
        return get_access_strategy_with_size(btype, ring_kb, self.settings.nbuffers)

    def vacuum_strategy(self) -> BufferAccessStrategy | None:
        """The VACUUM/ANALYZE ring from ``vacuum_buffer_usage_limit`` (none if 0)."""
        return get_access_strategy_with_size(
            BufferAccessStrategyType.VACUUM,
            self.settings.vacuum_buffer_usage_limit,
            self.settings.nbuffers,
        )

    # ------------------------------------------------------------------------------ state
    def prewarm(
        self,
        rel: Relation,
        blocks: range | list[int] | None = None,
        fork: ForkNumber = ForkNumber.MAIN,
    ) -> None:
        """Make blocks resident without counting anything (a back door for cache states)."""
        pool = self.pool
        for b in blocks if blocks is not None else range(rel.nblocks(fork)):
            tag = rel.tag(fork, b)
            if tag in pool.mapping:
                continue
            buf, _ = pool.strategy_get_buffer(None)
            old = pool.tag[buf]
            if old >= 0:
                del pool.mapping[old]
            pool.mapping[tag] = buf
            pool.tag[buf] = tag
            pool.flags[buf] = 1  # BM_VALID
            pool.usage[buf] = 1

    def evict(self, rel: Relation) -> tuple[int, int]:
        """``pg_buffercache_evict_relation``: (evicted, skipped)."""
        return self.pool.evict_relation(rel)

    def start_foreign_io(self, fio: ForeignIO) -> InflightIO:
        """Another backend starts an I/O on some blocks now (the ``004_read_stream.pl`` cases)."""
        rel = self.storage.relation(fio.relation)
        pool = self.pool
        bufs = []
        for block in range(fio.block, fio.block + fio.nblocks):
            tag = rel.tag(fio.fork, block)
            buf = pool.mapping.get(tag)
            if buf is not None:
                if pool.flags[buf] & 1 or pool.buf_io[buf] is not None:
                    raise ModelUsageError(
                        f"block {block} of {rel.name!r} is already valid or being read: a foreign "
                        "I/O can only start on a block that needs reading"
                    )
            else:
                buf, _ = pool.strategy_get_buffer(None)
                old = pool.tag[buf]
                if old >= 0:
                    del pool.mapping[old]
                pool.mapping[tag] = buf
                pool.tag[buf] = tag
                pool.flags[buf] = 0
                pool.usage[buf] = 1
            bufs.append(buf)
        ioh = InflightIO(0, rel, fio.fork, fio.block, bufs, "normal", False, False, False)
        now = self.clock.now + fio.starts_at_us
        done = now + fio.duration_us
        error = ReadIOError(rel.name, FORK_NAMES[fio.fork], fio.block, fio.nblocks) if fio.fails else None
        ioh.outcome = ReadOutcome(done, 0 if fio.fails else fio.nblocks, error)
        ioh.submit_us = now
        ioh.complete_at = done
        pool.register_io(ioh)
        pool.schedule_completion(ioh)
        pool.foreign_reads += 1
        return ioh

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"Instance(v{s.version}, io_method={s.io_method}, shared_buffers={s.shared_buffers}, "
            f"device={self.device.profile.name}, now={self.clock.now} µs)"
        )
