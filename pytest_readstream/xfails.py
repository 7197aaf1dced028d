"""The expectations file: the failures an implementation's project knows about.

An implementation rarely passes a conformance suite on day one. As array-api-tests lets each
array library keep a list of its known failures, ``--readstream-xfails=FILE`` reads one test-id
prefix per line::

    # Our stream has no look-ahead yet (issue 12).
    conformance/test_performance.py::test_lookahead_hides_latency
    test_pins.py::test_pin_limit_zero     # pin limit 0 rounds to 1 in our build

Matching tests become **strict** xfails: they still run, a failure is expected, and a pass fails
the run (``XPASS(strict)``), so the list shrinks as bugs are fixed instead of rotting.
``--readstream-xfails-as-skips`` skips them instead (faster when the known failures are slow).

Rules: blank lines and lines starting with ``#`` are ignored; a ``#`` after whitespace starts a
comment that becomes the reason (otherwise the nearest comment line above does). An entry matches
a test whose id starts with it, or whose id continues it after a ``/`` (so entries may leave out
leading directories), provided the match ends at a boundary of the id (its end, ``::``, ``[`` or
``/``): ``test_a`` does not match ``test_ab``. Entries that match no collected test are reported
with a warning, since a renamed test would otherwise silently lose its expectation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "SHIPPED_DIR",
    "shipped_expectations",
    "XfailEntry",
    "ReadstreamXfailsWarning",
    "parse_xfails",
    "entry_matches",
    "apply_xfails",
]

_COMMENT = re.compile(r"(^|\s)#")
#: Expectations files shipped in the package (``--readstream-xfails=postgresql-18``).
SHIPPED_DIR = Path(__file__).parent / "expectations"


def shipped_expectations(name: str) -> Path | None:
    """The shipped expectations file ``name`` (with or without ``.txt``), or ``None``.

    Only a bare name qualifies: anything with a directory part is a path the user meant.
    """
    if not name or "/" in name or "\\" in name:
        return None
    candidate = SHIPPED_DIR / (name if name.endswith(".txt") else f"{name}.txt")
    return candidate if candidate.is_file() else None


class ReadstreamXfailsWarning(pytest.PytestWarning):
    """An entry of the expectations file matched no collected test."""


@dataclass(frozen=True)
class XfailEntry:
    """One line of the expectations file."""

    prefix: str
    reason: str
    lineno: int


def parse_xfails(path: Path) -> list[XfailEntry]:
    """Read the expectations file; a ``pytest.UsageError`` names the file and the problem."""
    if not path.exists():
        raise pytest.UsageError(f"--readstream-xfails file {str(path)!r} does not exist")
    if not path.is_file():
        raise pytest.UsageError(f"--readstream-xfails {str(path)!r} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise pytest.UsageError(
            f"--readstream-xfails file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    except OSError as err:
        raise pytest.UsageError(f"--readstream-xfails file {str(path)!r} cannot be read: {err}") from None
    entries: list[XfailEntry] = []
    seen: dict[str, int] = {}
    context = ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            context = ""
            continue
        if line.startswith("#"):
            context = line.lstrip("#").strip()
            continue
        m = _COMMENT.search(line)
        prefix, comment = (line[: m.start()].strip(), line[m.end() :].strip()) if m else (line, "")
        if any(ch.isspace() for ch in prefix) and "[" not in prefix:
            raise pytest.UsageError(
                f"--readstream-xfails file {str(path)!r} line {lineno}: {prefix!r} is not a test id "
                "(one test-id prefix per line; put comments after '#')"
            )
        if prefix in seen:
            raise pytest.UsageError(
                f"--readstream-xfails file {str(path)!r} line {lineno}: {prefix!r} repeats line {seen[prefix]}"
            )
        seen[prefix] = lineno
        reason = comment or context or f"listed in {path.name} line {lineno}"
        entries.append(XfailEntry(prefix, reason, lineno))
    return entries


def _boundary(nodeid: str, end: int, prefix: str) -> bool:
    if end == len(nodeid) or prefix.endswith(("::", "[", "/", ":")):
        return True
    return nodeid.startswith(("::", "[", "/"), end)


def entry_matches(prefix: str, nodeid: str) -> bool:
    """Whether an expectations entry covers the test ``nodeid`` (see the module docstring)."""
    start = 0
    while True:
        if nodeid.startswith(prefix, start) and _boundary(nodeid, start + len(prefix), prefix):
            return True
        slash = nodeid.find("/", start)
        # Only the path part may be shortened: stop at the first "::".
        sep = nodeid.find("::")
        if slash < 0 or (sep >= 0 and slash > sep):
            return False
        start = slash + 1


def apply_xfails(
    items: list[pytest.Item], entries: list[XfailEntry], path: Path, *, as_skips: bool
) -> list[XfailEntry]:
    """Mark the matching items; return the entries that matched nothing."""
    used: set[int] = set()
    for item in items:
        nodeid = item.nodeid
        if nodeid.startswith("::"):
            # pytest leaves the path out of the id when one module is collected from outside the
            # rootdir (``--pyargs package.module``); the entries name it, so put it back.
            nodeid = item.path.name + nodeid
        for entry in entries:
            if entry_matches(entry.prefix, nodeid):
                used.add(entry.lineno)
                where = f"{path.name}:{entry.lineno}"
                if as_skips:
                    item.add_marker(pytest.mark.skip(reason=f"known failure ({where}): {entry.reason}"))
                else:
                    item.add_marker(pytest.mark.xfail(reason=f"{entry.reason} ({where})", strict=True))
                break
    return [e for e in entries if e.lineno not in used]
