"""One scan's I/O timeline: what ``readstream trace`` prints and writes as JSON.

``trace_scan`` builds a fresh instance from settings and a device profile, creates the relation
(a number of blocks, or a named synthetic shape), makes a seeded fraction of it resident, runs one
registered scan streamed or unstreamed, and returns a plain dict::

    {"scan": ..., "variant": ..., "settings": {...}, "device": {...}, "relation": {...},
     "reads": [{"fork": "main", "start": B, "nblocks": K, "submit_us": T0, "complete_us": T1,
                "context": "bulkread", "synchronous": false}, ...],
     "stats": {"reads": R, "blocks_read": N, "hits": H, "max_pinned": P, "elapsed_us": T, ...},
     "distance": [[t_us, distance], ...], "waits": [[start_us, end_us], ...], "result": {...}}

``format_trace`` renders it for a human: one line per read with its size, when it was
submitted, when it completed, and how long the consumer then waited.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .costs import CpuCosts
from .errors import ModelUsageError
from .instance import Instance
from .observer import WaitRecorder
from .settings import Settings
from .storage.device import DeviceProfile, device_profile

__all__ = ["trace_scan", "format_trace", "record_waits"]


def record_waits(backend: Any) -> list[tuple[int, int]]:
    """Record the (start, end) of every wait of ``backend`` for a read; returns the live list.

    Attaches a :class:`~reference_impl.observer.WaitRecorder` (streams and ``read_buffer`` both
    call ``WaitReadBuffers``), so only waits that took virtual time are kept.
    """
    recorder = WaitRecorder()
    backend.add_observer(recorder)
    return recorder.waits


def _make_relation(inst: Instance, nblocks: int | None, shape: str | None, seed: int) -> Any:
    if shape is None:
        if nblocks is None:
            raise ModelUsageError("give the relation size (--nblocks N) or a shape (--relation NAME)")
        if nblocks < 0:
            raise ModelUsageError(f"--nblocks {nblocks} is invalid: allowed >= 0")
        return inst.create_relation("t", nblocks)
    try:
        from . import relations
    except ImportError as exc:  # pragma: no cover - the package ships with the model
        raise ModelUsageError(f"relation shapes are unavailable: {exc}") from None
    if shape not in relations.SHAPES:
        raise ModelUsageError(
            f"unknown relation shape {shape!r}: allowed {', '.join(sorted(relations.SHAPES))}"
        )
    spec = relations.SHAPES[shape]
    changes: dict[str, Any] = {"seed": seed}
    if nblocks is not None:
        changes["nblocks"] = nblocks
    spec = spec.replace(**changes) if hasattr(spec, "replace") else spec
    return relations.build_relation(inst, spec).heap


def trace_scan(
    scan: str = "seqscan",
    *,
    nblocks: int | None = None,
    relation_shape: str | None = None,
    settings: Settings | None = None,
    device: str | DeviceProfile = "nvme",
    costs: CpuCosts | None = None,
    cached_fraction: float = 0.0,
    seed: int = 0,
    streamed: bool = True,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one scan on a fresh instance and return its timeline (see the module docstring)."""
    from .scans import SCANS, run_scan

    if scan not in SCANS:
        raise ModelUsageError(f"unknown scan {scan!r}: available {', '.join(sorted(SCANS))}")
    if not 0.0 <= cached_fraction <= 1.0:
        raise ModelUsageError(f"--cached-fraction {cached_fraction} is invalid: allowed 0.0 .. 1.0")
    settings = settings or Settings()
    profile = device_profile(device)
    inst = Instance(settings, device=profile, costs=costs, seed=seed)
    rel = _make_relation(inst, nblocks, relation_shape, seed)
    n = rel.nblocks()
    if cached_fraction > 0 and n:
        rng = np.random.default_rng(seed)
        k = round(cached_fraction * n)
        cached = np.sort(rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)
        inst.prewarm(rel, [int(b) for b in cached])
    be = inst.backend()
    waits = record_waits(be)
    res = run_scan(scan, be, rel, variant="streamed" if streamed else "unstreamed", **(params or {}))
    reads = [
        {
            "relation": r.relation,
            "fork": r.fork,
            "start": r.start,
            "nblocks": r.nblocks,
            "submit_us": r.submit_us,
            "complete_us": r.complete_us,
            "context": r.context,
            "synchronous": r.synchronous,
            **({"error": r.error} if r.error else {}),
        }
        for r in (res.reads or [])
    ]
    # Unstreamed scans hold the page in hand plus, at most, the tuple slot's page.
    max_pinned = max((s["max_pinned"] for s in res.stream_stats), default=min(2, n))
    return {
        "scan": scan,
        "variant": res.variant,
        "settings": settings.as_dict(),
        "device": {
            "profile": profile.name,
            "read_latency_us": profile.read_latency_us,
            "bandwidth_mb_s": profile.bandwidth_mb_s,
            "channels": profile.channels,
        },
        "relation": {
            "name": rel.name,
            "nblocks": n,
            "shape": relation_shape,
            "cached_fraction": cached_fraction,
        },
        "seed": seed,
        "reads": reads,
        "stats": {
            "reads": res.read_count,
            "blocks_read": res.read_blocks,
            "hits": res.hits,
            "max_pinned": max_pinned,
            "elapsed_us": res.elapsed_us,
            "pinned_after": res.pinned_after,
            "io": res.io,
        },
        "distance": [list(x) for x in res.distance_history or []],
        "waits": [list(w) for w in waits],
        "result": res.result,
        "error": res.error,
    }


def format_trace(trace: dict[str, Any], *, limit: int = 60) -> str:
    """A human-readable timeline of a trace (the first ``limit`` reads, then a summary)."""
    s = trace["stats"]
    lines = [
        f"{trace['scan']} ({trace['variant']}) on {trace['relation']['nblocks']} blocks, "
        f"io_method={trace['settings']['io_method']}, device={trace['device']['profile']}",
        f"{'#':>5} {'blocks':>19} {'n':>4} {'submit µs':>11} {'complete µs':>12} {'µs':>8}  context",
    ]
    for i, r in enumerate(trace["reads"][:limit]):
        span = f"{r['start']}..{r['start'] + r['nblocks'] - 1}"
        lines.append(
            f"{i + 1:>5} {span:>19} {r['nblocks']:>4} {r['submit_us']:>11} {r['complete_us']:>12} "
            f"{r['complete_us'] - r['submit_us']:>8}  {r['context']}{' sync' if r['synchronous'] else ''}"
        )
    if len(trace["reads"]) > limit:
        lines.append(f"  ... {len(trace['reads']) - limit} more reads")
    lines.append(
        f"reads={s['reads']} blocks_read={s['blocks_read']} hits={s['hits']} max_pinned={s['max_pinned']} "
        f"elapsed={s['elapsed_us']} µs pinned_after={s['pinned_after']}"
    )
    if trace.get("error"):
        lines.append(f"error: {trace['error']}")
    return "\n".join(lines)
