"""Compiling the project's own small C sources (probe extension, I/O interposer) at test time.

The harness ships C sources of its own inside the package and compiles them with the machine's C
compiler, against the headers of the server under test (``pg_config --includedir-server``), the
way PGXS would, but without PGXS's recorded CFLAGS: a wheel built with a newer GCC records flags
(``-Wmissing-variable-declarations``) that an older compiler rejects. Results are cached by
everything that goes into them (compiler and its version, server version and headers, sources,
flags), so a test session compiles each once and later sessions not at all.

The cache lives where the server's OS user can read it (a server run by root as ``postgres`` must
``dlopen`` the library), and no other program changes its modes: one directory per OS user of the
harness in the system's temporary directory, mode 0711, like the servers' own home.

Anything missing (no compiler, no headers) raises :class:`CBuildUnavailable` with one line that
says what is missing and how to get it; callers turn that into one skip reason.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._filelock import exclusive_lock
from ..errors import PgNotAvailable

__all__ = [
    "CBuildUnavailable",
    "ServerHeaders",
    "build_shared_object",
    "find_compiler",
    "package_text",
    "server_headers",
]

# Flags for every object: position-independent, optimised, and the warnings PostgreSQL's own
# build treats as errors that every supported compiler knows.
_BASE_CFLAGS = (
    "-fPIC",
    "-O2",
    "-Wall",
    "-Werror=implicit-function-declaration",
    "-fno-strict-aliasing",
    "-fwrapv",
)


class CBuildUnavailable(PgNotAvailable):
    """A C source of the harness cannot be built here (no compiler, no headers); the message says why."""

    readstream_harness_error = "build its C code against the server"


class CCompileFailed(CBuildUnavailable):
    """A compiler and headers were there, but compiling a C source of the harness failed: not a
    capability the machine lacks but the harness failing at its part (``harness_errors``)."""


@dataclass(frozen=True)
class ServerHeaders:
    """What ``pg_config`` of a server build says about compiling against it."""

    pg_config: Path
    version: str  # "18.6"
    version_num: int  # 180006
    include_dir: Path  # --includedir-server
    pkglib_dir: Path  # --pkglibdir


def find_compiler() -> str:
    """The C compiler: ``$CC`` if set, else ``cc`` or ``gcc`` on ``PATH``."""
    given = os.environ.get("CC", "").strip()
    if given:
        first = shlex.split(given)[0]
        if shutil.which(first) is None:
            raise CBuildUnavailable(f"the C compiler CC={given!r} is not on PATH")
        return given
    for name in ("cc", "gcc"):
        if shutil.which(name):
            return name
    raise CBuildUnavailable("no C compiler (cc or gcc) on PATH: install one (Debian: gcc) or set CC")


def _version_num(version: str) -> int:
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in version.split(".")[:2]]
    major, minor = [*parts, 0][:2]
    return major * 10000 + minor


def server_headers(bindir: Path) -> ServerHeaders:
    """The headers of the server whose binaries are in ``bindir`` (its ``pg_config``)."""
    pg_config = Path(bindir) / "pg_config"
    if not os.access(pg_config, os.X_OK):
        raise CBuildUnavailable(f"no pg_config in {bindir}: the server's development files are not installed")
    try:
        out = subprocess.run(
            [str(pg_config), "--version", "--includedir-server", "--pkglibdir"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as err:
        raise CBuildUnavailable(f"{pg_config} failed: {err}") from err
    version = out[0].split()[-1]
    include_dir = Path(out[1])
    if not (include_dir / "postgres.h").is_file():
        raise CBuildUnavailable(
            f"PostgreSQL {version}'s server headers are missing ({include_dir}/postgres.h): "
            "install the server development package (Debian: postgresql-server-dev-NN)"
        )
    return ServerHeaders(pg_config, version, _version_num(version), include_dir, Path(out[2]))


def _compiler_identity(cc: str) -> str:
    try:
        proc = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        raise CBuildUnavailable(f"the C compiler {cc!r} does not run: {err}") from err
    if proc.returncode != 0:
        raise CBuildUnavailable(f"the C compiler {cc!r} does not run: {proc.stderr.strip()[:200]}")
    return proc.stdout.splitlines()[0] if proc.stdout else cc


def package_text(directory: str, name: str) -> str:
    """A source file shipped in the harness's ``directory``, relative to ``pytest_readstream/postgres``
    (``builds/probe``, ``builds/traced``, ``faults/interpose``).

    Read next to this module, whatever loader the package has: the compiler needs the sources
    as real files anyway, and ``importlib.resources`` depends on the loader (a package reached
    through an old, moved name once kept a loader with no resource reader, see ``_moved``).
    """
    return (Path(__file__).resolve().parents[1] / directory / name).read_text(encoding="utf-8")


def build_root() -> Path:
    """The cache directory of compiled objects (created 0711, owned by this OS user)."""
    root = Path(tempfile.gettempdir()) / f"readstream-cbuild-{os.getuid()}"
    root.mkdir(mode=0o711, exist_ok=True)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise CBuildUnavailable(f"the build cache {root} belongs to someone else; remove it or set TMPDIR")
    root.chmod(0o711)
    return root


def build_shared_object(
    name: str,
    sources: Mapping[str, str],
    *,
    headers: ServerHeaders | None = None,
    include_dirs: Sequence[Path] = (),
    defines: Mapping[str, str | None] | None = None,
    extra_cflags: Sequence[str] = (),
    libraries: Sequence[str] = (),
) -> Path:
    """Compile ``sources`` (file name -> C text) into ``<cache>/<name>-<hash>/<name>.so``.

    ``headers`` adds the server's include directory; the cache key covers the compiler's identity,
    the server's version and include directory, every source text, the defines and flags. A
    compile error raises :class:`CBuildUnavailable` with the compiler's first error lines (a
    source the project ships that does not compile against a server is a reason to skip that
    server, not to crash the run).
    """
    cc = find_compiler()
    defines = dict(defines or {})
    key = hashlib.sha256()
    for part in (
        name,
        _compiler_identity(cc),
        cc,
        repr(sorted(defines.items())),
        repr(list(extra_cflags)),
        repr(list(libraries)),
        repr([str(p) for p in include_dirs]),
    ):
        key.update(part.encode() + b"\0")
    if headers is not None:
        key.update(f"{headers.version}\0{headers.include_dir}\0".encode())
        pg_config_h = headers.include_dir / "pg_config.h"
        if pg_config_h.is_file():
            key.update(pg_config_h.read_bytes())
    for fname in sorted(sources):
        key.update(fname.encode() + b"\0" + sources[fname].encode() + b"\0")
    target_dir = build_root() / f"{name}-{key.hexdigest()[:16]}"
    target = target_dir / f"{name}.so"
    if target.is_file():
        return target
    target_dir.mkdir(mode=0o755, exist_ok=True)
    with exclusive_lock(target_dir / ".lock"):
        if target.is_file():
            return target
        src_dir = Path(tempfile.mkdtemp(prefix=f".{name}-src-", dir=target_dir))
        try:
            paths = []
            for fname, text in sources.items():
                p = src_dir / fname
                p.write_text(text)
                paths.append(p)
            c_files = [str(p) for p in paths if p.suffix == ".c"]
            incs = [f"-I{src_dir}", *(f"-I{d}" for d in include_dirs)]
            if headers is not None:
                incs.append(f"-I{headers.include_dir}")
            defs = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in sorted(defines.items())]
            tmp_out = src_dir / f"{name}.so"
            cmd = [
                *shlex.split(cc),
                *_BASE_CFLAGS,
                *extra_cflags,
                *incs,
                *defs,
                "-shared",
                "-o",
                str(tmp_out),
                *c_files,
                *(f"-l{lib}" for lib in libraries),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                errors = [ln for ln in proc.stderr.splitlines() if "error" in ln][
                    :3
                ] or proc.stderr.splitlines()[:3]
                raise CCompileFailed(f"compiling {name} failed: {' | '.join(errors)}")
            tmp_out.chmod(0o755)
            os.replace(tmp_out, target)
        finally:
            shutil.rmtree(src_dir, ignore_errors=True)
    return target
