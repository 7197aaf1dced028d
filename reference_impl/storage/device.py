"""Latency devices: when does a read or write submitted at time *t* complete?

A device is described, as FoundationDB's simulated disk is, by a per-request latency, a
bandwidth and a number of requests it services at once:

* up to ``channels`` requests are in service together (the device's internal parallelism /
  useful queue depth); a request that arrives when all channels are busy waits, first come
  first served, for the earliest one to free;
* each request first spends its latency on its channel (seek + rotation on a spinning disk,
  flash read on an SSD, a network round trip on a cloud volume). A spinning disk pays only
  ``sequential_latency_us`` when a request starts where the previous one ended;
* the data then crosses one shared transfer stage at ``bandwidth_mb_s``, in arrival order, so
  many small requests are bound by ``channels / latency`` and large ones by bandwidth.

Completion times are computed when a request is submitted. That is exact here because the
virtual clock never goes backwards, so requests reach the device in time order, and nothing
that arrives later can change an earlier request's fate (first come, first served).

Optional jitter multiplies each latency by a log-normal factor drawn from a numpy ``Generator``
seeded by the caller, so a run with jitter is still reproducible.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np

from ..errors import SettingError

__all__ = ["DeviceProfile", "Device", "DEVICE_PROFILES", "device_profile"]

BLCKSZ = 8192


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Parameters of a simulated block device (models the storage below ``md.c``)."""

    name: str
    read_latency_us: int
    write_latency_us: int
    bandwidth_mb_s: float
    channels: int
    sequential_latency_us: int | None = None
    jitter: float = 0.0
    description: str = ""

    def __post_init__(self) -> None:
        checks = [
            ("read_latency_us", self.read_latency_us, 0, 10_000_000),
            ("write_latency_us", self.write_latency_us, 0, 10_000_000),
            ("bandwidth_mb_s", self.bandwidth_mb_s, 0.001, 1_000_000),
            ("channels", self.channels, 1, 65536),
            ("jitter", self.jitter, 0.0, 5.0),
        ]
        if self.sequential_latency_us is not None:
            checks.append(("sequential_latency_us", self.sequential_latency_us, 0, 10_000_000))
        for name, value, lo, hi in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
                raise SettingError(
                    f"device {self.name!r}: {name} = {value!r} is out of range: allowed {lo}..{hi}"
                )

    def with_changes(self, **changes: object) -> DeviceProfile:
        return replace(self, **changes)  # type: ignore[arg-type]

    def transfer_us(self, nblocks: int) -> float:
        return nblocks * BLCKSZ / (self.bandwidth_mb_s * 1.048576)


DEVICE_PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile(
            "nvme",
            80,
            20,
            3000.0,
            64,
            description="local NVMe SSD: ~80 µs reads, 3 GB/s, deep internal parallelism",
        ),
        DeviceProfile(
            "sata-ssd",
            150,
            60,
            520.0,
            32,
            description="SATA SSD: ~150 µs reads, 520 MB/s",
        ),
        DeviceProfile(
            "cloud-1ms",
            1000,
            1000,
            250.0,
            32,
            description="network block volume (cloud): ~1 ms per request, 250 MB/s",
        ),
        DeviceProfile(
            "hdd",
            8000,
            8000,
            160.0,
            1,
            sequential_latency_us=60,
            description="7200 rpm spinning disk: ~8 ms seek+rotation, 160 MB/s sequential",
        ),
        DeviceProfile(
            "ram",
            2,
            2,
            20000.0,
            1024,
            description="memory-backed device (almost free I/O), for CPU-bound experiments",
        ),
    )
}


def device_profile(name_or_profile: str | DeviceProfile) -> DeviceProfile:
    """Look up a named profile (or pass a profile through)."""
    if isinstance(name_or_profile, DeviceProfile):
        return name_or_profile
    try:
        return DEVICE_PROFILES[name_or_profile]
    except KeyError:
        raise SettingError(
            f"unknown device profile {name_or_profile!r}: allowed {', '.join(DEVICE_PROFILES)}"
        ) from None


@dataclass
class DeviceStats:
    reads: int = 0
    read_blocks: int = 0
    writes: int = 0
    write_blocks: int = 0
    busy_until: int = 0
    queue_wait_us: int = 0


class Device:
    """A simulated block device shared by every backend and I/O worker of an instance."""

    def __init__(self, profile: DeviceProfile | str = "nvme", *, seed: int = 0) -> None:
        self.profile = device_profile(profile)
        p = self.profile
        self._channels: list[int] = [0] * p.channels  # heap of times each channel frees
        self._bus_free = 0
        self._last_end: dict[int, int] = {}
        self._us_per_block = BLCKSZ / (p.bandwidth_mb_s * 1.048576)
        self._rng = np.random.default_rng(seed)
        self._jitter_buf: list[float] = []
        self._jitter = p.jitter > 0.0
        self.stats = DeviceStats()
        self.seed = seed

    def _factor(self) -> float:
        if self.profile.jitter <= 0.0:
            return 1.0
        if not self._jitter_buf:
            sigma = self.profile.jitter
            # Log-normal with mean 1: exp(N(-sigma^2/2, sigma)).
            self._jitter_buf = list(np.exp(self._rng.normal(-sigma * sigma / 2.0, sigma, 4096))[::-1])
        return self._jitter_buf.pop()

    def _service(self, at_us: int, latency: float, nblocks: int) -> int:
        channels = self._channels
        free = channels[0]
        start = at_us if free <= at_us else free
        if free > at_us:
            self.stats.queue_wait_us += free - at_us
        lat_done = start + (latency * self._factor() if self._jitter else latency)
        bus = self._bus_free
        xfer_start = lat_done if lat_done >= bus else bus
        done = int(xfer_start + nblocks * self._us_per_block + 0.999999)
        if done <= at_us:
            done = at_us + 1
        self._bus_free = done
        heapq.heapreplace(channels, done)
        if done > self.stats.busy_until:
            self.stats.busy_until = done
        return done

    def read(self, at_us: int, file_key: int, start: int, nblocks: int) -> int:
        """Submit a read of ``nblocks`` blocks at ``start`` of file ``file_key``; completion time."""
        p = self.profile
        latency = p.read_latency_us
        if p.sequential_latency_us is not None and self._last_end.get(file_key) == start:
            latency = p.sequential_latency_us
        self._last_end[file_key] = start + nblocks
        st = self.stats
        st.reads += 1
        st.read_blocks += nblocks
        return self._service(at_us, latency, nblocks)

    def write(self, at_us: int, file_key: int, start: int, nblocks: int = 1) -> int:
        """Submit a write; returns its completion time."""
        p = self.profile
        latency = p.write_latency_us
        if p.sequential_latency_us is not None and self._last_end.get(file_key) == start:
            latency = min(latency, p.sequential_latency_us)
        self._last_end[file_key] = start + nblocks
        self.stats.writes += 1
        self.stats.write_blocks += nblocks
        return self._service(at_us, latency, nblocks)

    def bandwidth_bound_us(self, nblocks: int) -> float:
        """Time to move ``nblocks`` at full bandwidth (a lower bound for any scan)."""
        return nblocks * self._us_per_block

    def __repr__(self) -> str:
        return f"Device({self.profile.name!r}, seed={self.seed})"
