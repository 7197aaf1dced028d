"""What a review must build, decided from the files the patch touches.

* Files outside the server's build — ``src/test/`` (the regression and TAP suites, test
  modules the harness does not install) and ``doc/`` — change nothing the suite sees.
* A C file or header whose tokens are unchanged (the patch edits only comments or white space)
  compiles to the same code: it needs nothing built either (only ``__LINE__`` may move).
* When the only server file whose code changes is ``src/backend/storage/aio/read_stream.c``,
  nothing is rebuilt: each side's ``read_stream.c`` runs as its traced copy
  (:mod:`..postgres.builds.traced_copy`) inside the *base's* server, so both sides share one
  ``bufmgr.c`` and one build (``mode = "traced"``). The scan tests run the server's compiled
  stream, the same on both sides, so they are left out of both runs.
* Anything else (``bufmgr.c``, a header, ``meson.build``) needs the patched server built:
  ``mode = "rebuild"`` (:mod:`.rebuild`, incremental from the base's build directory).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..postgres.builds.pgsource import READ_STREAM_C

__all__ = ["ReviewPlan", "code_tokens", "decide", "outside_server"]

#: Trees of a PostgreSQL checkout that no server build installs (what the harness runs).
_OUTSIDE = ("src/test/", "doc/")
_C_FILES = (".c", ".h")

# One C token at a time: comments (dropped), string and character literals (kept whole, so a
# "/*" inside a string is no comment), then any other run of non-space characters.
_TOKEN = re.compile(
    r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<word>[A-Za-z_0-9]+|[^\sA-Za-z_0-9"'/]+|/)
    """,
    re.DOTALL | re.VERBOSE,
)


def code_tokens(text: str) -> list[str]:
    """The tokens of C source ``text`` without its comments and white space (a coarse lexer:
    enough to tell a comment-only change from a change of code)."""
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup != "comment":
            out.append(m.group(0))
    return out


def outside_server(path: str) -> bool:
    """Whether ``path`` (relative to the tree) is outside what a server build installs."""
    return path.startswith(_OUTSIDE)


@dataclass(frozen=True)
class ReviewPlan:
    """What to build and run: ``traced`` (the base's server, each side's traced read_stream.c)
    or ``rebuild`` (the patched server built from the base's build directory)."""

    mode: str
    touched: tuple[str, ...]
    code_changed: tuple[str, ...]  # server files whose code the patch changes
    comment_only: tuple[str, ...]  # C files whose tokens are unchanged
    outside: tuple[str, ...]  # files no server build installs
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def no_code_change(self) -> bool:
        return not self.code_changed

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "touched": list(self.touched),
            "code_changed": list(self.code_changed),
            "comment_only": list(self.comment_only),
            "outside_server": list(self.outside),
            "reason": self.reason,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def decide(touched: Sequence[str], base: Path, patched: Path) -> ReviewPlan:
    """The plan for a patch touching ``touched`` (paths relative to the trees ``base``/``patched``)."""
    outside = [p for p in touched if outside_server(p)]
    comment_only: list[str] = []
    code: list[str] = []
    for rel in touched:
        if rel in outside:
            continue
        if rel.endswith(_C_FILES):
            a, b = _read(base / rel), _read(patched / rel)
            if a is not None and b is not None and code_tokens(a) == code_tokens(b):
                comment_only.append(rel)
                continue
        code.append(rel)
    stream = str(READ_STREAM_C)
    if not code:
        mode = "traced"
        reason = "the patch changes no code of the server (comments, white space, tests or docs only)"
    elif code == [stream]:
        mode = "traced"
        reason = (
            f"only {stream}'s code changes: each side's read_stream.c runs as a traced copy in the base's "
            "server (no rebuild)"
        )
    else:
        mode = "rebuild"
        others = [p for p in code if p != stream]
        shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        reason = f"the patch changes the server beyond read_stream.c ({shown}): the patched server is built"
    return ReviewPlan(mode, tuple(touched), tuple(code), tuple(comment_only), tuple(outside), reason)
