"""The review's plots: read sizes over the scan, base beside patched (matplotlib, the ``plot`` extra).

One row per traced compare scenario whose read sequences differ (or the first few deterministic
ones when none do), two panels a row: the base's reads on the left, the patched side's on the right, on the
same axes. Each read is a bar at the block it starts from, as tall as the blocks it reads, so
the ramp-up of the read-ahead, the combined reads and a reset are seen at a glance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_read_sizes"]

_MAX_ROWS = 4


def _chosen(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    traced = [
        r
        for r in comparison.get("scenarios") or []
        if "read_sequence" in (r.get("base") or {}) and "read_sequence" in (r.get("patch") or {})
    ]
    # Judged differences first (a timing-dependent scenario's are not the patch's), else the
    # deterministic scenarios (the @sync twins on 19+), else any.
    differing = [r for r in traced if r.get("differences")]
    steady = [r for r in traced if not r.get("timing_dependent")]
    return (differing or steady or traced)[:_MAX_ROWS]


def plot_read_sizes(comparison: dict[str, Any], path: Path) -> Path | None:
    """Write the read-size plot of ``comparison`` (``readstream compare``'s result) to ``path``;
    ``None`` when no scenario has read sequences (no traced side)."""
    rows = _chosen(comparison)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(rows), 2, figsize=(12, 2.6 * len(rows)), squeeze=False, sharex="row", sharey="row"
    )
    for i, rec in enumerate(rows):
        ymax = 1
        for j, (key, label, colour) in enumerate(
            (("base", "base", "tab:blue"), ("patch", "patched", "tab:orange"))
        ):
            seq = rec[key]["read_sequence"]
            ax = axes[i][j]
            starts = [first for first, _n in seq]
            sizes = [n for _first, n in seq]
            ymax = max(ymax, *sizes) if sizes else ymax
            ax.bar(
                starts,
                sizes,
                width=[max(n, 1) for n in sizes],
                align="edge",
                color=colour,
                edgecolor="black",
                linewidth=0.3,
            )
            ax.set_title(f"{rec['scenario']}: {label}, {len(seq)} reads of {sum(sizes)} blocks", fontsize=9)
            ax.set_xlabel("block", fontsize=8)
            if j == 0:
                ax.set_ylabel("blocks per read", fontsize=8)
            ax.tick_params(labelsize=7)
        for j in range(2):
            axes[i][j].set_ylim(0, ymax + 1)
    fig.suptitle("Read sizes over the scan (traced read_stream.c of each side)", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
