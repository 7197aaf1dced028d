"""The worked examples (README, spec read_stream.md §8) measured on a server of each version.

Each case is a stream driven through the conformance harness (``conformance._harness.Scenario``:
the server's own ``read_stream.c`` through the probe, or the model) or a scan
(``ScanRequest``), and what is recorded is the reads it made: ``[first, last]`` block ranges of a
stream, the read count of a scan. ``fixtures/golden/worked_examples.json`` holds the figures
measured on PostgreSQL 18.6 (embedded), 19beta1 and master (20devel) builds;
``tests/model/test_worked_examples.py`` checks the model of each version against them on every
run. To measure them again (a server of the version; for 19 and master its build and source
tree, whose ``read_stream.c`` the probe traces)::

    python -m tests.model._worked_examples --version 19 --pg-bindir BIN --pg-source TREE --write
    python -m tests.model._worked_examples --version 18 --pg-source TREE_18_6 --write   # embedded
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance._harness import Scenario
from pytest_readstream.protocol import ScanRequest
from reference_impl import READ_STREAM_FULL, READ_STREAM_SEQUENTIAL, Settings
from reference_impl.relations import RelationSpec

STORE = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "worked_examples.json"


@dataclass(frozen=True)
class Case:
    """One worked example: a stream (``blocks``) or, with ``scan``, a scan of ``relation``."""

    name: str
    text: str
    relation_blocks: int = 64
    blocks: tuple[int, ...] = ()
    cached: tuple[int, ...] = ()
    flags: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    take: int | None = None  # end the stream after this many buffers
    scan: str | None = None
    relation: RelationSpec | None = None


CASES: tuple[Case, ...] = (
    Case(
        "twenty-sequential", "20 cold blocks, sequential", 20, tuple(range(20)), flags=READ_STREAM_SEQUENTIAL
    ),
    Case("all-cached", "all cached", 6, tuple(range(6)), cached=tuple(range(6))),
    Case("odd-cached", "even blocks cold, odd cached", 10, tuple(range(10)), cached=(1, 3, 5, 7, 9)),
    Case(
        "full-hole",
        "`READ_STREAM_FULL`, block 3 cached",
        8,
        tuple(range(8)),
        cached=(3,),
        flags=READ_STREAM_FULL,
    ),
    Case(
        "random-sync",
        "blocks 10, 42, 43, 44, 60 under `sync`",
        64,
        (10, 42, 43, 44, 60),
        settings={"io_method": "sync"},
    ),
    Case("end-after-1", "end after 1 block", 100, tuple(range(100)), flags=READ_STREAM_SEQUENTIAL, take=1),
    Case("end-after-2", "end after 2 blocks", 100, tuple(range(100)), flags=READ_STREAM_SEQUENTIAL, take=2),
    Case(
        "segment-boundary",
        "131060..131090, `FULL`",
        131091,
        tuple(range(131060, 131091)),
        flags=READ_STREAM_FULL,
    ),
    Case(
        "eic0",
        "`effective_io_concurrency = 0`, 40 blocks",
        40,
        tuple(range(40)),
        flags=READ_STREAM_SEQUENTIAL,
        settings={"effective_io_concurrency": 0},
    ),
    Case(
        "icl128-seqscan",
        "`io_combine_limit = 128` seq scan of 4,000 blocks",
        settings={"io_combine_limit": 128, "io_max_combine_limit": 128},
        scan="seqscan",
        relation=RelationSpec(name="w128", nblocks=4000, tuples_per_page=1, tuple_width=100, seed=7),
    ),
    Case(
        "ring-seqscan",
        "10,000-block seq scan (BULKREAD ring)",
        scan="seqscan",
        relation=RelationSpec(name="wring", nblocks=10000, tuples_per_page=1, tuple_width=100, seed=8),
    ),
)


#: Every case runs under io_method=sync, where nothing depends on timing: from 19 on the
#: read-ahead distance grows only after WaitReadBuffers() reported a real wait, and under worker
#: whether the backend waited depends on the server's timing (a 19beta1 server under worker read
#: [0] [1-2] [3] for "end after 2 blocks", the model on its nvme device [0] [1-2] [3-5]).
_SYNC = {"io_method": "sync"}


def _stream(case: Case, impl: Any, version: str) -> list[list[int]]:
    sc = Scenario(
        settings={"version": version, **_SYNC, **case.settings},
        relation_blocks=case.relation_blocks,
        blocks=list(case.blocks),
        cached=list(case.cached),
        flags=case.flags,
    )
    d = sc.start(impl)
    if case.take is None:
        d.consume()
    else:
        for _ in range(case.take):
            d.next()
    d.end()
    return [[r.start, r.start + r.nblocks - 1] for r in d.reads]


def _scan(case: Case, impl: Any, version: str) -> int:
    assert case.scan is not None and case.relation is not None
    req = ScanRequest(
        case.scan,
        relation=case.relation,
        variant="streamed",
        settings=Settings(version=version, **{**_SYNC, **case.settings}),
    )
    return int(impl.run_scan(req).reads)


def measure(case: Case, impl: Any, version: str) -> Any:
    """What ``impl`` (the model or a server of ``version``) reads in ``case``."""
    return _scan(case, impl, version) if case.scan else _stream(case, impl, version)


def model(case: Case, version: str) -> Any:
    from pytest_readstream.reference import ReferenceImplementation

    return measure(case, ReferenceImplementation(), version)


def _main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", required=True, choices=("18", "19", "20devel"))
    p.add_argument("--pg-bindir", help="bin/ of the server's build (default: the embedded 18.6)")
    p.add_argument("--pg-source", required=True, help="its source tree (the probe traces read_stream.c)")
    p.add_argument("--write", action="store_true", help="store the figures in the golden file")
    args = p.parse_args()
    from pytest_readstream.postgres.impl.implementation import PostgresImplementation

    impl = PostgresImplementation(bindir=args.pg_bindir, pytest_mode=False, source=Path(args.pg_source))
    out: dict[str, Any] = {}
    try:
        if impl.model_version != args.version:
            raise SystemExit(f"--version {args.version}: the server is of model version {impl.model_version}")
        for case in CASES:
            got = measure(case, impl, args.version)
            want = model(case, args.version)
            print(f"{case.name}: server {got}, model {want}{'' if got == want else '  DIFFER'}", flush=True)
            out[case.name] = got
        server_version = impl.server.version
    finally:
        impl.close()
    if args.write:
        doc = json.loads(STORE.read_text()) if STORE.exists() else {"schema": 1, "servers": {}, "cases": {}}
        doc["servers"][args.version] = server_version
        for name, got in out.items():
            doc["cases"].setdefault(name, {})[args.version] = got
        STORE.write_text(_dumps(doc))


def _dumps(doc: dict[str, Any]) -> str:
    """The golden document with one line per case and version."""
    lines = [
        "{",
        f' "schema": {doc["schema"]},',
        f' "servers": {json.dumps(doc["servers"], sort_keys=True)},',
    ]
    lines.append(' "cases": {')
    names = sorted(doc["cases"])
    for i, name in enumerate(names):
        per = doc["cases"][name]
        inner = ",\n".join(f'   "{v}": {json.dumps(per[v])}' for v in sorted(per))
        lines.append(f'  "{name}": {{\n{inner}\n  }}' + ("," if i < len(names) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _main()
