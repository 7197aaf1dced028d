"""Building and installing the probe extension (``probe/rsprobe.c``) for a server under test.

The probe's C sources ship inside the package. :func:`build_probe` compiles them with
:func:`~pytest_readstream.postgres.builds._cbuild.build_shared_object` against the server's own
headers (``pg_config`` in its ``bindir``), cached by compiler, server version, headers and
source hash, and lays the result out as an extension directory of the harness's own: the
shared object, and ``rsprobe.control`` and ``rsprobe--1.0.sql`` in its ``extension``
subdirectory (where PostgreSQL 18 looks for control files under each ``extension_control_path``
entry). A server loads it
through two PostgreSQL 18 settings, set per session by a superuser (:meth:`ProbeInstall.session_sql`),
so nothing is written into the server's installation:

* ``extension_control_path`` finds the control file (``CREATE EXTENSION rsprobe``);
* ``dynamic_library_path`` finds ``rsprobe.so`` (the control file names it without ``$libdir``).

With ``traced_source`` (a ``read_stream.c`` text) the probe is compiled with ``-DRSPROBE_TRACED``
together with the traced copy that :func:`pytest_readstream.postgres.builds.traced_copy.traced_copy_sources`
generates from it (issue 12): every ``StartReadBuffers``/``WaitReadBuffers`` of the stream is
then reported. Missing compiler, headers or traced-copy builder raise
:class:`~pytest_readstream.postgres.builds._cbuild.CBuildUnavailable` with one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ._cbuild import (
    CBuildUnavailable,
    build_shared_object,
    package_text,
    server_headers,
)

__all__ = ["PROBE_NAME", "ProbeInstall", "build_probe", "probe_sources"]

PROBE_NAME = "rsprobe"
_PACKAGE_FILES = ("rsprobe.c", "rsprobe_stream.h", "rsprobe_trace.h")
_EXTENSION_FILES = ("rsprobe.control", "rsprobe--1.0.sql")


@dataclass(frozen=True)
class ProbeInstall:
    """A built probe (``rsprobe.c``, driving ``read_stream.c``): the directory holding ``rsprobe.so``
    and its extension files."""

    directory: Path
    server_version: str
    traced: bool
    mutant: str | None

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


def _extension_texts() -> dict[str, str]:
    return {name: package_text("builds/probe", name) for name in _EXTENSION_FILES}


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
            from .traced_copy import traced_copy_sources  # type: ignore[import-not-found, unused-ignore]
        except ImportError as err:
            raise CBuildUnavailable(
                "the traced copy of read_stream.c is not available in this version of "
                f"pytest-readstream ({err}); run the probe untraced"
            ) from err
        try:
            text = Path(traced_source).read_text()
        except OSError as err:
            raise CBuildUnavailable(f"cannot read the read_stream.c to trace: {err}") from err
        sources.update(traced_copy_sources(text, mutant=mutant))
        defines["RSPROBE_TRACED"] = None
    # The extension files go into the cache key too: a changed SQL script is a new install.
    so = build_shared_object(PROBE_NAME, {**sources, **_extension_texts()}, headers=headers, defines=defines)
    directory = so.parent
    ext_dir = directory / "extension"
    ext_dir.mkdir(mode=0o755, exist_ok=True)
    for name, text in _extension_texts().items():
        target = ext_dir / name
        if not target.is_file() or target.read_text() != text:
            tmp = ext_dir / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.chmod(0o644)
            os.replace(tmp, target)
    return ProbeInstall(directory, headers.version, traced_source is not None, mutant)
