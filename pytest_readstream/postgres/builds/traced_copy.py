"""A traced copy of the server's own ``read_stream.c``, with optional C-level mutants.

The probe extension drives a server's stream from outside: it sees what each consumer call
returns, but not the stream's own calls of the buffer manager. The model's harness sees every
``StartReadBuffers`` / ``WaitReadBuffers`` with the pin budget in force. To give a C build the
same view, the harness compiles the build's own ``read_stream.c``
(``src/backend/storage/aio/read_stream.c`` of the tree given with ``--readstream-pg-source``:
PostgreSQL 18, 19 or the development branch) a second time into the probe. The file is parsed
with a real C parser (tree-sitter's C grammar, :mod:`.cparse`), and changed in these mechanical
ways and nothing else:

1. **Renaming.** Every function the file defines with external linkage (``read_stream_begin_relation``,
   ``read_stream_next_buffer``, ``read_stream_reset``, ``read_stream_end``, and on 19+
   ``read_stream_pause``, ``read_stream_resume``, ...) gets the prefix ``rsp_traced_`` wherever
   the parse tree has its name as an identifier (never in a comment or a string), so the copy
   lives beside the server's own stream in one process. ``rsprobe_traced.h`` includes what the
   file includes and declares the renamed functions as the file defines them (on 19+ one takes
   an ``IOStats *``, declared by ``executor/instrument_node.h``, which the file includes).
2. **Wrappers.** The calls of ``StartReadBuffers``, ``StartReadBuffer``, ``WaitReadBuffers``,
   ``GetAdditionalPinLimit`` and ``GetAdditionalLocalPinLimit`` go through ``static`` wrappers
   generated from the prototypes of the server's own ``storage/bufmgr.h``: return type and
   parameters as declared there (``WaitReadBuffers`` returns ``void`` on 18 and ``bool`` on 19+),
   so a changed signature needs no edit here. Each wrapper calls the real function and records
   one :c:type:`RspTraceEvent` per start and per wait (``probe/rsprobe_trace.h``): the blocks
   asked and accepted, the buffers already pinned that the stream passed in (forwarded), the
   flags, the last additional-pin limit the stream obtained before that start, and what the call
   returned where it returns something (``StartReadBuffers``' need to wait, 19's
   ``WaitReadBuffers``' "needed to wait"). The trace is a growable array in ``TopMemoryContext``,
   read and cleared through ``rsp_trace_events`` / ``rsp_trace_count`` / ``rsp_trace_clear``.
3. **The stream's state.** ``struct ReadStream`` is private to ``read_stream.c``, and its fields
   differ by version (18 has one ``distance``; 19 ``readahead_distance``, ``combine_distance``,
   ``distance_decay_holdoff`` and the ``resume_*`` distances). The copy is compiled from the
   tree's own file, so the builder appends, inside the copy's translation unit, an accessor
   generated from the struct's fields as parsed: ``rsp_traced_stream_json`` writes every
   integer and boolean field under its own name (JSON), the buffers pinned in the queue, the
   forwarded ones and the I/Os in flight, after a run-time sanity check (the stream's callback
   and private data are the caller's, ``queue_size = max_pinned_buffers + 1``, its indexes
   inside their bounds). The same struct is the server's own, so the accessor reads a stream of
   the server's compiled ``read_stream.c`` as well.
4. **Mutants** (optional): a known bug applied to the file *before* the other steps, each edit a
   tree-sitter query inside one named function with the node it replaces. An edit must match
   exactly once; a mutant whose edits do not all match in this file does not apply to this
   version (:class:`CMutantNotApplicable`, one line naming the mutant and the edit), because an
   edit that lands elsewhere (or nowhere) would be a different bug or none.

Comments and the file's other code are left as they are, so a compiler error points at lines a
reader of ``read_stream.c`` recognises. The text of PostgreSQL's files is an input here, read from
the developer's tree or the fetched source at build time; none of it is kept in this project.
Without tree-sitter installed, :func:`traced_copy_sources` raises
:class:`~pytest_readstream.postgres.builds.cparse.CParserUnavailable` with one line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgHarnessError
from .cparse import CParam, CPrototype, CSource, apply_edits, parse_c

__all__ = [
    "BUFMGR_H",
    "MUTANTS",
    "TRACED_C",
    "TRACED_H",
    "TRACED_PREFIX",
    "WRAPPED_CALLS",
    "CMutant",
    "CMutantNotApplicable",
    "TracedCopyError",
    "mutant_problem",
    "traced_copy_sources",
]

#: The generated files, passed to ``build_shared_object`` beside the probe's own sources.
TRACED_C = "rsprobe_traced_copy.c"
TRACED_H = "rsprobe_traced.h"
#: Prefix of every renamed function with external linkage.
TRACED_PREFIX = "rsp_traced_"
#: Where a source tree and an installation keep the buffer manager's header.
BUFMGR_H = Path("src/include/storage/bufmgr.h")
#: Buffer-manager calls routed through logging wrappers (``rsp_wrap_<name>``), and what each is.
WRAPPED_CALLS = {
    "StartReadBuffers": "start",
    "StartReadBuffer": "start1",
    "WaitReadBuffers": "wait",
    "GetAdditionalPinLimit": "limit",
    "GetAdditionalLocalPinLimit": "limit",
}
# Calls no stream of PostgreSQL 18+ does without; a file lacking one is not a stream source.
_REQUIRED_CALLS = ("StartReadBuffers", "WaitReadBuffers", "GetAdditionalPinLimit")
_REQUIRED_FUNCTIONS = (
    "read_stream_begin_relation",
    "read_stream_next_buffer",
    "read_stream_reset",
    "read_stream_end",
)


class TracedCopyError(PgHarnessError):
    """``read_stream.c`` cannot be turned into the traced copy (or a mutant's edit does not apply)."""


class CMutantNotApplicable(TracedCopyError):
    """A C mutant whose edits do not match this version's ``read_stream.c`` (one line)."""


# --------------------------------------------------------------------------- C mutants
@dataclass(frozen=True)
class _Edit:
    """Replace the node captured ``@target`` by the query inside ``function`` (exactly ``count``
    matches, each replaced).

    ``new`` is a ``str.format`` template over the texts of the query's captures. ``function`` may
    name alternatives (``"read_stream_look_ahead|read_stream_should_look_ahead"``) where a later
    version moved the code into a function of its own: the matches of every alternative the file
    defines are counted together.
    """

    label: str
    function: str
    query: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class CMutant:
    """A known bug of ``read_stream.c``, applied as checked structured edits."""

    name: str
    bug: str
    edits: tuple[_Edit, ...]
    #: Where the bug lives: "stream" (the stream machinery every stream runs) or "block-range
    #: callback" (block_range_read_stream_cb: run by the probe's block-range streams and by the
    #: traced-scan driver of ``readstream compare``).
    scope: str = "stream"
    #: Fields of ``struct ReadBuffersOperation`` (``storage/bufmgr.h``) the mutated code reads.
    needs_operation_fields: tuple[str, ...] = ()


def _m(
    name: str, bug: str, *edits: _Edit, scope: str = "stream", needs_operation_fields: tuple[str, ...] = ()
) -> CMutant:
    return CMutant(name, bug, tuple(edits), scope, needs_operation_fields)


#: The C-level mutants, by name. Each edit is a tree-sitter query written against the grammar,
#: not against one version's text, so that it matches 18, 19 and the development branch where the
#: code it changes exists (field names that differ by version are alternatives of one pattern).
MUTANTS: dict[str, CMutant] = {
    m.name: m
    for m in (
        _m(
            "distance-plus-one",
            "after a wait the look-ahead (read-ahead) distance grows by one instead of doubling",
            _Edit(
                "distance = stream->distance * 2 (19+: readahead_distance)",
                "read_stream_next_buffer",
                """((assignment_expression
                      right: (binary_expression
                               left: (field_expression field: (field_identifier) @f) @lhs
                               operator: "*"
                               right: (number_literal) @n) @target)
                    (#match? @f "^(distance|readahead_distance)$") (#eq? @n "2"))""",
                "{lhs} + 1",
            ),
        ),
        _m(
            "pin-limit-ignored",
            "the stream asks for the additional-pin limit and ignores it",
            _Edit(
                "buffer_limit = Min(GetAdditionalPinLimit(), ...)",
                "read_stream_start_pending_read",
                """((expression_statement
                      (assignment_expression
                        left: (identifier) @v
                        right: (call_expression
                                 function: (identifier) @min
                                 arguments: (argument_list (call_expression function: (identifier) @get))))) @target
                    (#eq? @v "buffer_limit") (#eq? @min "Min") (#eq? @get "GetAdditionalPinLimit"))""",
                "{{\n\t\t(void) GetAdditionalPinLimit();\n\t\tbuffer_limit = PG_INT16_MAX;\n\t}}",
            ),
        ),
        _m(
            "end-without-wait",
            "reset and end neither wait for the reads in flight nor release the queued pins",
            _Edit(
                "the loop that consumes and releases what was not returned",
                "read_stream_reset",
                """((while_statement
                      condition: (parenthesized_expression
                                   (binary_expression
                                     left: (parenthesized_expression
                                             (assignment_expression
                                               right: (call_expression function: (identifier) @next)))))
                      body: (expression_statement (call_expression function: (identifier) @rel))) @target
                    (#eq? @next "read_stream_next_buffer") (#eq? @rel "ReleaseBuffer"))""",
                "",
            ),
        ),
        _m(
            "forwarded-lost",
            "after a split read the forwarded buffer is forgotten (its pin leaks, the block is pinned again)",
            _Edit(
                "counting the forwarded buffers: forwarded++",
                "read_stream_start_pending_read",
                """((while_statement
                      condition: (parenthesized_expression
                                   (binary_expression
                                     right: (binary_expression left: (_) @slot operator: "!=" right: (identifier) @inv)))
                      body: (expression_statement (update_expression argument: (identifier) @v) @target))
                    (#eq? @v "forwarded") (#eq? @inv "InvalidBuffer"))""",
                "{slot} = InvalidBuffer",
            ),
        ),
        _m(
            "io-index-no-wrap",
            "the index of the oldest I/O in flight does not wrap around at max_ios",
            _Edit(
                "if (++stream->oldest_io_index == stream->max_ios) ... = 0",
                "read_stream_next_buffer",
                """((if_statement
                      condition: (parenthesized_expression
                                   (binary_expression
                                     left: (update_expression argument: (field_expression field: (field_identifier) @f)) @inc
                                     operator: "=="))) @target
                    (#eq? @f "oldest_io_index"))""",
                "{inc};",
            ),
        ),
        _m(
            "no-combine",
            "a block that continues the pending read is never merged into it (every read is one block)",
            _Edit(
                "can we merge it with the pending read?",
                "read_stream_look_ahead",
                """((if_statement
                      condition: (parenthesized_expression
                                   (binary_expression
                                     left: (binary_expression left: (field_expression field: (field_identifier) @a))
                                     operator: "&&"
                                     right: (binary_expression operator: "==" right: (identifier) @b)) @target))
                    (#eq? @a "pending_read_nblocks") (#eq? @b "blocknum"))""",
                "false && ({target})",
            ),
        ),
        _m(
            "block-range-past-end",
            "the block-range callback returns one block past the end of its range",
            _Edit(
                "the end-of-range test current_blocknum < last_exclusive",
                "block_range_read_stream_cb",
                """((binary_expression
                      left: (field_expression field: (field_identifier) @a)
                      operator: "<" @target
                      right: (field_expression field: (field_identifier) @b))
                    (#eq? @a "current_blocknum") (#eq? @b "last_exclusive"))""",
                "<=",
            ),
            scope="block-range callback",
        ),
        _m(
            "reset-stays-ended",
            "reset leaves the (read-ahead) distance at 0, so the stream returns nothing after a reset",
            _Edit(
                "start off assuming data is cached: distance = 1 (19+: readahead_distance)",
                "read_stream_reset",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (number_literal) @n)) @target
                    (#match? @f "^(distance|readahead_distance)$") (#eq? @n "1"))""",
                "",
            ),
        ),
        # What PostgreSQL 19 added: two distances, the decay hold-off, pause/resume, foreign I/O.
        _m(
            "combine-distance-stuck",
            "after an I/O the combine distance does not grow, so reads stay as small as the stream began",
            _Edit(
                "stream->combine_distance = combine_distance (the doubled value)",
                "read_stream_next_buffer",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (identifier) @v)) @target
                    (#eq? @f "combine_distance") (#eq? @v "combine_distance"))""",
                "",
            ),
        ),
        _m(
            "decay-without-holdoff",
            "an I/O does not hold the distances off decaying, so the next cached blocks shrink them at once",
            _Edit(
                "stream->distance_decay_holdoff = stream->max_pinned_buffers",
                "read_stream_next_buffer",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (field_expression field: (field_identifier) @g))) @target
                    (#eq? @f "distance_decay_holdoff") (#eq? @g "max_pinned_buffers"))""",
                "",
            ),
        ),
        _m(
            "resume-stays-paused",
            "read_stream_resume does not restore the read-ahead distance, so a paused stream stays at its end",
            _Edit(
                "stream->readahead_distance = stream->resume_readahead_distance",
                "read_stream_resume",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (field_expression field: (field_identifier) @g))) @target
                    (#eq? @f "readahead_distance") (#eq? @g "resume_readahead_distance"))""",
                "",
            ),
        ),
        _m(
            "foreign-io-not-waited",
            "the stream does not wait for another backend's read that StartReadBuffers joined, and "
            "returns its buffer before the read completed",
            _Edit(
                "needed_wait = WaitReadBuffers(&...op), skipped for a foreign I/O",
                "read_stream_next_buffer",
                """((assignment_expression
                      left: (identifier) @v
                      right: (call_expression
                               function: (identifier) @w
                               arguments: (argument_list (pointer_expression argument: (_) @op))) @target)
                    (#eq? @v "needed_wait") (#eq? @w "WaitReadBuffers"))""",
                "({op}.foreign_io ? false : {target})",
            ),
            needs_operation_fields=("foreign_io",),
        ),
        # Issue 26: one planted bug per class of bugs the suite missed (docs/conformance.md).
        _m(
            "io-combine-limit-read-live",
            "class 1 (settings changed while a stream is open): the look-ahead combines up to the "
            "io_combine_limit GUC as it is now, not the limit the stream was begun with",
            _Edit(
                "pending_read_nblocks == stream->io_combine_limit (twice)",
                "read_stream_look_ahead",
                """((binary_expression
                      left: (field_expression field: (field_identifier) @p)
                      operator: "=="
                      right: (field_expression argument: (identifier) @s field: (field_identifier) @f) @target)
                    (#eq? @p "pending_read_nblocks") (#eq? @s "stream") (#eq? @f "io_combine_limit"))""",
                "io_combine_limit",
                count=2,
            ),
        ),
        _m(
            "combine-limit-read-live",
            "class 1 (settings changed while a stream is open): after an I/O the combine distance "
            "grows up to the io_combine_limit GUC as it is now, not the stream's own limit",
            _Edit(
                "combine_distance = Min(combine_distance, stream->io_combine_limit)",
                "read_stream_next_buffer",
                """((call_expression
                      function: (identifier) @min
                      arguments: (argument_list
                                   (identifier) @v
                                   (field_expression field: (field_identifier) @f) @target))
                    (#eq? @min "Min") (#eq? @v "combine_distance") (#eq? @f "io_combine_limit"))""",
                "io_combine_limit",
            ),
        ),
        _m(
            "pin-limit-int16-truncated",
            "class 2 (extreme limits): GetAdditionalPinLimit() is cast to int16 instead of capped at "
            "PG_INT16_MAX, so a budget of 65536 + n pins allows n",
            _Edit(
                "buffer_limit = Min(GetAdditionalPinLimit(), PG_INT16_MAX)",
                "read_stream_start_pending_read",
                """((call_expression
                      function: (identifier) @min
                      arguments: (argument_list (call_expression function: (identifier) @get) @inner
                                                (identifier) @cap)) @target
                    (#eq? @min "Min") (#eq? @get "GetAdditionalPinLimit") (#eq? @cap "PG_INT16_MAX"))""",
                "(int16) {inner}",
            ),
        ),
        _m(
            "forwarded-overflow-not-copied",
            "class 3 (constructed edge sequences): a split read whose forwarded buffer lands in the "
            "overflow zone is copied to the front of the queue without it, so the next start pins "
            "its block again and the forwarded pin leaks",
            _Edit(
                "overflow = (buffer_index + nblocks + forwarded) - stream->queue_size",
                "read_stream_start_pending_read",
                """((binary_expression
                      left: (parenthesized_expression
                              (binary_expression
                                left: (binary_expression left: (identifier) @a operator: "+" right: (identifier) @b) @keep
                                operator: "+"
                                right: (identifier) @f) @target)
                      operator: "-"
                      right: (field_expression field: (field_identifier) @q))
                    (#eq? @a "buffer_index") (#eq? @b "nblocks") (#eq? @f "forwarded") (#eq? @q "queue_size"))""",
                "{keep}",
            ),
        ),
        _m(
            "advice-never",
            "class 4 (the flags of each start): under io_method=sync the stream never issues "
            "read-ahead advice (READ_BUFFERS_ISSUE_ADVICE), so random reads are not prefetched",
            _Edit(
                "stream->advice_enabled = true",
                "read_stream_begin_impl",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (true))) @target
                    (#eq? @f "advice_enabled"))""",
                ";",
            ),
        ),
        _m(
            "hit-distance-not-decayed",
            "class 5 (how far ahead the callback is called): a start that needs no I/O does not decay "
            "the (read-ahead) distance, so a stream that ramped up keeps asking the callback that far "
            "ahead over cached blocks, and never enters the fast path",
            _Edit(
                "if (stream->distance > 1) stream->distance-- (19+: readahead_distance)",
                "read_stream_start_pending_read",
                """((if_statement
                      condition: (parenthesized_expression
                                   (binary_expression
                                     left: (field_expression field: (field_identifier) @f)
                                     operator: ">"
                                     right: (number_literal) @one))
                      consequence: (expression_statement
                                     (update_expression
                                       argument: (field_expression field: (field_identifier) @g)))) @target
                    (#match? @f "^(distance|readahead_distance)$") (#eq? @g @f) (#eq? @one "1"))""",
                ";",
            ),
        ),
        _m(
            "fast-path-never",
            "class 6 (the fast path): an all-cached stream never enters the fast path "
            "(stream->fast_path = true is lost), every buffer takes the queue's regular path",
            _Edit(
                "stream->fast_path = true",
                "read_stream_next_buffer",
                """((expression_statement
                      (assignment_expression
                        left: (field_expression field: (field_identifier) @f)
                        right: (true))) @target
                    (#eq? @f "fast_path"))""",
                ";",
            ),
        ),
        _m(
            "other-temp-accepted",
            "class 7 (entry points): a stream on another session's temporary table is begun instead "
            "of raising 'cannot access temporary tables of other sessions'",
            _Edit(
                "if (rel && RELATION_IS_OTHER_TEMP(rel)) ereport(ERROR, ...)",
                "read_stream_begin_impl",
                """((if_statement
                      condition: (parenthesized_expression
                                   (binary_expression right: (call_expression function: (identifier) @m)))) @target
                    (#eq? @m "RELATION_IS_OTHER_TEMP"))""",
                ";",
            ),
        ),
        _m(
            "descending-merged",
            "class 8 (order assumptions): a block just below the pending read is merged into it "
            "without moving the read's start, so a descending stream reads (and returns) the block "
            "after the read instead of the one before it",
            _Edit(
                "pending_read_blocknum + pending_read_nblocks == blocknum",
                "read_stream_look_ahead",
                """((binary_expression
                      left: (binary_expression
                              left: (field_expression field: (field_identifier) @a) @start
                              operator: "+"
                              right: (field_expression field: (field_identifier) @b))
                      operator: "=="
                      right: (identifier) @v) @target
                    (#eq? @a "pending_read_blocknum") (#eq? @b "pending_read_nblocks") (#eq? @v "blocknum"))""",
                "({target} || {start} == {v} + 1)",
            ),
        ),
    )
}


def _apply_mutant(text: str, mutant: CMutant, bufmgr: CSource, version: str | None) -> str:
    src = parse_c(text)
    where = f"PostgreSQL {version}'s read_stream.c" if version else "this read_stream.c"
    op_fields = {f.name for f in bufmgr.struct_fields("ReadBuffersOperation") or []}
    for field in mutant.needs_operation_fields:
        if field not in op_fields:
            raise CMutantNotApplicable(
                f"C mutant {mutant.name} does not apply to {where}: its ReadBuffersOperation has no "
                f"{field} (storage/bufmgr.h)"
            )
    edits = []
    for edit in mutant.edits:
        names = edit.function.split("|")
        fns = [fn for fn in (src.function(name) for name in names) if fn is not None]
        shown = " or ".join(f"{name}()" for name in names)
        if not fns:
            raise CMutantNotApplicable(
                f"C mutant {mutant.name} does not apply to {where}: it defines no {shown}"
            )
        found = [m for fn in fns for m in src.matches(edit.query, within=fn.node)]
        if len(found) != edit.count:
            want = "once" if edit.count == 1 else f"{edit.count} times"
            how = "matches nothing" if not found else f"matches {len(found)} times (it must match {want})"
            raise CMutantNotApplicable(
                f"C mutant {mutant.name} does not apply to {where}: edit '{edit.label}' in {shown} {how}"
            )
        for match in found:
            caps = {name: src.node_text(node) for name, node in match.items()}
            target = match["target"]
            edits.append((target.start_byte, target.end_byte, edit.new.format(**caps)))
    return apply_edits(src.data, edits).decode("utf-8")


# --------------------------------------------------------------------------- wrappers
_TRACE_C = r"""
/*
 * --- Added by pytest-readstream's traced-copy builder (not part of PostgreSQL) ---
 * The stream's calls of the buffer manager are routed through the rsp_wrap_* wrappers below,
 * generated from the prototypes of the server's storage/bufmgr.h; they call the real functions
 * and record one RspTraceEvent per start and per wait.
 */
#include "lib/stringinfo.h"
#include "utils/memutils.h"
#include "rsprobe_trace.h"
#include "rsprobe_traced.h"

static RspTraceEvent *rsp_trace_buf = NULL;
static int	rsp_trace_len = 0;
static int	rsp_trace_cap = 0;

/* The last additional-pin limit the stream obtained, until the next start consumes it. */
static int32 rsp_last_additional_pin_limit = -1;

/*
 * A chosen answer of GetAdditionalPinLimit() / GetAdditionalLocalPinLimit() to the stream
 * (rsp_force_pin_limit), -1 for the buffer manager's own: a test can give a stream the pin budget
 * of a pool of tens of thousands of buffers, or one beyond int16, without such a pool.  The
 * probe puts it back to -1 at the end of every transaction.
 */
static int64 rsp_forced_additional_pin_limit = -1;

void
rsp_trace_force_pin_limit(int64 limit)
{
	rsp_forced_additional_pin_limit = limit;
}

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

/* Append an event; its index, for a result filled in once the call returns. */
static int
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
	rsp_trace_buf[rsp_trace_len] = *ev;
	return rsp_trace_len++;
}

static void
rsp_trace_start(BlockNumber blocknum, int asked, int accepted, int forwarded, Buffer first, int flags,
				bool has_result, int32 result)
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
	ev.must_wait = has_result && result != 0;
	ev.has_result = has_result;
	ev.result = result;
	rsp_trace_push(&ev);
	rsp_last_additional_pin_limit = -1;
}

/* A wait is recorded before the call: a wait that raises an error was still asked for. */
static int
rsp_trace_wait(Buffer first, BlockNumber blocknum, int nblocks, int flags)
{
	RspTraceEvent ev;

	memset(&ev, 0, sizeof(ev));
	ev.kind = RSP_EV_WAIT;
	ev.buffer = first;
	ev.blocknum = blocknum;
	ev.nblocks_asked = nblocks;
	ev.nblocks_accepted = nblocks;
	ev.additional_pin_limit = -1;
	ev.flags = flags;
	ev.must_wait = true;
	return rsp_trace_push(&ev);
}

/* Unused where WaitReadBuffers returns void (PostgreSQL 18). */
pg_attribute_unused()
static void
rsp_trace_result(int index, int32 result)
{
	rsp_trace_buf[index].has_result = true;
	rsp_trace_buf[index].result = result;
}

static void
rsp_note_pin_limit(int64 limit)
{
	rsp_last_additional_pin_limit = (int32) Min(Max(limit, 0), (int64) PG_INT32_MAX);
}
"""

#: The parameters a wrapper's trace reads, by role: the type as declared, and names it may have.
_ROLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "operation": (("ReadBuffersOperation *",), ("operation",)),
    "buffers": (("Buffer *",), ("buffers", "buffer")),
    "blocknum": (("BlockNumber",), ("blocknum",)),
    "nblocks": (("int *", "int16 *", "int32 *"), ("nblocks",)),
    "flags": (("int", "uint16", "uint32", "int32"), ("flags",)),
}
_NEEDED_ROLES = {
    "start": ("operation", "buffers", "blocknum", "nblocks", "flags"),
    "start1": ("operation", "buffers", "blocknum", "flags"),
    "wait": ("operation",),
    "limit": (),
}


def _role(proto: CPrototype, params: list[CParam], role: str) -> str:
    types, names = _ROLES[role]
    by_name = [p for p in params if p.name.lower() in names]
    by_type = [p for p in params if p.type in types]
    for group in (
        [p for p in by_name if p.type in types],
        by_type if len(by_type) == 1 else [],
    ):
        if group:
            return group[0].name
    raise TracedCopyError(
        f"{proto.name}() in this storage/bufmgr.h has no parameter the trace can read as its {role} "
        f"(declared: {proto.signature()})"
    )


def _wrapper(proto: CPrototype, kind: str, op_fields: set[str]) -> str:
    params = [CParam(p.type, p.name or f"rsp_arg{i}") for i, p in enumerate(proto.params)]
    roles = {r: _role(proto, params, r) for r in _NEEDED_ROLES[kind]}
    ret = proto.return_type
    void = proto.returns_void
    call = f"{proto.name}({', '.join(p.name for p in params)})"
    has_result = "false" if void else "true"
    result = "0" if void else "(int32) rsp_result"
    body: list[str] = []
    if not void:
        body.append(f"\t{ret}\t\trsp_result;")
    if kind == "start":
        b, n = roles["buffers"], roles["nblocks"]
        body += [
            f"\tint\t\t\trsp_asked = *{n};",
            "\tint\t\t\trsp_forwarded = 0;",
            "",
            "\t/* Buffers pinned by an earlier split call are passed in at the front. */",
            f"\twhile (rsp_forwarded < rsp_asked && {b}[rsp_forwarded] != InvalidBuffer)",
            "\t\trsp_forwarded++;",
            f"\t{'rsp_result = ' if not void else ''}{call};",
            f"\trsp_trace_start({roles['blocknum']}, rsp_asked, *{n}, rsp_forwarded, {b}[0], "
            f"(int) {roles['flags']}, {has_result}, {result});",
        ]
    elif kind == "start1":
        body += [
            "",
            f"\t{'rsp_result = ' if not void else ''}{call};",
            f"\trsp_trace_start({roles['blocknum']}, 1, 1, 0, *{roles['buffers']}, (int) {roles['flags']}, "
            f"{has_result}, {result});",
        ]
    elif kind == "wait":
        op = roles["operation"]

        def field(name: str, default: str) -> str:
            return f"{op}->{name}" if name in op_fields else default

        body += [
            f"\tint\t\t\trsp_index = rsp_trace_wait({field('buffers', 'NULL')} != NULL ? "
            f"{field('buffers', 'NULL')}[0] : InvalidBuffer, {field('blocknum', 'InvalidBlockNumber')}, "
            f"(int) {field('nblocks', '0')}, (int) {field('flags', '0')});",
            "",
            f"\t{'rsp_result = ' if not void else ''}{call};",
        ]
        if not void:
            body.append("\trsp_trace_result(rsp_index, (int32) rsp_result);")
        else:
            body.append("\t(void) rsp_index;")
    else:  # limit
        body += [
            "",
            f"\trsp_result = {call};",
            "\tif (rsp_forced_additional_pin_limit >= 0)",
            f"\t\trsp_result = ({ret}) rsp_forced_additional_pin_limit;",
            "\trsp_note_pin_limit((int64) rsp_result);",
        ]
        if void:
            raise TracedCopyError(
                f"{proto.name}() in this storage/bufmgr.h returns void: no pin limit to trace"
            )
    if not void:
        body.append("\treturn rsp_result;")
    sig = proto.signature(f"rsp_wrap_{proto.name}")
    return (
        "static inline "
        + sig.replace(f" rsp_wrap_{proto.name}(", f"\nrsp_wrap_{proto.name}(", 1)
        + ("\n{\n" + "\n".join(body) + "\n}\n")
    )


# --------------------------------------------------------------------------- stream state
# Field types written as numbers (and bool as true/false); pointers, arrays and others are skipped.
_INTEGRAL = {
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unsigned",
    "short",
    "long",
    "size_t",
    "Size",
    "BlockNumber",
    "Buffer",
    "char",
}
_STATE_NEEDS = ("callback", "callback_private_data", "queue_size", "max_pinned_buffers")
# Run-time sanity checks, each used when every field it names exists (``s`` is the stream).
_CHECKS = (
    (("callback",), "s->callback == callback"),
    (("callback_private_data",), "s->callback_private_data == callback_private_data"),
    (("per_buffer_data_size",), "s->per_buffer_data_size == per_buffer_data_size"),
    (("per_buffer_data",), "(per_buffer_data_size == 0) == (s->per_buffer_data == NULL)"),
    (
        ("max_pinned_buffers", "queue_size"),
        "s->max_pinned_buffers >= 1 && s->queue_size == s->max_pinned_buffers + 1",
    ),
    (("io_combine_limit",), "s->io_combine_limit >= 1"),
    (("max_ios",), "s->max_ios >= 1"),
    (("ios_in_progress", "max_ios"), "s->ios_in_progress >= 0 && s->ios_in_progress <= s->max_ios"),
    (
        ("pinned_buffers", "max_pinned_buffers"),
        "s->pinned_buffers >= 0 && s->pinned_buffers <= s->max_pinned_buffers",
    ),
    (
        ("forwarded_buffers", "io_combine_limit"),
        "s->forwarded_buffers >= 0 && s->forwarded_buffers <= s->io_combine_limit",
    ),
    (
        ("oldest_buffer_index", "queue_size"),
        "s->oldest_buffer_index >= 0 && s->oldest_buffer_index < s->queue_size",
    ),
    (
        ("next_buffer_index", "queue_size"),
        "s->next_buffer_index >= 0 && s->next_buffer_index < s->queue_size",
    ),
    (("oldest_io_index", "max_ios"), "s->oldest_io_index >= 0 && s->oldest_io_index < s->max_ios"),
    (("ios",), "s->ios != NULL"),
)
# The lists the accessor writes, each when the fields it walks exist.
_LISTS = (
    (
        "buffers",
        ("pinned_buffers", "oldest_buffer_index", "queue_size", "buffers"),
        "s->pinned_buffers",
        "%d",
        "s->buffers[(s->oldest_buffer_index + i) % s->queue_size]",
    ),
    (
        "forwarded",
        ("forwarded_buffers", "next_buffer_index", "queue_size", "buffers"),
        "s->forwarded_buffers",
        "%d",
        "s->buffers[(s->next_buffer_index + i) % s->queue_size]",
    ),
)
_IN_FLIGHT_NEEDS = ("ios_in_progress", "oldest_io_index", "max_ios", "ios")


def _state_accessor(src: CSource) -> tuple[str, str | None]:
    """The accessor's C text, and why it reports nothing (``None`` when it reads the struct)."""
    fields = src.struct_fields("ReadStream")
    sig = (
        "bool\nrsp_traced_stream_json(const ReadStream *s, StringInfo out, ReadStreamBlockNumberCB callback,\n"
        "\t\t\t\t\t   const void *callback_private_data, size_t per_buffer_data_size)\n"
    )
    missing = [] if fields is None else [f for f in _STATE_NEEDS if f not in {x.name for x in fields}]
    if fields is None or missing:
        why = (
            "this read_stream.c defines no struct ReadStream"
            if fields is None
            else f"this read_stream.c's struct ReadStream has no {', '.join(missing)}"
        )
        body = (
            f"{sig}{{\n\t/* Not generated: {why}. */\n"
            "\t(void) s;\n\t(void) callback;\n\t(void) callback_private_data;\n\t(void) per_buffer_data_size;\n"
            '\tappendStringInfoString(out, "null");\n\treturn false;\n}\n'
        )
        return body, why
    names = {f.name for f in fields}
    checks = [expr for needs, expr in _CHECKS if all(n in names for n in needs)]
    lines = [
        "/*",
        " * Generated from struct ReadStream as this read_stream.c declares it: every integer and",
        " * boolean field under its own name, the queue's pinned and forwarded buffers and the I/Os",
        " * in flight, once the sanity checks below hold (else JSON null).",
        " */",
        sig + "{",
        "\tif (s == NULL ||",
        "\t\t!(" + " &&\n\t\t  ".join(checks) + "))",
        "\t{",
        '\t\tappendStringInfoString(out, "null");',
        "\t\treturn false;",
        "\t}",
    ]
    lines.append("\tappendStringInfoChar(out, '{');")
    sep = ""
    for f in fields:
        if f.pointer or f.array:
            continue
        key = f'"{sep}\\"{f.name}\\":'
        if f.type == "bool":
            lines.append(f'\tappendStringInfo(out, {key}%s", s->{f.name} ? "true" : "false");')
        elif f.type.split()[-1] in _INTEGRAL:
            lines.append(f'\tappendStringInfo(out, {key}%lld", (long long) s->{f.name});')
        else:
            continue
        sep = ","
    for key, needs, count, fmt, expr in _LISTS:
        if all(n in names for n in needs):
            lines += [
                f'\tappendStringInfoString(out, ",\\"{key}\\":[");',
                f"\tfor (int i = 0; i < {count}; i++)",
                f'\t\tappendStringInfo(out, "%s{fmt}", i ? "," : "", {expr});',
                "\tappendStringInfoChar(out, ']');",
            ]
    if all(n in names for n in _IN_FLIGHT_NEEDS):
        lines += [
            '\tappendStringInfoString(out, ",\\"in_flight\\":[");',
            "\tfor (int i = 0; i < s->ios_in_progress; i++)",
            "\t{",
            "\t\tconst ReadBuffersOperation *op = &s->ios[(s->oldest_io_index + i) % s->max_ios].op;",
            "",
            '\t\tappendStringInfo(out, "%s[%u,%d]", i ? "," : "", op->blocknum, (int) op->nblocks);',
            "\t}",
            "\tappendStringInfoChar(out, ']');",
        ]
    lines += ["\tappendStringInfoChar(out, '}');", "\treturn true;", "}", ""]
    return "\n".join(lines), None


# --------------------------------------------------------------------------- the copy
def _header(
    includes: list[str],
    functions: list[str],
    digest: str,
    mutant: str | None,
    state_why: str | None,
    pause: bool,
) -> str:
    decls = "\n".join(f"extern {sig};" for sig in functions)
    why = (state_why or "").replace("\\", "\\\\").replace('"', '\\"')
    return (
        "/*\n"
        " * Generated by pytest-readstream's traced-copy builder: the renamed entry points of a\n"
        f" * copy of read_stream.c (sha256 {digest[:16]}, mutant {mutant or 'none'}), with the\n"
        " * headers that file includes (its definitions use their types).\n"
        " */\n"
        "#ifndef RSPROBE_TRACED_H\n"
        "#define RSPROBE_TRACED_H\n\n" + "".join(includes) + '#include "lib/stringinfo.h"\n\n'
        f'#define RSPROBE_TRACED_MUTANT "{mutant or ""}"\n'
        f"#define RSPROBE_TRACED_STATE {0 if state_why else 1}\n"
        f'#define RSPROBE_TRACED_STATE_WHY "{why}"\n'
        f"#define RSPROBE_TRACED_HAS_PAUSE {1 if pause else 0}\n\n"
        f"{decls}\n\n"
        "/* The stream's own fields as JSON (null when the sanity checks fail); true when written. */\n"
        "extern bool rsp_traced_stream_json(const ReadStream *s, StringInfo out, ReadStreamBlockNumberCB callback,\n"
        "\t\t\t\t\t\t\t\t   const void *callback_private_data, size_t per_buffer_data_size);\n\n"
        "#endif\t\t\t\t\t\t\t/* RSPROBE_TRACED_H */\n"
    )


def mutant_problem(
    read_stream_c: str, mutant: str, *, bufmgr_h: str, version: str | None = None
) -> str | None:
    """Why ``mutant`` does not apply to this ``read_stream.c`` (one line), or ``None`` when it does."""
    try:
        _apply_mutant(read_stream_c, MUTANTS[mutant], parse_c(bufmgr_h), version)
    except CMutantNotApplicable as err:
        return str(err)
    return None


def traced_copy_sources(
    read_stream_c: str, *, bufmgr_h: str, mutant: str | None = None, version: str | None = None
) -> dict[str, str]:
    """The traced copy of ``read_stream_c`` (and its header), optionally with a C mutant.

    ``bufmgr_h`` is the text of the server's ``storage/bufmgr.h`` (its installed header, or the
    tree's ``src/include/storage/bufmgr.h``): the wrappers are generated from its prototypes.
    ``version`` only names the version in messages. Returns ``{"rsprobe_traced_copy.c": ...,
    "rsprobe_traced.h": ...}``. Raises :class:`TracedCopyError` with one line when the text is
    not a stream's source, or :class:`CMutantNotApplicable` when the mutant's edits do not match.
    """
    if mutant is not None and mutant not in MUTANTS:
        raise TracedCopyError(f"unknown C mutant {mutant!r}: available {', '.join(MUTANTS)}")
    digest = hashlib.sha256(read_stream_c.encode()).hexdigest()
    bufmgr = parse_c(bufmgr_h)
    text = _apply_mutant(read_stream_c, MUTANTS[mutant], bufmgr, version) if mutant else read_stream_c
    src = parse_c(text)

    external = [f for f in src.functions() if f.external]
    names = {f.name for f in external}
    missing = [f for f in _REQUIRED_FUNCTIONS if f not in names]
    if missing:
        raise TracedCopyError(f"this read_stream.c defines no {', '.join(missing)}: not PostgreSQL's stream")
    calls = src.calls(WRAPPED_CALLS)
    called = {name for name, _ in calls}
    for call in _REQUIRED_CALLS:
        if call not in called:
            raise TracedCopyError(f"this read_stream.c never calls {call}(): not PostgreSQL's stream")
    protos = bufmgr.prototypes(called)
    absent = sorted(called - set(protos))
    if absent:
        raise TracedCopyError(
            f"the server's storage/bufmgr.h declares no {', '.join(absent)}(), which this read_stream.c calls"
        )
    op_fields = {f.name for f in bufmgr.struct_fields("ReadBuffersOperation") or []}
    wrappers = "".join(
        "\n" + _wrapper(protos[name], WRAPPED_CALLS[name], op_fields)
        for name in WRAPPED_CALLS
        if name in called
    )

    edits = [(n.start_byte, n.end_byte, TRACED_PREFIX + src.node_text(n)) for n in src.identifiers(names)]
    edits += [(n.start_byte, n.end_byte, f"rsp_wrap_{name}") for name, n in calls]
    includes = src.includes()
    if not includes:
        raise TracedCopyError("this read_stream.c has no #include lines: not PostgreSQL's source")
    cut = includes[-1].end_byte
    state_c, state_why = _state_accessor(src)
    pause = {"read_stream_pause", "read_stream_resume"} <= names
    banner = (
        "/*\n"
        " * Traced copy of read_stream.c generated by pytest-readstream at build time\n"
        f" * (sha256 of the original {digest[:16]}, C mutant: {mutant or 'none'}).\n"
        f" * External functions renamed with the prefix {TRACED_PREFIX}; buffer-manager calls\n"
        " * routed through the rsp_wrap_* wrappers below; the stream-state accessor at the end.\n"
        " */\n"
    )
    renamed = apply_edits(src.data, edits).decode("utf-8")
    # Byte offsets of the original: the cut after the last include shifted by the edits before it.
    shift = sum(len(new.encode()) - (end - start) for start, end, new in edits if end <= cut)
    cut_at = cut + shift
    copy_bytes = renamed.encode("utf-8")
    copy = (
        banner
        + copy_bytes[:cut_at].decode("utf-8")
        + _TRACE_C
        + wrappers
        + "/* --- end of the traced-copy builder's additions before the file's own code --- */\n"
        + copy_bytes[cut_at:].decode("utf-8")
        + "\n/* --- Added by pytest-readstream's traced-copy builder: the stream-state accessor --- */\n"
        + state_c
    )
    # The renamed definitions, as the header declares them.
    renamed_src = parse_c(renamed)
    signatures = []
    for f in renamed_src.functions():
        if f.name.startswith(TRACED_PREFIX) and f.name[len(TRACED_PREFIX) :] in names:
            signatures.append(" ".join(renamed_src.data[f.start : f.body_start].decode("utf-8").split()))
    include_lines = [
        src.node_text(n) if src.node_text(n).endswith("\n") else src.node_text(n) + "\n" for n in includes
    ]
    header = _header(include_lines, signatures, digest, mutant, state_why, pause)
    return {TRACED_C: copy, TRACED_H: header}
