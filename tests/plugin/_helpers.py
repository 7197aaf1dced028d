"""Helpers shared by the plugin's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without the fields that may differ between two runs of the same tests."""
    out = dict(report)
    out["tests"] = [{k: v for k, v in t.items() if k != "duration"} for t in report["tests"]]
    return out
