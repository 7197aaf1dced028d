"""The kill matrix of the C-level mutants: ``readstream mutants --impl postgres``.

Each C mutant of :mod:`.traced_copy` is a known bug applied to the traced copy of the server's
own ``read_stream.c``; the probe drives that copy for every stream-level conformance test. The
matrix runs the conformance suite once with the unmutated copy (which no test may fail) and
once per mutant (which at least one test must fail), each in its own pytest subprocess, as
``readstream mutants`` does for the Python mutants.

Only the tests that drive streams through the probe can tell the copies apart: the scan tests
(``test_scans.py``) run the server's own scans, whose stream is the server's compiled
``read_stream.c``, not the copy, so they are deselected here (they would add minutes and one
known 18.6 failure, never a kill). ``block-range-past-end`` lives in the copy's
``block_range_read_stream_cb``, which the probe runs for the suite's block-range streams.

A mutant whose edits do not match the tree's ``read_stream.c`` (one of what 19 added, on an 18
tree) is not run: it is listed under ``not_applicable`` with its one-line reason, never a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..._progress import Progress
from ...mutants import judge, run_suite
from .pgsource import READ_STREAM_C
from .traced_copy import MUTANTS, mutant_problem

__all__ = ["run_c_kill_matrix"]

#: Deselects the scan tests (see the module docstring).
_STREAM_TESTS_ONLY = ("-k", "not test_scans")


def run_c_kill_matrix(
    server_args: list[str],
    pytest_args: list[str],
    mutants: list[str] | None = None,
    json_path: str | os.PathLike[str] | None = None,
    *,
    timeout_s: float = 1800.0,
    source: Path | None = None,
    bufmgr_h: str | None = None,
    version: str | None = None,
    fail_fast: bool = False,
) -> dict[str, Any]:
    """Run the suite against the unmutated traced copy and each C mutant; who killed whom.

    ``server_args`` choose the build and its source (``--readstream-pg-source=DIR`` or
    ``--readstream-pg-fetch-source``, optionally ``--readstream-pg-bindir=DIR``). The result has
    the shape of :func:`pytest_readstream.mutants.run_kill_matrix`'s, with the unmutated copy as
    ``reference`` and each run's wall time in seconds. With ``source`` (the tree) and
    ``bufmgr_h`` (the server's ``storage/bufmgr.h``), each mutant is first checked against the
    tree: one that does not apply goes into ``not_applicable`` (name -> one line) and is not run.
    With ``fail_fast`` each mutant's run stops at its first failing test (``--maxfail=1``), so a
    mutant lists one killing test; the unmutated copy always runs whole, since a kill counts only
    tests it passed.
    """
    names = list(MUTANTS) if mutants is None else list(mutants)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise ValueError(f"unknown C mutant(s) {', '.join(unknown)}: known {', '.join(MUTANTS)}")
    not_applicable: dict[str, str] = {}
    if source is not None and bufmgr_h is not None:
        text = (Path(source) / READ_STREAM_C).read_text()
        for name in list(names):
            why = mutant_problem(text, name, bufmgr_h=bufmgr_h, version=version)
            if why is not None:
                not_applicable[name] = why
                names.remove(name)
    base = [*server_args, *_STREAM_TESTS_ONLY, *pytest_args]
    out: dict[str, Any] = {
        "schema": 1,
        "implementation": "postgres",
        "pytest_args": base,
        "mutants": {},
        "not_applicable": not_applicable,
        "version": version,
        "fail_fast": fail_fast,
    }
    progress = Progress("C mutants")
    progress.add(1 + len(names))
    for name, why in not_applicable.items():
        print(f"readstream mutants: {name} does not apply: {why}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out["reference"] = run_suite("postgres", base, timeout_s)
    out["reference"]["seconds"] = round(time.perf_counter() - t0, 1)
    ref = out["reference"]
    progress.step(
        f"unmutated copy: {ref['passed']} passed, {len(ref['failed'])} failed in {ref['seconds']:.0f} s"
    )
    for name in names:
        t = time.perf_counter()
        stop = ["--maxfail=1"] if fail_fast else []
        res = run_suite("postgres", [*base, *stop, f"--readstream-pg-mutant={name}"], timeout_s)
        out["mutants"][name] = {
            "doc": MUTANTS[name].bug,
            # Killed only by tests the unmutated copy passed in this run (mutants.judge).
            **judge(res, out["reference"]),
            "exit_code": res["exit_code"],
            "passed": res["passed"],
            "skipped": res["skipped"],
            "seconds": round(time.perf_counter() - t, 1),
            **({"output_tail": res["output_tail"]} if "output_tail" in res else {}),
        }
        m = out["mutants"][name]
        verdict = (
            f"killed by {len(m['killing_tests'])} test(s)"
            if m["killed"]
            else ("not judged" if m["not_judged"] else "SURVIVED")
        )
        progress.step(f"{name}: {verdict} in {m['seconds']:.0f} s")
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["all_killed"] = all(m["killed"] for m in out["mutants"].values())
    ref = out["reference"]
    out["reference_clean"] = (
        not ref["failed"] and not ref.get("harness_errors") and ref["exit_code"] == 0 and ref["passed"] > 0
    )
    if json_path is not None:
        path = Path(json_path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
    return out
