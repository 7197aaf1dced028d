"""Building and installing the probe extension (``probe/rsprobe.c``) for a server under test.

The probe's C sources ship inside the package. :func:`build_probe` compiles them with
:func:`~pytest_readstream.postgres.builds._cbuild.build_shared_object` against the server's own
headers (``pg_config`` in its ``bindir``), cached by compiler, server version, headers and
source hash, and lays the result out as an extension directory of the harness's own: the
shared object, and ``rsprobe.control`` and ``rsprobe--1.0.sql`` in its ``extension``
subdirectory (where PostgreSQL 18+ looks for control files under each ``extension_control_path``
entry). A server loads it
through two PostgreSQL 18 settings, set per session by a superuser (:meth:`ProbeInstall.session_sql`),
so nothing is written into the server's installation:

* ``extension_control_path`` finds the control file (``CREATE EXTENSION rsprobe``);
* ``dynamic_library_path`` finds ``rsprobe.so`` (the control file names it without ``$libdir``).

With ``traced_source`` (a ``read_stream.c`` file) the probe is compiled with ``-DRSPROBE_TRACED``
together with the traced copy that :func:`pytest_readstream.postgres.builds.traced_copy.traced_copy_sources`
generates from it and the server's installed ``storage/bufmgr.h`` (the wrappers' prototypes):
every ``StartReadBuffers``/``WaitReadBuffers`` of the stream is then reported, and the stream's
state is read by the accessor generated from the tree's ``struct ReadStream``. Where the server's
``storage/read_stream.h`` declares ``read_stream_pause()`` and ``read_stream_resume()`` (19+),
the probe is compiled with ``-DRSPROBE_HAVE_PAUSE`` and drives them
(:attr:`ProbeInstall.pause_resume`). Missing compiler, headers or C parser raise
:class:`~pytest_readstream.postgres.builds._cbuild.CBuildUnavailable` with one line.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ._cbuild import (
    CBuildUnavailable,
    build_shared_object,
    package_text,
    server_headers,
)
from .traced_copy import TRACED_H, traced_copy_sources

__all__ = ["PROBE_NAME", "ProbeInstall", "build_probe", "pause_resume_problem", "probe_sources"]

PROBE_NAME = "rsprobe"
_PACKAGE_FILES = ("rsprobe.c", "rsprobe_stream.h", "rsprobe_trace.h", "rsprobe_bufstate.h")
_PAUSE_FUNCTIONS = ("read_stream_pause", "read_stream_resume")
_EXTENSION_FILES = ("rsprobe.control", "rsprobe--1.0.sql")


@dataclass(frozen=True)
class ProbeInstall:
    """A built probe (``rsprobe.c``, driving ``read_stream.c``): the directory holding ``rsprobe.so``
    and its extension files."""

    directory: Path
    server_version: str
    traced: bool
    mutant: str | None
    #: The probe drives ``read_stream_pause()`` / ``read_stream_resume()`` (the server declares them).
    pause_resume: bool = False
    #: Why it does not (one line), when it does not.
    pause_why: str | None = None

    @property
    def library(self) -> Path:
        return self.directory / f"{PROBE_NAME}.so"

    def session_sql(self) -> list[str]:
        """Statements a superuser session runs before ``CREATE EXTENSION`` or the first call."""
        d = str(self.directory).replace("'", "''")
        return [
            f"SET extension_control_path = '{d}:$system'",
            f"SET dynamic_library_path = '{d}:$libdir'",
        ]


def probe_sources() -> dict[str, str]:
    """The probe's C sources as shipped in the package (file name -> text)."""
    return {name: package_text("builds/probe", name) for name in _PACKAGE_FILES}


def pause_resume_problem(include_dir: Path) -> str | None:
    """Why the probe cannot drive ``read_stream_pause()`` / ``read_stream_resume()`` on the server
    whose headers are in ``include_dir`` (``None`` when its ``storage/read_stream.h`` declares both)."""
    from .cparse import CParserUnavailable, parse_c

    header = include_dir / "storage" / "read_stream.h"
    try:
        declared = parse_c(header.read_text()).prototypes(_PAUSE_FUNCTIONS)
    except OSError as err:
        return f"cannot read the server's storage/read_stream.h: {err}"
    except CParserUnavailable as err:
        return str(err)
    lacking = [f for f in _PAUSE_FUNCTIONS if f not in declared]
    if lacking:
        return f"the server's storage/read_stream.h declares no {' and no '.join(f + '()' for f in lacking)}"
    return None


def _extension_texts() -> dict[str, str]:
    return {name: package_text("builds/probe", name) for name in _EXTENSION_FILES}


def _write_extension_files(ext_dir: Path, texts: dict[str, str]) -> None:
    """The probe's control file and SQL script beside its shared object, each replaced atomically."""
    ext_dir.mkdir(mode=0o755, exist_ok=True)
    for name, text in texts.items():
        target = ext_dir / name
        if not target.is_file() or target.read_text() != text:
            # Unique per thread too: a systematic run builds the same probe from two threads
            # (a worker and the thread that compiles ahead), and a shared name lost the race.
            tmp = ext_dir / f".{name}.{os.getpid()}.{threading.get_ident()}"
            tmp.write_text(text)
            tmp.chmod(0o644)
            os.replace(tmp, target)


def build_probe(
    bindir: str | os.PathLike[str], *, traced_source: Path | None = None, mutant: str | None = None
) -> ProbeInstall:
    """Compile (or find in the cache) the probe for the server whose binaries are in ``bindir``."""
    headers = server_headers(Path(bindir))
    if headers.version_num < 180000:
        raise CBuildUnavailable(
            f"the probe needs PostgreSQL 18's stream API; {headers.pg_config} is PostgreSQL {headers.version}"
        )
    if mutant is not None and traced_source is None:
        raise ValueError(f"mutant={mutant!r} needs traced_source (a read_stream.c to mutate)")
    sources = probe_sources()
    defines: dict[str, str | None] = {}
    if traced_source is not None:
        try:
            text = Path(traced_source).read_text()
        except OSError as err:
            raise CBuildUnavailable(f"cannot read the read_stream.c to trace: {err}") from err
        try:
            bufmgr_h = (headers.include_dir / "storage" / "bufmgr.h").read_text()
        except OSError as err:
            raise CBuildUnavailable(f"cannot read the server's storage/bufmgr.h: {err}") from err
        sources.update(traced_copy_sources(text, bufmgr_h=bufmgr_h, mutant=mutant, version=headers.version))
        defines["RSPROBE_TRACED"] = None
    pause_why = pause_resume_problem(headers.include_dir)
    if (
        pause_why is None
        and traced_source is not None
        and "RSPROBE_TRACED_HAS_PAUSE 1" not in sources[TRACED_H]
    ):
        pause_why = "the traced read_stream.c defines no read_stream_pause() and read_stream_resume()"
    if pause_why is None:
        defines["RSPROBE_HAVE_PAUSE"] = None
    # The extension files go into the cache key too: a changed SQL script is a new install.
    so = build_shared_object(PROBE_NAME, {**sources, **_extension_texts()}, headers=headers, defines=defines)
    directory = so.parent
    _write_extension_files(directory / "extension", _extension_texts())
    return ProbeInstall(
        directory, headers.version, traced_source is not None, mutant, pause_why is None, pause_why
    )
