"""A traced copy of the server's own ``read_stream.c``, with optional C-level mutants.

The probe extension drives a server's stream from outside: it sees what each consumer call
returns, but not the stream's own calls of the buffer manager. The model's harness sees every
``StartReadBuffers`` / ``WaitReadBuffers`` with the pin budget in force. To give a C build the
same view, the harness compiles the build's own ``read_stream.c`` (PostgreSQL 18's
``src/backend/storage/aio/read_stream.c``, from ``--readstream-pg-source``) a second time into
the probe, changed in three mechanical ways and nothing else:

1. **Renaming.** Every function the file defines with external linkage (``read_stream_begin_relation``,
   ``read_stream_next_buffer``, ``read_stream_reset``, ``read_stream_end``, ...) gets the prefix
   ``rsp_traced_``, everywhere it is named in code, so the copy lives beside the server's own
   stream in one process. ``rsprobe_traced.h`` declares the renamed functions with the
   signatures found in the file (``struct ReadStream`` stays the same opaque type).
2. **Wrappers.** The calls of ``StartReadBuffers``, ``StartReadBuffer``, ``WaitReadBuffers``,
   ``GetAdditionalPinLimit`` and ``GetAdditionalLocalPinLimit`` go through ``static`` wrappers
   that call the real function and record one :c:type:`RspTraceEvent` per start and per wait
   (``probe/rsprobe_trace.h``): the blocks asked and accepted, whether the caller must wait, the
   buffers already pinned that the stream passed in (forwarded), the flags, and the last
   additional-pin limit the stream obtained before that start. The trace is a growable array in
   ``TopMemoryContext``, read and cleared through ``rsp_trace_events`` / ``rsp_trace_count`` /
   ``rsp_trace_clear``.
3. **Mutants** (optional): a known bug applied as small text edits to the file *before* the
   other two steps, each written against PostgreSQL's own text. An edit must match exactly once;
   otherwise the build stops with one line naming the mutant, the edit and how often it matched,
   because an edit that lands elsewhere (or nowhere) would be a different bug or none.

Comments and the file's other code are left as they are, so a compiler error points at lines a
reader of ``read_stream.c`` recognises. The text of PostgreSQL's file is an input here, read from
the developer's tree or the fetched source at test time; none of it is kept in this project.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..errors import PgHarnessError

__all__ = [
    "MUTANTS",
    "TRACED_C",
    "TRACED_H",
    "TRACED_PREFIX",
    "WRAPPED_CALLS",
    "CMutant",
    "TracedCopyError",
    "traced_copy_sources",
]

#: The generated files, passed to ``build_shared_object`` beside the probe's own sources.
TRACED_C = "rsprobe_traced_copy.c"
TRACED_H = "rsprobe_traced.h"
#: Prefix of every renamed function with external linkage.
TRACED_PREFIX = "rsp_traced_"
#: Buffer-manager calls routed through logging wrappers (``rsp_wrap_<name>``).
WRAPPED_CALLS = (
    "StartReadBuffers",
    "StartReadBuffer",
    "WaitReadBuffers",
    "GetAdditionalPinLimit",
    "GetAdditionalLocalPinLimit",
)
# Calls a PostgreSQL 18 stream cannot do without; a file lacking one is not a v18 read_stream.c.
_REQUIRED_CALLS = ("StartReadBuffers", "WaitReadBuffers", "GetAdditionalPinLimit")
_REQUIRED_FUNCTIONS = (
    "read_stream_begin_relation",
    "read_stream_next_buffer",
    "read_stream_reset",
    "read_stream_end",
)


class TracedCopyError(PgHarnessError):
    """``read_stream.c`` cannot be turned into the traced copy (or a mutant's edit does not apply)."""


@dataclass(frozen=True)
class _Edit:
    """Replace ``old`` (which must occur exactly once) by ``new``."""

    label: str
    old: str
    new: str


@dataclass(frozen=True)
class CMutant:
    """A known bug of ``read_stream.c`` (PostgreSQL 18), applied as small checked text edits."""

    name: str
    bug: str
    edits: tuple[_Edit, ...]
    #: Where the bug lives: "stream" (the stream machinery every stream runs) or "block-range
    #: callback" (block_range_read_stream_cb: run by the probe's block-range streams and by the
    #: traced-scan driver of ``readstream compare``).
    scope: str = "stream"


def _m(name: str, bug: str, *edits: _Edit, scope: str = "stream") -> CMutant:
    return CMutant(name, bug, tuple(edits), scope)


#: The C-level mutants, by name. Each edit is written against PostgreSQL 18.6's text (tabs as
#: in the file), in functions of read_stream.c named in its label.
MUTANTS: dict[str, CMutant] = {
    m.name: m
    for m in (
        _m(
            "distance-plus-one",
            "after a wait the look-ahead distance grows by one instead of doubling",
            _Edit(
                "read_stream_next_buffer: distance = stream->distance * 2",
                "\t\tdistance = stream->distance * 2;\n",
                "\t\tdistance = stream->distance + 1;\n",
            ),
        ),
        _m(
            "pin-limit-ignored",
            "the stream asks for the additional-pin limit and ignores it",
            _Edit(
                "read_stream_start_pending_read: buffer_limit = Min(GetAdditionalPinLimit(), ...)",
                "\t\tbuffer_limit = Min(GetAdditionalPinLimit(), PG_INT16_MAX);\n",
                "\t{\n\t\t(void) GetAdditionalPinLimit();\n\t\tbuffer_limit = PG_INT16_MAX;\n\t}\n",
            ),
        ),
        _m(
            "end-without-wait",
            "reset and end neither wait for the reads in flight nor release the queued pins",
            _Edit(
                "read_stream_reset: the loop that consumes and releases what was not returned",
                "\twhile ((buffer = read_stream_next_buffer(stream, NULL)) != InvalidBuffer)\n"
                "\t\tReleaseBuffer(buffer);\n",
                "",
            ),
        ),
        _m(
            "forwarded-lost",
            "after a split read the forwarded buffer is forgotten (its pin leaks, the block is pinned again)",
            _Edit(
                "read_stream_start_pending_read: counting the forwarded buffers",
                "\t\t   stream->buffers[buffer_index + nblocks + forwarded] != InvalidBuffer)\n"
                "\t\tforwarded++;\n",
                "\t\t   stream->buffers[buffer_index + nblocks + forwarded] != InvalidBuffer)\n"
                "\t\tstream->buffers[buffer_index + nblocks + forwarded] = InvalidBuffer;\n",
            ),
        ),
        _m(
            "io-index-no-wrap",
            "the index of the oldest I/O in flight does not wrap around at max_ios",
            _Edit(
                "read_stream_next_buffer: ++stream->oldest_io_index wrap-around",
                "\t\tif (++stream->oldest_io_index == stream->max_ios)\n\t\t\tstream->oldest_io_index = 0;\n",
                "\t\t++stream->oldest_io_index;\n",
            ),
        ),
        _m(
            "no-combine",
            "a block that continues the pending read is never merged into it (every read is one block)",
            _Edit(
                "read_stream_look_ahead: can we merge it with the pending read?",
                "\t\tif (stream->pending_read_nblocks > 0 &&\n"
                "\t\t\tstream->pending_read_blocknum + stream->pending_read_nblocks == blocknum)\n",
                "\t\tif (false && stream->pending_read_nblocks > 0 &&\n"
                "\t\t\tstream->pending_read_blocknum + stream->pending_read_nblocks == blocknum)\n",
            ),
        ),
        _m(
            "block-range-past-end",
            "the block-range callback returns one block past the end of its range",
            _Edit(
                "block_range_read_stream_cb: the end-of-range test",
                "\tif (p->current_blocknum < p->last_exclusive)\n",
                "\tif (p->current_blocknum <= p->last_exclusive)\n",
            ),
            scope="block-range callback",
        ),
        _m(
            "reset-stays-ended",
            "reset leaves the distance at 0, so the stream returns nothing after a reset",
            _Edit(
                "read_stream_reset: start off assuming data is cached",
                "\t/* Start off assuming data is cached. */\n\tstream->distance = 1;\n",
                "\t/* Start off assuming data is cached. */\n",
            ),
        ),
    )
}


# --------------------------------------------------------------------------- C text helpers
_COMMENT_OR_STRING = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
# A PostgreSQL-style function definition: the return type alone on a line, then the name at
# column 0, the parameters, and the opening brace on a line of its own.
_DEFINITION = re.compile(
    r"^(?P<ret>[A-Za-z_][^\n;{}()#=]*)\n(?P<name>[A-Za-z_]\w*)\((?P<params>[^)]*)\)\s*\n\{", re.M
)


def _code_mask(text: str) -> list[tuple[int, int]]:
    """Spans of comments and string/char literals, where nothing is renamed or wrapped."""
    return [m.span() for m in _COMMENT_OR_STRING.finditer(text)]


def _replace_in_code(text: str, pattern: re.Pattern[str], repl: str) -> tuple[str, int]:
    """``pattern.sub(repl, text)`` outside comments and literals; also the number of replacements."""
    masked = _code_mask(text)
    out: list[str] = []
    pos = 0
    count = 0
    k = 0
    for m in pattern.finditer(text):
        while k < len(masked) and masked[k][1] <= m.start():
            k += 1
        if k < len(masked) and masked[k][0] <= m.start() < masked[k][1]:
            continue
        out.append(text[pos : m.start()])
        out.append(m.expand(repl))
        pos = m.end()
        count += 1
    out.append(text[pos:])
    return "".join(out), count


def _apply_mutant(text: str, mutant: CMutant) -> str:
    for edit in mutant.edits:
        found = text.count(edit.old)
        if found != 1:
            where = "does not occur" if found == 0 else f"occurs {found} times"
            raise TracedCopyError(
                f"C mutant {mutant.name}: edit '{edit.label}' {where} in this read_stream.c (it must "
                "occur exactly once): the source differs from PostgreSQL 18.6's here"
            )
        text = text.replace(edit.old, edit.new)
    return text


def _external_functions(text: str) -> list[tuple[str, str, str]]:
    """(return type, name, parameters) of every function defined with external linkage."""
    code_only = _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    found = []
    for m in _DEFINITION.finditer(code_only):
        ret = m.group("ret").strip()
        if re.match(r"(static|extern)\b", ret) or "inline" in ret.split():
            continue
        params = " ".join(text[m.start("params") : m.end("params")].split())
        found.append((ret, m.group("name"), params))
    return found


_WRAPPERS_C = r"""
/*
 * --- Added by pytest-readstream's traced-copy builder (not part of PostgreSQL) ---
 * The stream's calls of the buffer manager are routed through these wrappers, which call the
 * real functions and record one RspTraceEvent per start and per wait.
 */
#include "utils/memutils.h"
#include "rsprobe_trace.h"
#include "rsprobe_traced.h"

static RspTraceEvent *rsp_trace_buf = NULL;
static int	rsp_trace_len = 0;
static int	rsp_trace_cap = 0;

/* The last additional-pin limit the stream obtained, until the next start consumes it. */
static int32 rsp_last_additional_pin_limit = -1;

void
rsp_trace_clear(void)
{
	rsp_trace_len = 0;
	rsp_last_additional_pin_limit = -1;
}

int
rsp_trace_count(void)
{
	return rsp_trace_len;
}

const RspTraceEvent *
rsp_trace_events(void)
{
	return rsp_trace_buf;
}

static void
rsp_trace_push(const RspTraceEvent *ev)
{
	if (rsp_trace_len == rsp_trace_cap)
	{
		int			newcap = rsp_trace_cap > 0 ? rsp_trace_cap * 2 : 256;

		/* TopMemoryContext: the trace outlives the statement that made it. */
		if (rsp_trace_buf == NULL)
			rsp_trace_buf = MemoryContextAlloc(TopMemoryContext, sizeof(RspTraceEvent) * newcap);
		else
			rsp_trace_buf = repalloc(rsp_trace_buf, sizeof(RspTraceEvent) * newcap);
		rsp_trace_cap = newcap;
	}
	rsp_trace_buf[rsp_trace_len++] = *ev;
}

static void
rsp_trace_start(BlockNumber blocknum, int asked, int accepted, int forwarded, Buffer first, int flags, bool must_wait)
{
	RspTraceEvent ev;

	memset(&ev, 0, sizeof(ev));
	ev.kind = RSP_EV_START;
	ev.buffer = first;
	ev.blocknum = blocknum;
	ev.nblocks_asked = asked;
	ev.nblocks_accepted = accepted;
	ev.forwarded = forwarded;
	ev.additional_pin_limit = rsp_last_additional_pin_limit;
	ev.flags = flags;
	ev.must_wait = must_wait;
	rsp_trace_push(&ev);
	rsp_last_additional_pin_limit = -1;
}

static inline uint32
rsp_wrap_GetAdditionalPinLimit(void)
{
	uint32		limit = GetAdditionalPinLimit();

	rsp_last_additional_pin_limit = (int32) Min(limit, (uint32) PG_INT32_MAX);
	return limit;
}

static inline uint32
rsp_wrap_GetAdditionalLocalPinLimit(void)
{
	uint32		limit = GetAdditionalLocalPinLimit();

	rsp_last_additional_pin_limit = (int32) Min(limit, (uint32) PG_INT32_MAX);
	return limit;
}

static inline bool
rsp_wrap_StartReadBuffers(ReadBuffersOperation *operation, Buffer *buffers, BlockNumber blocknum, int *nblocks, int flags)
{
	int			asked = *nblocks;
	int			forwarded = 0;
	bool		must_wait;

	/* Buffers pinned by an earlier split call are passed in at the front. */
	while (forwarded < asked && buffers[forwarded] != InvalidBuffer)
		forwarded++;
	must_wait = StartReadBuffers(operation, buffers, blocknum, nblocks, flags);
	rsp_trace_start(blocknum, asked, *nblocks, forwarded, buffers[0], flags, must_wait);
	return must_wait;
}

static inline bool
rsp_wrap_StartReadBuffer(ReadBuffersOperation *operation, Buffer *buffer, BlockNumber blocknum, int flags)
{
	bool		must_wait = StartReadBuffer(operation, buffer, blocknum, flags);

	rsp_trace_start(blocknum, 1, 1, 0, *buffer, flags, must_wait);
	return must_wait;
}

static inline void
rsp_wrap_WaitReadBuffers(ReadBuffersOperation *operation)
{
	RspTraceEvent ev;

	memset(&ev, 0, sizeof(ev));
	ev.kind = RSP_EV_WAIT;
	ev.buffer = operation->buffers[0];
	ev.blocknum = operation->blocknum;
	ev.nblocks_asked = operation->nblocks;
	ev.nblocks_accepted = operation->nblocks;
	ev.forwarded = 0;
	ev.additional_pin_limit = -1;
	ev.flags = operation->flags;
	ev.must_wait = true;
	/* Recorded before the call: a wait that raises an error was still asked for. */
	rsp_trace_push(&ev);
	WaitReadBuffers(operation);
}
/* --- end of the traced-copy builder's additions --- */
"""


def _header(functions: list[tuple[str, str, str]], digest: str, mutant: str | None) -> str:
    decls = "\n".join(f"extern {ret} {TRACED_PREFIX}{name}({params});" for ret, name, params in functions)
    return (
        "/*\n"
        " * Generated by pytest-readstream's traced-copy builder: the renamed entry points of a\n"
        f" * copy of read_stream.c (sha256 {digest[:16]}, mutant {mutant or 'none'}).\n"
        " */\n"
        "#ifndef RSPROBE_TRACED_H\n"
        "#define RSPROBE_TRACED_H\n\n"
        '#include "storage/read_stream.h"\n\n'
        f'#define RSPROBE_TRACED_MUTANT "{mutant or ""}"\n\n'
        f"{decls}\n\n"
        "#endif\t\t\t\t\t\t\t/* RSPROBE_TRACED_H */\n"
    )


def traced_copy_sources(read_stream_c: str, *, mutant: str | None = None) -> dict[str, str]:
    """The traced copy of ``read_stream_c`` (and its header), optionally with a C mutant.

    Returns ``{"rsprobe_traced_copy.c": ..., "rsprobe_traced.h": ...}``. The copy includes
    ``rsprobe_trace.h`` (the probe's, defining ``RspTraceEvent``) and defines the three trace
    functions. Raises :class:`TracedCopyError` with one line when the text is not a PostgreSQL
    18 ``read_stream.c`` or a mutant's edit does not match exactly once.
    """
    if mutant is not None and mutant not in MUTANTS:
        raise TracedCopyError(f"unknown C mutant {mutant!r}: available {', '.join(MUTANTS)}")
    digest = hashlib.sha256(read_stream_c.encode()).hexdigest()
    text = _apply_mutant(read_stream_c, MUTANTS[mutant]) if mutant else read_stream_c

    functions = _external_functions(text)
    names = {name for _, name, _ in functions}
    missing = [f for f in _REQUIRED_FUNCTIONS if f not in names]
    if missing:
        raise TracedCopyError(
            f"this read_stream.c defines no {', '.join(missing)}: not PostgreSQL 18's stream"
        )
    for name in sorted(names, key=len, reverse=True):
        text, _ = _replace_in_code(text, re.compile(rf"\b{re.escape(name)}\b"), TRACED_PREFIX + name)
    for call in WRAPPED_CALLS:
        text, count = _replace_in_code(text, re.compile(rf"\b{call}(\s*\()"), rf"rsp_wrap_{call}\1")
        if count == 0 and call in _REQUIRED_CALLS:
            raise TracedCopyError(f"this read_stream.c never calls {call}(): not PostgreSQL 18's stream")

    includes = list(re.finditer(r"^#include\s+[\"<][^\n]*\n", text, re.M))
    if not includes:
        raise TracedCopyError("this read_stream.c has no #include lines: not PostgreSQL's source")
    cut = includes[-1].end()
    banner = (
        "/*\n"
        " * Traced copy of read_stream.c generated by pytest-readstream at build time\n"
        f" * (sha256 of the original {digest[:16]}, C mutant: {mutant or 'none'}).\n"
        f" * External functions renamed with the prefix {TRACED_PREFIX}; buffer-manager calls\n"
        " * routed through the rsp_wrap_* wrappers below.\n"
        " */\n"
    )
    copy = banner + text[:cut] + _WRAPPERS_C + text[cut:]
    return {TRACED_C: copy, TRACED_H: _header(functions, digest, mutant)}
