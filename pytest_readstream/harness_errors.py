"""Harness errors: what the harness itself could not do, told apart from what a test found.

A test that fails because the harness could not start the server, build its C code against it
or build the relation the model describes has judged nothing: such a failure is never counted
as a failure of the implementation, never as a mutant killed, and never enters a verdict.

An exception says it is one by a class attribute ``readstream_harness_error``: the phrase that
completes "the harness could not ..." (``"start the PostgreSQL server"``). The plugin records
the first line of such a failure with the test (``harness_error`` in the JSON report);
:func:`pytest_readstream.verdict.verdict` then says ``ERROR: the harness could not ...`` with
exit status 2 instead of a verdict, and ``readstream mutants`` judges no mutant on that run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["HARNESS_ERROR_PROPERTY", "HarnessError", "harness_error_line", "main_harness_error"]

#: The ``user_properties`` name a test's harness error travels under (also across xdist).
HARNESS_ERROR_PROPERTY = "readstream_harness_error"


class HarnessError(RuntimeError):
    """Raised by the plugin for a test whose implementation reported a harness problem before it
    ran (e.g. the probe does not build against the server); the message is that problem."""

    readstream_harness_error = "run the test"


def _harness_error_in(exc: BaseException | None) -> BaseException | None:
    """``exc`` if it is a harness error, or the first harness error of an exception group
    (hypothesis' ``FlakyFailure`` groups what failed once and not on replay), else ``None``."""
    if exc is None:
        return None
    what = getattr(exc, "readstream_harness_error", None)
    if isinstance(what, str) and what:
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _harness_error_in(sub)
            if found is not None:
                return found
    return None


def harness_error_line(exc: BaseException | None) -> str | None:
    """``"the harness could not WHAT: FIRST LINE"`` for a harness error (also one inside an
    exception group), else ``None``."""
    exc = _harness_error_in(exc)
    what = getattr(exc, "readstream_harness_error", None)
    if exc is None or not isinstance(what, str) or not what:
        return None
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if first.endswith(":") and len(lines) > 1:
        # "...; its log tail:" and the log: the server's own FATAL/PANIC/ERROR line says why.
        said = [line for line in lines[1:] if re.search(r"\b(FATAL|PANIC|ERROR)\b", line)]
        first = f"{first.rstrip(':').removesuffix('; its log tail')}: {(said or lines[-1:])[0]}"
    if first.startswith("the harness could not "):
        return first
    return f"the harness could not {what}: {first}"


#: A temporary directory's random part (``mkdtemp``: ``-d_bchlg3/``): lines that differ only
#: there are one error.
_TEMP_PART = re.compile(r"(?<=[-.])[A-Za-z0-9_]{8}(?=/)")


def main_harness_error(lines: Iterable[Any]) -> tuple[str, int, int] | None:
    """The most frequent harness error of a run: ``(line, tests with it, tests with any)``.

    Lines that differ only in a temporary directory's random name count as one."""
    counts: Counter[str] = Counter()
    shown: dict[str, str] = {}
    for line in lines:
        if line:
            key = _TEMP_PART.sub("*", str(line))
            counts[key] += 1
            shown.setdefault(key, str(line))
    if not counts:
        return None
    key, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return shown[key], n, sum(counts.values())
