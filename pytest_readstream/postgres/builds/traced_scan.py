"""Whole streams through a traced copy of a build's ``read_stream.c``, with their own calls.

:mod:`.traced_copy` turns a build's ``read_stream.c`` into a copy whose calls of
``StartReadBuffers`` / ``WaitReadBuffers`` are recorded. This module compiles that copy together
with a small driver of the project's own (``traced/rsp_traced_scan.c``) against the server's
headers, loads it into a scratch database as the SQL function ``rsp_traced_scan``, and runs one
block-range stream to the end (``read_stream_begin_relation`` with the build's own
``block_range_read_stream_cb``, each buffer released as soon as it is returned). The result is
the list of :class:`TraceEvent` the stream made, from which :func:`reads` takes the read
sequence: every start that had to wait is one I/O of ``accepted`` blocks.

It is what ``readstream compare`` runs on a side that has a source tree, and what the tests use
to check a traced copy (and each C mutant) inside a live server. The probe extension uses the
same generated copy for its step-by-step streams.

The shared object is compiled with ``-fvisibility=hidden``: two traced copies loaded into one
backend (say, a mutant's and the unmutated one) must each call their own renamed functions, not
whichever ``rsp_traced_*`` the dynamic linker met first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._cbuild import (
    CBuildUnavailable,
    ServerHeaders,
    build_shared_object,
    package_text,
    server_headers,
)
from .pgsource import READ_STREAM_C
from .traced_copy import traced_copy_sources

__all__ = [
    "READ_STREAM_FLAGS",
    "TraceEvent",
    "budget_violations",
    "build_traced_scan",
    "install_traced_scan",
    "reads",
    "run_traced_scan",
    "trace_header",
]

#: ``read_stream_begin_relation`` flags by name (``storage/read_stream.h``, PostgreSQL 18 and later).
READ_STREAM_FLAGS = {"default": 0x00, "maintenance": 0x01, "sequential": 0x02, "full": 0x04, "batching": 0x08}
_FUNCTION = "rsp_traced_scan"


@dataclass(frozen=True)
class TraceEvent:
    """One ``StartReadBuffers``/``StartReadBuffer`` (``start``) or ``WaitReadBuffers`` (``wait``) call."""

    kind: str
    blocknum: int
    asked: int
    accepted: int
    forwarded: int
    additional_pin_limit: int  # -1: the stream asked for none before this start
    flags: int
    must_wait: bool
    #: What the call returned where it returns something (``StartReadBuffers``' need to wait as
    #: 0/1; on 19+ ``WaitReadBuffers``' "needed to wait"); ``None`` for a ``void`` call.
    returned: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trace_header() -> str:
    """The probe's ``rsprobe_trace.h`` (the trace event the copy records)."""
    return package_text("builds/probe", "rsprobe_trace.h")


def build_traced_scan(
    bindir: Path, source_tree: Path, *, mutant: str | None = None, headers: ServerHeaders | None = None
) -> Path:
    """Compile the driver with the traced copy of ``source_tree``'s ``read_stream.c`` for ``bindir``'s server.

    Raises ``CBuildUnavailable`` (no compiler, no headers, a compile error) or
    ``TracedCopyError`` (the file is not a stream's source, a mutant's edit does not apply),
    each with one line.
    """
    headers = headers or server_headers(bindir)
    try:
        bufmgr_h = (headers.include_dir / "storage" / "bufmgr.h").read_text()
    except OSError as err:
        raise CBuildUnavailable(f"cannot read the server's storage/bufmgr.h: {err}") from err
    sources = traced_copy_sources(
        (Path(source_tree) / READ_STREAM_C).read_text(),
        bufmgr_h=bufmgr_h,
        mutant=mutant,
        version=headers.version,
    )
    sources["rsprobe_trace.h"] = trace_header()
    sources["rsprobe_bufstate.h"] = package_text("builds/probe", "rsprobe_bufstate.h")
    sources["rsp_traced_scan.c"] = package_text("builds/traced", "rsp_traced_scan.c")
    return build_shared_object(
        "rsp_traced_scan", sources, headers=headers, extra_cflags=("-fvisibility=hidden",)
    )


def install_traced_scan(conn: Any, shared_object: Path, *, name: str = _FUNCTION) -> str:
    """Create (or replace) the SQL function ``name`` for ``shared_object`` in ``conn``'s database."""
    from psycopg import sql

    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}(rel regclass, first int8, nblocks int8, flags int4, bulkread bool, "
            "hold int4, stop_after int8, reset_after int8) "
            "RETURNS TABLE (kind text, blocknum int8, asked int4, accepted int4, forwarded int4, "
            "additional_pin_limit int4, flags int4, must_wait bool, returned int4) "
            "AS {}, 'rsp_traced_scan' LANGUAGE C STRICT VOLATILE"
        ).format(sql.Identifier(name), sql.Literal(str(shared_object)))
    )
    return name


def run_traced_scan(
    session: Any,
    relation: str,
    nblocks: int,
    *,
    first: int = 0,
    flags: int = 0,
    bulkread: bool = False,
    hold: int = 0,
    stop_after: int | None = None,
    reset_after: int | None = None,
    name: str = _FUNCTION,
) -> list[TraceEvent]:
    """Run one block-range stream of ``relation`` through the traced copy; its calls, in order.

    The consumer keeps the last ``hold`` buffers pinned; ``stop_after`` ends the stream after
    that many buffers; ``reset_after`` resets it after that many and continues with the next
    block due. The driver raises a SQL error when the stream returns a wrong or unread block,
    ends early, or leaves a buffer of the relation pinned after its end.

    ``session`` is anything with ``execute(query, params) -> rows`` (a
    :class:`~pytest_readstream.postgres.servers.session.PgSession`, whose backend then did the reads).
    """
    from psycopg import sql

    query = sql.SQL("SELECT * FROM {}({}::regclass, %s, %s, %s, %s, %s, %s, %s)").format(
        sql.Identifier(name), sql.Literal(relation)
    )
    stop = -1 if stop_after is None else stop_after
    reset = -1 if reset_after is None else reset_after
    rows = session.execute(query, (first, nblocks, flags, bulkread, hold, stop, reset))
    return [
        TraceEvent(
            str(r[0]),
            int(r[1]),
            int(r[2]),
            int(r[3]),
            int(r[4]),
            int(r[5]),
            int(r[6]),
            bool(r[7]),
            None if r[8] is None else int(r[8]),
        )
        for r in rows
    ]


def reads(events: list[TraceEvent]) -> list[tuple[int, int]]:
    """The I/Os of a trace: ``(first block, blocks)`` of every start that had to wait."""
    return [(e.blocknum, e.accepted) for e in events if e.kind == "start" and e.must_wait]


def budget_violations(events: list[TraceEvent]) -> list[str]:
    """Starts that asked for more blocks than the additional-pin limit plus forwarded buffers allowed.

    The rule of ``read_stream_start_pending_read`` (PostgreSQL 18): a start may ask for at most
    ``GetAdditionalPinLimit() + forwarded`` blocks, and always for one.
    """
    out = []
    for e in events:
        if e.kind != "start" or e.additional_pin_limit < 0:
            continue
        budget = max(1, e.additional_pin_limit + e.forwarded)
        if e.asked > budget:
            out.append(
                f"StartReadBuffers asked for {e.asked} blocks from block {e.blocknum} with "
                f"GetAdditionalPinLimit() = {e.additional_pin_limit} and {e.forwarded} forwarded"
            )
    return out
