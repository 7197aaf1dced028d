"""Fake PostgreSQL trees for the review's tests: a meson.build with a version and a read_stream.c
of the project's own making (no PostgreSQL source)."""

from __future__ import annotations

import subprocess
from pathlib import Path

STREAM = "src/backend/storage/aio/read_stream.c"
BUFMGR = "src/backend/storage/buffer/bufmgr.c"

STREAM_TEXT = """\
/* A stand-in for read_stream.c: the review's tests only need its path. */
#include "postgres.h"

void
read_stream_reset(ReadStream *stream)
{
\t/* Stop looking ahead. */
\tstream->distance = 0;
\twhile ((buffer = read_stream_next_buffer(stream, NULL)) != InvalidBuffer)
\t\tReleaseBuffer(buffer);
}
"""


def fake_tree(root: Path, version: str = "20devel") -> Path:
    (root / "src/backend/storage/aio").mkdir(parents=True)
    (root / "src/backend/storage/buffer").mkdir(parents=True)
    (root / "src/test/modules").mkdir(parents=True)
    (root / "meson.build").write_text(f"project('postgresql', ['c'], version: '{version}')\n")
    (root / STREAM).write_text(STREAM_TEXT)
    (root / BUFMGR).write_text("int\nStartReadBuffers(void)\n{\n\treturn 0;\n}\n")
    (root / "src/test/modules/t.pl").write_text("ok(1);\n")
    return root


def diff(a: Path, b: Path) -> str:
    """``git diff --no-index`` of two trees, as a patch against a's paths (``a/``, ``b/``)."""
    out = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/", str(a), str(b)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return (
        out.replace(f"a/{a}/", "a/").replace(f"b/{b}/", "b/").replace(f"a{a}/", "a/").replace(f"b{b}/", "b/")
    )
