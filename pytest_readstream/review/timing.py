"""Time under the seed threads' latency profiles, base beside patched.

Each seed table (:mod:`..bench.tables`) was published on a device the project fits; the
distinct devices are the *latency profiles* (a local NVMe of the sampling threads, the SATA SSD
of the checksums thread, the delayed NVMe of the streamify threads at three delays). Under
each, the read interposer (:mod:`..postgres.faults.interposer`, :func:`rule_for_device`) makes
every read of the timed relation wait the device's latency plus its bytes at its bandwidth, at
most ``channels`` at once, below PostgreSQL and the page cache.

What is timed is one whole block-range stream through each side's traced ``read_stream.c``
(the driver of :mod:`..postgres.builds.traced_scan`), from a cold shared-buffer pool: the stream
is exactly what the patch can change, and it runs in both modes. When the patched side has a
server of its own (``rebuild``), a ``SELECT count(*)`` sequential scan is timed as well (the
server's compiled stream). Runs alternate between the sides (base, patched, base, ...) so the
machine's load falls on both alike; the figure is the median, the ratio patched / base.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = ["LatencyProfile", "TimedSide", "latency_profiles", "run_timing"]

_PAGES = 1000
_TABLE = "review_timed"


@dataclass(frozen=True)
class LatencyProfile:
    """One device of the seed threads: its name, the tables that use it and the device."""

    name: str
    tables: tuple[str, ...]
    device: Any  # reference_impl DeviceProfile

    @property
    def label(self) -> str:
        d = self.device
        return f"{d.name} {d.read_latency_us:g} µs, {d.bandwidth_mb_s:g} MB/s, {d.channels} at once"


def latency_profiles() -> list[LatencyProfile]:
    """The distinct devices of the seed tables, in the tables' order (sequential latency and
    jitter dropped: the interposer charges every request the same, as ``bench seeds --server``)."""
    from ..bench.tables import build_tables

    seen: dict[tuple[float, float, int], LatencyProfile] = {}
    for table in build_tables(1.0):
        dev = replace(table.device(table.calibration.x0), sequential_latency_us=None, jitter=0.0)
        key = (float(dev.read_latency_us), float(dev.bandwidth_mb_s), int(dev.channels))
        if key in seen:
            old = seen[key]
            seen[key] = replace(old, tables=(*old.tables, table.key))
        else:
            seen[key] = LatencyProfile(f"{dev.name}-{dev.read_latency_us:g}us", (table.key,), dev)
    return list(seen.values())


@dataclass
class TimedSide:
    """A side of the timing: the server it runs in and its traced stream's SQL function."""

    label: str
    bindir: Path
    source: Path
    server: Any = None
    db: Any = None
    function: str = ""


def _prepare(sides: Sequence[TimedSide], workdir: Path, say: Callable[[str], None]) -> list[Any]:
    from ..postgres.builds.traced_scan import build_traced_scan, install_traced_scan
    from ..postgres.servers.server import PgServer

    servers: dict[Path, Any] = {}
    for side in sides:
        if side.bindir not in servers:
            sub = workdir / f"timing-{len(servers)}"
            sub.mkdir(parents=True, exist_ok=True)
            server = PgServer.from_bindir(side.bindir, sub, interpose=True)
            db = server.scratch_database(label=f"review_timing_{len(servers)}")
            if not db.relation_exists(_TABLE):
                db.create_wide_table(_TABLE, _PAGES)
            servers[side.bindir] = (server, db)
        side.server, side.db = servers[side.bindir]
        so = build_traced_scan(side.bindir, side.source)
        with side.server.connect(side.db.name) as conn:
            side.function = install_traced_scan(conn, so, name=f"review_traced_{side.label}")
        say(f"timing: {side.label}'s traced stream installed ({side.bindir})")
    return [s for s, _db in servers.values()]


def _time_once(side: TimedSide, profile: LatencyProfile, sql_scan: bool) -> float:
    from ..postgres.builds.traced_scan import run_traced_scan
    from ..postgres.faults.interposer import rule_for_device
    from ..postgres.servers.observe import evict

    injector = side.server.faults
    with side.db.session() as s:
        if sql_scan:
            s.execute(f"SELECT count(*) FROM {_TABLE}")  # catalog and plan, outside the timing
        else:
            run_traced_scan(s, _TABLE, _PAGES, name=side.function)
        evict(s, _TABLE)
        injector.apply(rule_for_device(injector.target(side.db.name, _TABLE), profile.device))
        try:
            t0 = time.perf_counter()
            if sql_scan:
                s.execute(f"SELECT count(*) FROM {_TABLE}")
            else:
                run_traced_scan(s, _TABLE, _PAGES, name=side.function)
            return (time.perf_counter() - t0) * 1000.0
        finally:
            injector.clear()


def run_timing(
    base: TimedSide,
    patched: TimedSide,
    profiles: Sequence[LatencyProfile],
    *,
    workdir: Path,
    repeats: int = 3,
    sql_scan: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Median ms of the traced stream (and, with ``sql_scan``, of a sequential scan) per profile
    and side; JSON-ready rows with the ratio patched / base."""
    say = progress or (lambda _m: None)
    servers = _prepare([base, patched], workdir, say)
    rows: list[dict[str, Any]] = []
    try:
        what = [("traced stream", False)] + ([("seqscan", True)] if sql_scan else [])
        for profile in profiles:
            for name, sql in what:
                runs: dict[str, list[float]] = {"base": [], "patched": []}
                for _ in range(repeats):
                    for side in (base, patched):
                        runs[side.label].append(_time_once(side, profile, sql))
                b, p = statistics.median(runs["base"]), statistics.median(runs["patched"])
                rows.append(
                    {
                        "profile": profile.name,
                        "device": profile.label,
                        "tables": list(profile.tables),
                        "what": name,
                        "base_ms": round(b, 2),
                        "patched_ms": round(p, 2),
                        "base_runs_ms": [round(x, 2) for x in runs["base"]],
                        "patched_runs_ms": [round(x, 2) for x in runs["patched"]],
                        "ratio": round(p / b, 3) if b > 0 else None,
                        # The two sides' runs interleave: the ratio says nothing beyond the noise.
                        "within_noise": max(runs["base"]) >= min(runs["patched"])
                        and max(runs["patched"]) >= min(runs["base"]),
                    }
                )
                say(f"timing: {profile.name} {name}: base {b:.1f} ms, patched {p:.1f} ms")
    finally:
        for server in servers:
            server.close()
    return {"pages": _PAGES, "repeats": repeats, "rows": rows}
