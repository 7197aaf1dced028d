"""Calibrating a device profile from one published figure.

The threads say what storage they ran on only loosely ("SSD", "2 ~ 5 ms delays"), so every seed
table gets a *device shape* chosen from what the thread says (an NVMe SSD, a SATA SSD, a
delay-injected device) and one free parameter of that shape, fitted so that the model reproduces
**one** published figure of the table, named in the table's description. Everything else in the
table is then simulated with that device and compared with what was published.

The free parameter is usually a latency (read or write) in microseconds; the figure is usually
the elapsed time of the run whose time that latency dominates. Simulated time is close to affine
in such a parameter (each read or write adds its latency once, as long as the run is not bound
by something else), so :func:`calibrate` solves with the secant method on two runs and refines
until the figure is matched within ``rtol`` (a few runs).

A calibration run may be a *proportional slice* of the published run (``fraction`` of the
relation, target ``fraction ×`` the figure) when the run is a uniform pass over a large relation,
where time per block is the same everywhere; the full-size run is then simulated as one of the
table's rows, and its ratio to the published figure shows how exact the slice was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from reference_impl import DeviceProfile

__all__ = ["Calibration", "calibrate", "scaled_profile"]


@dataclass
class Calibration:
    """The outcome of fitting one device parameter to one published figure."""

    table: str
    figure: str
    published: float
    unit: str
    parameter: str
    value: float
    simulated: float
    runs: int
    fraction: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        frac = "" if self.fraction == 1.0 else f" (on a {self.fraction:g} slice)"
        return (
            f"calibrated {self.parameter} = {self.value:.1f} from '{self.figure}' = "
            f"{self.published:g} {self.unit}{frac}, simulated {self.simulated:g} after {self.runs} runs"
        )


def scaled_profile(base: DeviceProfile, name: str, **changes: Any) -> DeviceProfile:
    """``base`` with a new name and some fields changed (latencies to 0.1 µs, never negative)."""
    fixed = {
        k: (max(0.0, round(v, 1)) if k.endswith("_us") and v is not None else v) for k, v in changes.items()
    }
    return base.with_changes(name=name, **fixed)


def calibrate(
    measure: Callable[[float], float],
    target: float,
    *,
    x0: float,
    x1: float,
    lo: float,
    hi: float,
    rtol: float = 0.003,
    max_runs: int = 6,
) -> tuple[float, float, int]:
    """Find ``x`` in ``[lo, hi]`` with ``measure(x) ≈ target``; returns (x, measure(x), runs).

    ``measure`` must increase with ``x``. Secant steps from ``x0`` and ``x1``, clamped to the
    interval; stops at ``rtol`` relative error or after ``max_runs`` evaluations (then the best
    point so far is returned).
    """
    if not lo <= x0 <= hi or not lo <= x1 <= hi or x0 == x1:
        raise ValueError(f"calibration start points {x0}, {x1} must differ and lie in [{lo}, {hi}]")
    if target <= 0:
        raise ValueError(f"calibration target {target} must be positive")
    points: list[tuple[float, float]] = []

    def evaluate(x: float) -> float:
        y = measure(x)
        points.append((x, y))
        return y

    y0 = evaluate(x0)
    if abs(y0 - target) <= rtol * target:
        return x0, y0, 1
    y1 = evaluate(x1)
    while len(points) < max_runs:
        if abs(y1 - target) <= rtol * target:
            return x1, y1, len(points)
        if y1 == y0:
            break
        x2 = x1 + (target - y1) * (x1 - x0) / (y1 - y0)
        x2 = min(max(x2, lo), hi)
        if x2 == x1:
            break
        x0, y0 = x1, y1
        x1, y1 = x2, evaluate(x2)
    best = min(points, key=lambda p: abs(p[1] - target))
    return best[0], best[1], len(points)
