"""Progress of a long command on stderr: a bar on a terminal, one line per step elsewhere.

``readstream bench seeds`` runs for minutes. Written to a log (CI, ``> log 2>&1``, ``nohup``) a
carriage-return bar shows nothing until the end, so when stderr is not a terminal each finished
step is one whole line, flushed at once; on a terminal one bar line is redrawn in place. The
output proper (tables, JSON) stays on stdout, so redirecting it keeps the progress visible.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

_BAR = 30


class Progress:
    """Counts steps towards a total that may grow (runs are known once calibrations finish)."""

    def __init__(self, what: str, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty()) if tty is None else tty
        self.done = 0
        self.total = 0
        self._start = time.monotonic()

    def add(self, steps: int) -> None:
        """``steps`` more steps are known to come."""
        self.total += steps
        if self.tty:
            self._draw("")

    def step(self, text: str) -> None:
        """One step finished; ``text`` says which."""
        self.done += 1
        self.total = max(self.total, self.done)
        elapsed = time.monotonic() - self._start
        if self.tty:
            self._draw(text)
        else:
            self.stream.write(f"{self.what}: [{self.done}/{self.total}] {text} ({elapsed:.0f} s)\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line (a line-per-step log needs nothing)."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, text: str) -> None:
        filled = _BAR * self.done // self.total if self.total else 0
        bar = "#" * filled + "-" * (_BAR - filled)
        line = f"{self.what} [{bar}] {self.done}/{self.total} {text}"
        self.stream.write("\r" + line[:100].ljust(100))
        self.stream.flush()
