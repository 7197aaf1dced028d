"""Harness facts: a fixed set of measurements on a real server, kept as golden data.

Each :class:`FactCase` is one statement on one cold table under given server and session
settings: sequential scans (``SELECT count(*)``) on tables just at and just above the
``NBuffers / 4`` large-table threshold (``initscan`` in ``heapam.c``), with ``io_combine_limit``
16 and 1, ``effective_io_concurrency`` 16 and 0, ``io_method`` ``worker`` and ``sync``; the
10000-block example of ``scans.md`` §2.3; a smaller pool; and ``pg_prewarm(..., 'buffer')``
(``scans.md`` §8). :func:`measure_facts` runs them and returns a JSON-ready document;
``python -m pytest_readstream.postgres.fidelity.facts --json PATH`` writes it. The project's tests re-run the
cases and compare with the stored document.

What a record keeps is what does not depend on the buffer pool's history: reads and read bytes
per ``pg_stat_io`` context, hits, ring reuses, the per-relation read/hit counters and the main-fork
blocks left resident. ``evictions`` (whether a buffer taken from the clock sweep happened to
hold a valid page) is recorded but not compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..servers.observe import Measurement, evict, measure_statement
from ..servers.scratch import ScratchDatabase
from ..servers.server import PgServer
from ..servers.settings import ServerSettings, SessionSettings

__all__ = [
    "COMPARED_COUNTERS",
    "FACT_CASES",
    "FACT_TABLES",
    "FactCase",
    "block_ranges",
    "measure_facts",
    "run_fact_case",
]

SCHEMA_VERSION = 1

#: Tables and their exact sizes in blocks. With the default pool (16384 buffers) 4096 is the
#: largest size scanned without a ring; with 2048 buffers the threshold is 512.
FACT_TABLES: dict[str, int] = {
    "t500": 500,
    "t513": 513,
    "t4096": 4096,
    "t4097": 4097,
    "t10000": 10000,
}

#: ``pg_stat_io`` counters compared between a stored fact and a new measurement.
COMPARED_COUNTERS = ("reads", "read_bytes", "hits", "reuses")


@dataclass(frozen=True)
class FactCase:
    """One measured statement (``statement`` is formatted with ``table``)."""

    id: str
    table: str
    statement: str
    server: ServerSettings
    session: SessionSettings


def _cases() -> tuple[FactCase, ...]:
    out: list[FactCase] = []
    count = "SELECT count(*) FROM {table}"
    for method in ("worker", "sync"):
        server = ServerSettings(io_method=method)
        for table in ("t4096", "t4097"):
            for icl, eic in ((16, 16), (1, 16), (16, 0), (1, 0)):
                out.append(
                    FactCase(
                        id=f"seqscan-{table}-{method}-icl{icl}-eic{eic}",
                        table=table,
                        statement=count,
                        server=server,
                        session=SessionSettings(io_combine_limit=icl, effective_io_concurrency=eic),
                    )
                )
        out.append(
            FactCase(
                id=f"seqscan-t10000-{method}-defaults",
                table="t10000",
                statement=count,
                server=server,
                session=SessionSettings(),
            )
        )
        out.append(
            FactCase(
                id=f"prewarm-t4097-{method}-defaults",
                table="t4097",
                statement="SELECT pg_prewarm('{table}', 'buffer')",
                server=server,
                session=SessionSettings(),
            )
        )
    out.append(
        FactCase(
            id="prewarm-t4097-worker-icl1",
            table="t4097",
            statement="SELECT pg_prewarm('{table}', 'buffer')",
            server=ServerSettings(io_method="worker"),
            session=SessionSettings(io_combine_limit=1),
        )
    )
    small = ServerSettings(io_method="worker", shared_buffers=2048)
    for table in ("t500", "t513"):
        out.append(
            FactCase(
                id=f"seqscan-{table}-worker-sb2048-defaults",
                table=table,
                statement=count,
                server=small,
                session=SessionSettings(),
            )
        )
    return tuple(out)


FACT_CASES: tuple[FactCase, ...] = _cases()


def block_ranges(blocks: Sequence[int] | frozenset[int]) -> list[list[int]]:
    """Sorted blocks as inclusive ``[first, last]`` runs: ``{1,2,3,7}`` -> ``[[1,3],[7,7]]``."""
    runs: list[list[int]] = []
    for b in sorted(blocks):
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return runs


def _record(case: FactCase, m: Measurement, pages: int) -> dict[str, Any]:
    io = {
        ctx: {
            "reads": c.reads,
            "read_bytes": c.read_bytes,
            "hits": c.hits,
            "reuses": c.reuses,
            "evictions": c.evictions,
        }
        for (obj, ctx), c in sorted(m.io.rows.items())
        if obj == "relation"
    }
    rel = m.relations[case.table]
    resident = m.resident_blocks(case.table)
    return {
        "id": case.id,
        "statement": case.statement.format(table=case.table),
        "table": case.table,
        "pages": pages,
        "server_settings": case.server.to_gucs(),
        "session_settings": case.session.to_gucs(),
        "observed_settings": dict(m.settings),
        "io": io,
        "relation": {"blks_read": rel.blks_read, "blks_hit": rel.blks_hit},
        "resident_main": block_ranges(resident),
        "resident_count": len(resident),
        "quiet": m.quiet,
    }


def ensure_fact_tables(db: ScratchDatabase, tables: Sequence[str]) -> None:
    """Create the named fact tables that do not exist yet."""
    for name in tables:
        if db.relation_exists(name):
            continue
        db.create_wide_table(name, FACT_TABLES[name])


def run_fact_case(server: PgServer, db: ScratchDatabase, case: FactCase) -> dict[str, Any]:
    """Configure ``server`` for ``case``, measure it on a cold table and return the record."""
    server.configure(case.server)
    ensure_fact_tables(db, [case.table])
    with db.session(case.session) as session:
        evict(session, case.table)
        m = measure_statement(session, case.statement.format(table=case.table), [case.table], warm=True)
    return _record(case, m, FACT_TABLES[case.table])


def measure_facts(server: PgServer, cases: Sequence[FactCase] = FACT_CASES) -> dict[str, Any]:
    """Run ``cases`` on an owned server (they change restart-level settings)."""
    db = server.scratch_database(label="facts")
    try:
        records = [run_fact_case(server, db, case) for case in cases]
    finally:
        db.drop()
        server.configure(ServerSettings())
    return {
        "schema": SCHEMA_VERSION,
        "description": (
            "PostgreSQL 18 measurements taken by pytest_readstream.postgres.fidelity.facts on cold tables "
            "of one 5000-byte row per page (frozen, autovacuum off); counters are the measured "
            "backend's pg_stat_get_backend_io diff, object 'relation'"
        ),
        "server": {
            "version": server.version,
            "version_num": server.version_num,
            "block_size": server.block_size,
            "kind": server.kind,
        },
        "compared_counters": list(COMPARED_COUNTERS),
        "tables": dict(FACT_TABLES),
        "cases": records,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_readstream.postgres.fidelity.facts",
        description="Measure the harness facts on a PostgreSQL 18 server the harness runs.",
    )
    parser.add_argument("--json", required=True, help="where to write the facts document")
    parser.add_argument("--bindir", help="a PostgreSQL 18 bin directory (default: embedded)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="readstream-facts-") as workdir:
        if args.bindir:
            server = PgServer.from_bindir(args.bindir, workdir)
        else:
            server = PgServer.embedded(workdir)
        with server:
            doc = measure_facts(server)
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{len(doc['cases'])} cases measured on PostgreSQL {doc['server']['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
