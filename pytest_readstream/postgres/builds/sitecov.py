"""Statement coverage of ``read_stream.c`` under the conformance suite: which mutants are reached.

A mutant in code that no test executes cannot be killed, and running the suite against it only
costs time; it is *not reached*. To know which code runs, the unmutated copy is instrumented
before the traced-copy builder sees it: each statement that :func:`.systematic.statement_nodes`
counts gets a marker ``RSP_SITECOV_HIT(k);`` in front of it (an unbraced body of an ``if`` or a
loop becomes ``{ RSP_SITECOV_HIT(k); body }``), and a few declarations after the file's last
``#include`` define the marker. The first marker a backend process runs maps a file of one byte
per statement (``<dir>/hits.<pid>``, ``MAP_SHARED``), and every marker sets its byte: a write to
memory, so what a backend ran is on disk even when it is killed (an immediate shutdown's
``SIGQUIT``, a crash) without running any exit code. :func:`read_hits` takes the union over the
files of every backend.

The markers change no value the stream computes, so the instrumented copy also serves as the
unmutated reference of a systematic run (:mod:`.systematic_run`). The directory must be writable
by the server's OS user (mode 1777 when the harness runs as root and the server as ``postgres``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .cparse import CSource, apply_edits, parse_c
from .systematic import statement_nodes

__all__ = ["Instrumented", "instrument", "read_hits"]

_MARK = "RSP_SITECOV_HIT"


class Instrumented:
    """An instrumented ``read_stream.c``: its text and the byte range (in the original) of each
    counted statement, by marker index."""

    def __init__(self, text: str, statements: list[tuple[int, int]]) -> None:
        self.text = text
        self.statements = statements

    def reached(self, hits: set[int]) -> set[tuple[int, int]]:
        """The statements (byte ranges of the original) whose markers ran."""
        return {self.statements[k] for k in hits if 0 <= k < len(self.statements)}


def _prelude(n: int, directory: Path) -> str:
    d = str(directory).replace("\\", "\\\\").replace('"', '\\"')
    return f"""
/* --- statement coverage markers (pytest-readstream sitecov) --- */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned char *rsp_sitecov_map = NULL;

static void
rsp_sitecov_open(void)
{{
	char		path[1024];
	int			fd;

	snprintf(path, sizeof(path), "%s/hits.%d", "{d}", (int) getpid());
	fd = open(path, O_RDWR | O_CREAT, 0666);
	if (fd < 0 || ftruncate(fd, {n}) != 0)
	{{
		rsp_sitecov_map = (unsigned char *) MAP_FAILED;
		if (fd >= 0)
			close(fd);
		return;
	}}
	rsp_sitecov_map = (unsigned char *) mmap(NULL, {n}, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
}}

#define {_MARK}(k) \\
	do {{ \\
		if (rsp_sitecov_map == NULL) \\
			rsp_sitecov_open(); \\
		if (rsp_sitecov_map != (unsigned char *) MAP_FAILED) \\
			rsp_sitecov_map[(k)] = 1; \\
	}} while (0)
/* --- end of the coverage markers --- */
"""


def instrument(text: str, directory: Path) -> Instrumented:
    """``text`` (a C file) with a coverage marker before each counted statement of each function."""
    src: CSource = parse_c(text)
    statements: list[Any] = []
    for fn in src.functions():
        body = fn.node.child_by_field_name("body")
        if body is not None:
            statements.extend(statement_nodes(src, body))
    statements.sort(key=lambda n: n.start_byte)
    edits: list[tuple[int, int, str]] = []
    ranges = []
    for k, node in enumerate(statements):
        ranges.append((node.start_byte, node.end_byte))
        parent = node.parent
        braced = parent.type in ("compound_statement", "case_statement") or parent.type.startswith("preproc_")
        if braced:
            edits.append((node.start_byte, node.start_byte, f"{_MARK}({k}); "))
        else:
            # An unbraced body: the marker and the statement become one block.
            edits.append((node.start_byte, node.start_byte, f"{{ {_MARK}({k}); "))
            edits.append((node.end_byte, node.end_byte, " }"))
    includes = src.includes()
    if not includes:
        raise ValueError("the file has no #include lines: nowhere to put the coverage markers")
    cut = includes[-1].end_byte
    edits.append((cut, cut, _prelude(max(1, len(statements)), directory)))
    # Insertions at one offset keep their order (the closing brace of an unbraced body that ends
    # where the next statement begins comes first).
    ordered = sorted(enumerate(edits), key=lambda ie: (ie[1][0], 0 if ie[1][2] == " }" else 1, ie[0]))
    out = apply_edits(src.data, [e for _i, e in ordered]).decode("utf-8")
    return Instrumented(out, ranges)


def read_hits(directory: Path) -> set[int]:
    """The markers that ran in any backend that wrote into ``directory``."""
    hits: set[int] = set()
    for path in Path(directory).glob("hits.*"):
        data = path.read_bytes()
        hits.update(i for i, b in enumerate(data) if b)
    return hits
