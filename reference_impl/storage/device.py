"""Latency devices: when does a read or write submitted at time *t* complete?

A device is described, as FoundationDB's simulated disk is, by a per-request latency, a
bandwidth and a number of requests it services at once:

* up to ``channels`` requests are in service together (the device's internal parallelism /
  useful queue depth). A request holds a channel from the moment its service starts until its
  data has crossed the transfer stage; it starts at the earliest time at or after its submission
  from which a channel stays free for its whole service;
* each request first spends its latency on its channel (seek + rotation on a spinning disk,
  flash read on an SSD, a network round trip on a cloud volume). A spinning disk pays only
  ``sequential_latency_us`` when a request starts where the previous one ended;
* the data then crosses one shared transfer stage at ``bandwidth_mb_s``: the transfer takes the
  earliest gap in the stage's timetable, at or after the latency's end, that is long enough. So
  many small requests are bound by ``channels / latency`` and large ones by bandwidth.

Completion times are computed when a request is submitted, and a request's fate never changes
afterwards: whoever is submitted first reserves its channel time and transfer slot. Requests do
*not* reach the device in time order. A backend submits at its clock's ``now`` (plus the
submission cost), but an I/O worker's read is submitted when the backend hands it over, with the
time the worker will start it, which may lie in the future; a synchronous write the backend issues
meanwhile then arrives later with an earlier time. The device therefore schedules by time, not by
arrival: it keeps the busy intervals of the transfer stage (sorted, coalesced) and the service
intervals that occupy channels, and a request only waits for intervals that really overlap its own
service, never for work that starts in its future.

Two cases cost O(log channels), through a heap of the ``channels`` latest service ends: when
fewer than ``channels`` services end after the submission, the request starts at once; and when
every channel is known to be busy from the submission until the earliest of those ends (true from
``_dense_from`` on: each request that waits is booked right behind the end it waited for, so
channels stay busy without a hole, as a first-come-first-served queue keeps them), it starts
there. Requests submitted in time order, the common case, always take one of these, and their
transfer is appended at the end of the timetable when their latency ends after the last booked
transfer starts. With arrivals in time order and latencies that end in that order too (equal
latencies without jitter, or a single channel) the times are exactly those of a single
first-come-first-served queue, the device's former rule. Only a request that finds every channel
busy at its submission but might fit a hole before the heap's earliest end scans the intervals
still alive, which are few: those of the requests in flight.

Intervals that end at or before a *horizon* can never matter again, because every later request
is submitted at or after that horizon and only intervals ending after a request's submission can
delay it. The horizon is the instance's virtual clock (``attach_clock``, done by ``Instance``): the
clock never goes backwards, and every caller submits at or after ``now`` (backends at ``now`` plus
the submission cost, I/O workers at the worker's start, which is at least ``now``, the page cache's
read-ahead and ``posix_fadvise`` at the time of the read or advice that triggers them, smgr adds
only non-negative fault delays). Intervals are pruned in batches (when the list has doubled since
the last pruning) so the cost is amortised O(1) per request, and a request submitted before the
pruning horizon is refused with an error rather than scheduled against a forgotten timetable. A
device without a clock (a standalone one in a test) prunes nothing, so it is exact for any order
of submissions, at the price of memory growing with the number of requests.

Optional jitter multiplies each latency by a log-normal factor drawn from a numpy ``Generator``
seeded by the caller, so a run with jitter is still reproducible.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..errors import ModelUsageError, SettingError

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


class _Clock(Protocol):
    """What the device needs of ``reference_impl.clock.VirtualClock``: the current time."""

    now: int


# Prune the interval lists when they reach this many entries (and then twice what survives).
_PRUNE_MIN = 256


class Device:
    """A simulated block device shared by every backend and I/O worker of an instance.

    Models the storage below ``md.c`` (the kernel's block layer and the disk): ``read`` and
    ``write`` return the virtual time at which a ``preadv``/``pwritev`` of the blocks completes.
    """

    def __init__(
        self, profile: DeviceProfile | str = "nvme", *, seed: int = 0, clock: _Clock | None = None
    ) -> None:
        self.profile = device_profile(profile)
        p = self.profile
        # The ``channels`` latest service ends (a min-heap): the channel rule for a request that
        # starts after every booked service.
        self._channels: list[int] = [0] * p.channels
        # Every service interval [start, end) that may still overlap a future request (unsorted).
        self._svc_start: list[int] = []
        self._svc_end: list[int] = []
        # A time from which the channels-th latest ends bound the busy channels from below: at
        # every t >= _dense_from at least as many channels are busy as heap entries exceed t.
        self._dense_from = 0
        # The transfer stage's busy intervals [start, end): sorted, disjoint, never touching.
        self._bus_start: list[float] = []
        self._bus_end: list[int] = []
        self._clock: _Clock | None = None
        self._horizon = 0  # intervals ending at or before it are forgotten
        self._prune_at = _PRUNE_MIN
        # Where each file's last request ended, for the sequential latency (kept only for a
        # device that has one: nothing else reads it).
        self._last_end: dict[int, int] = {}
        self._read_latency = p.read_latency_us
        self._seq_latency = p.sequential_latency_us
        self._us_per_block = BLCKSZ / (p.bandwidth_mb_s * 1.048576)
        self._rng = np.random.default_rng(seed)
        self._jitter_buf: list[float] = []
        self._jitter = p.jitter > 0.0
        self.stats = DeviceStats()
        self.seed = seed
        if clock is not None:
            self.attach_clock(clock)

    def attach_clock(self, clock: _Clock) -> None:
        """Use ``clock.now`` as the horizon below which no request will be submitted any more."""
        if self._clock is not None and self._clock is not clock:
            raise ModelUsageError(f"{self!r} already follows another clock: a device serves one instance")
        self._clock = clock

    def _factor(self) -> float:
        if self.profile.jitter <= 0.0:
            return 1.0
        if not self._jitter_buf:
            sigma = self.profile.jitter
            # Log-normal with mean 1: exp(N(-sigma^2/2, sigma)).
            self._jitter_buf = list(np.exp(self._rng.normal(-sigma * sigma / 2.0, sigma, 4096))[::-1])
        return self._jitter_buf.pop()

    def _service(self, at_us: int, latency: float, nblocks: int) -> int:
        if at_us < self._horizon:
            raise ModelUsageError(
                f"{self!r}: a request submitted at {at_us} µs is earlier than the clock's "
                f"{self._horizon} µs, when the device last forgot past intervals: allowed >= {self._horizon}"
            )
        if self._jitter:
            latency = latency * self._factor()
        length = nblocks * self._us_per_block
        channels = self._channels
        svc_start = self._svc_start
        free = channels[0]  # the channels-th latest end: every channel is free from it on
        if free <= at_us or at_us >= self._dense_from:
            # Either fewer than ``channels`` services end after at_us (start at once), or every
            # channel is busy from at_us to ``free`` (the invariant of _dense_from): start then.
            if free > at_us:
                start = free
                self.stats.queue_wait_us += free - at_us
            else:
                start = at_us
            lat_done = start + latency
            bus_start = self._bus_start
            if not bus_start or lat_done >= bus_start[-1]:
                # Only the stage's last busy interval can lie at or after lat_done: append.
                bus_end = self._bus_end
                last = bus_end[-1] if bus_end else -1
                xfer = lat_done if lat_done > last else last
                done = int(xfer + length + 0.999999)
                if done <= at_us:
                    done = at_us + 1
                if xfer == last:
                    bus_end[-1] = done
                elif done > xfer:
                    bus_start.append(xfer)
                    bus_end.append(done)
            else:
                done = self._transfer(lat_done, length, at_us)
        else:
            start, done = self._service_out_of_order(at_us, latency, length)
        if done > free:
            heapq.heapreplace(channels, done)
            # The replaced end no longer vouches for [free, start): the invariant holds from start.
            if start > free and start > self._dense_from:
                self._dense_from = start
        svc_start.append(start)
        self._svc_end.append(done)
        if done > self.stats.busy_until:
            self.stats.busy_until = done
        if len(svc_start) >= self._prune_at:
            self._prune()
        return done

    def _fit(self, lat_done: float, length: float, at_us: int) -> tuple[float, int, int]:
        """The earliest transfer at or after ``lat_done`` that fits a gap: (start, end, index).

        ``index`` is the position of the first busy interval after the transfer.
        """
        bus_start = self._bus_start
        bus_end = self._bus_end
        n = len(bus_start)
        i = bisect_right(bus_end, lat_done)
        xfer = lat_done
        while True:
            done = int(xfer + length + 0.999999)
            if done <= at_us:
                done = at_us + 1
            if i == n or bus_start[i] >= done:
                return xfer, done, i
            # Interval i overlaps [xfer, done): try right after it (ends increase strictly).
            xfer = bus_end[i]
            i += 1

    def _transfer(self, lat_done: float, length: float, at_us: int) -> int:
        """Book the transfer of a request whose latency ends at ``lat_done``; its end."""
        xfer, done, i = self._fit(lat_done, length, at_us)
        if done > xfer:
            self._book(xfer, done, i)
        return done

    def _book(self, xfer: float, done: int, i: int) -> None:
        """Insert the busy interval [xfer, done) before index ``i``, merging touching ones."""
        bus_start = self._bus_start
        bus_end = self._bus_end
        left = i > 0 and bus_end[i - 1] == xfer
        right = i < len(bus_start) and bus_start[i] == done
        if left and right:
            bus_end[i - 1] = bus_end[i]
            del bus_start[i]
            del bus_end[i]
        elif left:
            bus_end[i - 1] = done
        elif right:
            bus_start[i] = xfer
        else:
            bus_start.insert(i, xfer)
            bus_end.insert(i, done)

    def _service_out_of_order(self, at_us: int, latency: float, length: float) -> tuple[int, int]:
        """Schedule a request that finds every channel busy at ``at_us`` but may fit a gap
        before the channels-th latest end: search the busy-channel step function; (start, end).
        """
        if self._clock is not None:
            self._prune()
        starts: list[int] = []
        ends: list[int] = []
        for s, e in zip(self._svc_start, self._svc_end):
            if e > at_us:
                starts.append(s if s > at_us else at_us)
                ends.append(e)
        capacity = self.profile.channels
        start = at_us
        # The number of busy channels as a step function: busy[k] on [times[k], times[k + 1]),
        # none before times[0]; the last step (after every end) is 0.
        times: list[int] = []
        busy: list[int] = []
        count = 0
        for t, d in sorted([(s, 1) for s in starts] + [(e, -1) for e in ends]):
            count += d
            if times and times[-1] == t:
                busy[-1] = count
            else:
                times.append(t)
                busy.append(count)
        k = bisect_right(times, start) - 1
        last = len(times)
        while True:
            while k >= 0 and busy[k] >= capacity:
                k += 1
                start = times[k]
            xfer, done, i = self._fit(start + latency, length, at_us)
            j = k + 1
            while j < last and times[j] < done and busy[j] < capacity:
                j += 1
            if j < last and times[j] < done:
                # Every channel is busy from times[j], inside this service: start later.
                k = j
                start = times[j]
                continue
            break
        if done > xfer:
            self._book(xfer, done, i)
        self.stats.queue_wait_us += start - at_us
        return start, done

    def _prune(self) -> None:
        """Forget the intervals that end at or before the clock's ``now`` (see the essay)."""
        clock = self._clock
        if clock is not None and clock.now > self._horizon:
            horizon = self._horizon = clock.now
            svc_start = self._svc_start
            svc_end = self._svc_end
            keep = [i for i, e in enumerate(svc_end) if e > horizon]
            if len(keep) < len(svc_end):
                # In place: _service holds references to these lists.
                svc_start[:] = [svc_start[i] for i in keep]
                svc_end[:] = [svc_end[i] for i in keep]
            k = bisect_right(self._bus_end, horizon)
            if k:
                del self._bus_start[:k]
                del self._bus_end[:k]
        self._prune_at = max(_PRUNE_MIN, 2 * len(self._svc_start))

    def read(self, at_us: int, file_key: int, start: int, nblocks: int) -> int:
        """Submit a read of ``nblocks`` blocks at ``start`` of file ``file_key``; completion time."""
        latency = self._read_latency
        seq_latency = self._seq_latency
        if seq_latency is not None:
            last_end = self._last_end
            if last_end.get(file_key) == start:
                latency = seq_latency
            last_end[file_key] = start + nblocks
        st = self.stats
        st.reads += 1
        st.read_blocks += nblocks
        return self._service(at_us, latency, nblocks)

    def write(self, at_us: int, file_key: int, start: int, nblocks: int = 1) -> int:
        """Submit a write; returns its completion time."""
        latency = self.profile.write_latency_us
        seq_latency = self._seq_latency
        if seq_latency is not None:
            last_end = self._last_end
            if last_end.get(file_key) == start:
                latency = min(latency, seq_latency)
            last_end[file_key] = start + nblocks
        self.stats.writes += 1
        self.stats.write_blocks += nblocks
        return self._service(at_us, latency, nblocks)

    def bandwidth_bound_us(self, nblocks: int) -> float:
        """Time to move ``nblocks`` at full bandwidth (a lower bound for any scan)."""
        return nblocks * self._us_per_block

    def __repr__(self) -> str:
        return f"Device({self.profile.name!r}, seed={self.seed})"
