"""Checks of command-line values shared by ``readstream`` and the scripts under ``bench/``.

Each check runs before any work, so a bad value ends with one line naming it and what is
allowed, never with a traceback after minutes of simulation or a half-written report.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["non_negative_int", "output_problem", "positive_int", "scale_fraction"]


def output_problem(option: str, path: str | None) -> str | None:
    """Why ``path`` cannot be written as the output of ``option`` (``None``: it can)."""
    if not path:
        return None
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        return f"{option} {path}: is a directory; give a file path"
    if not parent.is_dir():
        return f"{option} {path}: directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {path}: directory {parent} is not writable"
    return None


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is invalid: allowed >= {low}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (worker counts, block counts)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (a count where 0 switches a part off)."""
    return _int_at_least(text, 0)


def scale_fraction(text: str) -> float:
    """An argparse type: a scale factor with 0 < scale <= 1 (shrunken benchmark tables)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is out of range: allowed 0 < scale <= 1")
    return value
