"""Building a PostgreSQL source tree of one's own: ``readstream pg-build --source DIR``.

A developer reviewing a patch builds *their* tree: an extracted tarball or a git checkout of
18.x, 19.x or master (20devel), possibly with a meson build directory of their own. This module
builds such a tree with the harness's meson options (:func:`.pgbuild.meson_options`: liburing,
assertions, injection points, a relative run path) and installs it into the harness's cache::

    ~/.cache/pytest-readstream/pg-build/postgresql-<version>-<key>/{bin,lib,share,include}

**What a build is keyed by.** The key covers the tree's *content*, the options, the compiler and
liburing, so an unchanged tree is never built twice and a changed one never reuses a stale
install. The content is digested cheaply:

* a git checkout (``.git`` present, ``git`` on PATH): the commit's tree hash
  (``git rev-parse HEAD^{tree}``) plus, when the work tree is dirty, a SHA-256 of
  ``git diff HEAD --binary`` and of every untracked, not ignored file (meson writes a
  ``.gitignore`` of ``*`` into its build directories, so an in-tree build directory is ignored);
* anything else (an extracted tarball): a SHA-256 of the path and content of every file meson
  reads: the regular files at the tree's top (``meson.build``, ``meson_options.txt``, ...) and
  everything under ``src/``, ``contrib/`` and ``config/``, skipping meson build directories
  (those holding ``meson-private``) and ``.git``. About 100 MB: a second or so.

**Incremental rebuilds.** The build directory is kept (one per tree path and options, under
``pg-build/trees/``) and reused: a changed tree is rebuilt by ``ninja`` there, which recompiles
only what changed (meson reconfigures itself when a ``meson.build`` changed), then installed as
the new key's install. ``--build-dir DIR`` names a meson build directory of the developer's own
instead: it is built as it was configured (its options are part of the key) and never
reconfigured; its source directory (from ``meson-info``) is the tree.

Every refusal is one line (:class:`~.pgbuild.PgBuildUnavailable`): a directory that is not a
PostgreSQL tree, a version the harness does not support (17 and older, or unknown), a build
directory that is not meson's or belongs to another tree, a failed configure or compile (its
first error lines and the log's path).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .._filelock import exclusive_lock
from ..servers._install import make_readable
from .pgbuild import (
    _MANIFEST,
    SUPPORTED_VERSION,
    SUPPORTED_VERSIONS,
    BuildOptions,
    PgBuild,
    PgBuildUnavailable,
    _failure,
    _find_tools,
    _NinjaProgress,
    _read_manifest,
    _run_logged,
    _Tools,
    build_cache_dir,
    build_manifest,
    meson_options,
)
from .pgsource import READ_STREAM_C, PgSourceMismatch, source_version

__all__ = ["TreeBuild", "TreeDigest", "build_tree", "check_tree", "tree_build_dir", "tree_digest"]

#: What a non-git tree's digest covers besides its top-level files.
_DIGEST_DIRS = ("src", "contrib", "config")


@dataclass(frozen=True)
class TreeDigest:
    """A tree's content, digested: how (``git`` or ``files``), the digest and what it took."""

    kind: str
    digest: str
    files: int
    seconds: float


@dataclass(frozen=True)
class TreeBuild:
    """What :func:`build_tree` did: the install, and how (``cached``, ``fresh``, ``incremental``)."""

    build: PgBuild
    how: str
    seconds: float  # this call's configure + compile + install (0 when cached)
    steps: int  # ninja steps run (0 when cached)
    digest: TreeDigest
    build_dir: Path

    def describe(self) -> str:
        if self.how == "cached":
            return f"{self.build.describe()}; already built for this content (digest {self.digest.kind})"
        return (
            f"{self.build.describe()}; {self.how} build in {_minutes(self.seconds)}, {self.steps} ninja steps "
            f"(build directory {self.build_dir})"
        )


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def check_tree(tree: Path) -> str:
    """The version of PostgreSQL source tree ``tree``; one line when it is none or unsupported."""
    tree = Path(tree)
    if not tree.is_dir():
        raise PgBuildUnavailable(f"--source {tree}: not a directory")
    if not (tree / "meson.build").is_file() and not (tree / "configure").is_file():
        raise PgBuildUnavailable(
            f"--source {tree}: not a PostgreSQL source tree (no meson.build or configure)"
        )
    try:
        version = source_version(tree)
    except PgSourceMismatch:
        raise PgBuildUnavailable(
            f"--source {tree}: not a PostgreSQL source tree of a supported version (no {READ_STREAM_C}); "
            f"allowed {SUPPORTED_VERSIONS}"
        ) from None
    if not SUPPORTED_VERSION.fullmatch(version):
        raise PgBuildUnavailable(f"--source {tree} is PostgreSQL {version}: allowed {SUPPORTED_VERSIONS}")
    if not (tree / "meson.build").is_file():
        raise PgBuildUnavailable(
            f"--source {tree}: PostgreSQL {version} without meson.build; the harness builds with meson"
        )
    return version


def _git(tree: Path, *args: str) -> bytes | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        proc = subprocess.run([git, "-C", str(tree), *args], capture_output=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def tree_digest(tree: Path) -> TreeDigest:
    """The content digest of ``tree`` (see the module docstring for what it covers)."""
    t0 = time.monotonic()
    tree = Path(tree).resolve()
    if (tree / ".git").exists():
        head = _git(tree, "rev-parse", "HEAD^{tree}")
        status = _git(tree, "status", "--porcelain=v1", "-z", "--untracked-files=all")
        if head is not None and status is not None:
            h = hashlib.sha256(head.strip())
            files = 0
            if status:
                diff = _git(tree, "diff", "HEAD", "--binary")
                h.update(b"\0diff\0" + (diff or b""))
                untracked = _git(tree, "ls-files", "--others", "--exclude-standard", "-z") or b""
                for rel in sorted(p for p in untracked.split(b"\0") if p):
                    files += 1
                    h.update(b"\0" + rel + b"\0")
                    path = tree / os.fsdecode(rel)
                    if path.is_file() and not path.is_symlink():
                        h.update(_file_digest(path))
            return TreeDigest("git", h.hexdigest(), files, time.monotonic() - t0)
    h = hashlib.sha256()
    files = 0
    for path in _meson_inputs(tree):
        files += 1
        h.update(os.fsencode(path.relative_to(tree)) + b"\0")
        h.update(_file_digest(path))
    return TreeDigest("files", h.hexdigest(), files, time.monotonic() - t0)


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def _meson_inputs(tree: Path) -> list[Path]:
    """The files of ``tree`` a meson build reads, sorted (see the module docstring)."""
    # A git worktree's ``.git`` is a file (the path of its repository), git's and not the tree's.
    out = [p for p in tree.iterdir() if p.is_file() and not p.is_symlink() and p.name != ".git"]
    for top in _DIGEST_DIRS:
        base = tree / top
        if not base.is_dir():
            continue
        for root, dirs, names in os.walk(base):
            if "meson-private" in dirs or ".git" in dirs:
                dirs[:] = [d for d in dirs if d != ".git"]
                if "meson-private" in dirs:
                    dirs[:] = []  # a build directory inside the tree
                    continue
            dirs.sort()
            for name in names:
                path = Path(root) / name
                if path.is_file() and not path.is_symlink():
                    out.append(path)
    return sorted(out)


def _own_build_dir(build_dir: Path) -> tuple[Path, dict[str, object]]:
    """The source tree and options of an existing meson build directory (one line if it is none)."""
    info = build_dir / "meson-info" / "meson-info.json"
    try:
        source = Path(json.loads(info.read_text())["directories"]["source"])
        raw = json.loads((build_dir / "meson-info" / "intro-buildoptions.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        raise PgBuildUnavailable(
            f"--build-dir {build_dir}: not a configured meson build directory (no readable meson-info/)"
        ) from None
    wanted = {
        "prefix",
        "buildtype",
        "cassert",
        "injection_points",
        "liburing",
        "rpath",
        "libdir",
        "c_link_args",
    }
    options = {o["name"]: o.get("value") for o in raw if isinstance(o, dict) and o.get("name") in wanted}
    return source, options


def tree_build_dir(source: Path, options: BuildOptions, cache: Path | None = None) -> Path:
    """The build directory the harness keeps for tree ``source`` built with ``options`` (one per
    tree path and options; ``options.version`` must be the tree's)."""
    cache = Path(cache) if cache is not None else build_cache_dir()
    where = hashlib.sha256("\0".join([str(source), *meson_options(options)]).encode()).hexdigest()[:16]
    return cache / "trees" / f"postgresql-{options.version}-{where}" / "build"


def build_tree(
    source: Path | None,
    options: BuildOptions | None = None,
    *,
    build_dir: Path | None = None,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> TreeBuild:
    """Build the tree ``source`` (or the tree of the meson ``build_dir``) into the cache, once per content.

    ``options``' cassert and injection points apply to a build directory the harness configures;
    its version is the tree's. Raises :class:`PgBuildUnavailable` with one line.
    """
    say = progress or (lambda _line: None)
    own_options: dict[str, object] | None = None
    if build_dir is not None:
        build_dir = Path(build_dir).resolve()
        tree_of_dir, own_options = _own_build_dir(build_dir)
        if source is not None and Path(source).resolve() != tree_of_dir.resolve():
            raise PgBuildUnavailable(
                f"--build-dir {build_dir} builds the tree {tree_of_dir}, not --source {source}"
            )
        source = tree_of_dir
    if source is None:
        raise PgBuildUnavailable("give --source DIR (a PostgreSQL tree) or --build-dir DIR (its meson build)")
    source = Path(source).resolve()
    version = check_tree(source)
    options = replace(options or BuildOptions(version=version), version=version)
    tools = _find_tools()
    digest = tree_digest(source)
    say(
        f"PostgreSQL {version} tree {source}: content digest ({digest.kind}) {digest.digest[:12]} in {digest.seconds:.1f} s"
    )
    cache = Path(cache_dir) if cache_dir is not None else build_cache_dir()
    key_parts = [version, *meson_options(options), tools.compiler, tools.liburing, digest.kind, digest.digest]
    if own_options is not None:
        key_parts += ["own-build-dir", json.dumps(own_options, sort_keys=True)]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:16]
    prefix = cache / f"postgresql-{version}-{key}"
    if build_dir is None:
        build_dir = tree_build_dir(source, options, cache)
    done = _read_manifest(prefix, source)
    if done is not None:
        return TreeBuild(done, "cached", 0.0, 0, digest, build_dir)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        build_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PgBuildUnavailable(f"cannot build PostgreSQL: {err}") from None
    with exclusive_lock(cache / f".{build_dir.parent.name}-{build_dir.name}.lock"):
        done = _read_manifest(prefix, source)
        if done is not None:
            return TreeBuild(done, "cached", 0.0, 0, digest, build_dir)
        return _build_in(
            options, tools, source, build_dir, own_options is not None, cache, prefix, digest, say
        )


def _build_in(
    options: BuildOptions,
    tools: _Tools,
    source: Path,
    build_dir: Path,
    own: bool,
    cache: Path,
    prefix: Path,
    digest: TreeDigest,
    say: Callable[[str], None],
) -> TreeBuild:
    log_path = cache / f"{prefix.name}.log"
    start = time.monotonic()
    jobs = options.jobs or os.cpu_count() or 1
    env = {**os.environ, "CC": tools.cc}
    configured = (build_dir / "build.ninja").is_file()
    how = "incremental" if configured else "fresh"
    work = Path(tempfile.mkdtemp(prefix=f".{prefix.name}-", dir=cache))
    steps = _StepCounter(_NinjaProgress(say))
    try:
        with open(log_path, "w") as log:
            if not configured:
                if own:
                    raise PgBuildUnavailable(f"--build-dir {build_dir}: not configured (no build.ninja)")
                say(f"configuring {source} in {build_dir} (log {log_path})")
                # The prefix only names the layout (the install is moved into the cache); it must
                # contain "postgres", or meson appends /postgresql to the share and lib dirs.
                setup = [
                    *tools.meson,
                    "setup",
                    str(build_dir),
                    str(source),
                    f"--prefix={build_dir.parent / 'postgresql-inst'}",
                ]
                if _run_logged([*setup, *meson_options(options)], log, env=env) != 0:
                    shutil.rmtree(build_dir, ignore_errors=True)  # a half-configured directory
                    raise _failure("meson setup", log_path)
            say(f"compiling with ninja -j {jobs} ({how})")
            if (
                _run_logged([tools.ninja, "-C", str(build_dir), "-j", str(jobs)], log, env=env, on_line=steps)
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
        installed = _installed_prefix(staging)
        seconds = time.monotonic() - start
        manifest = build_manifest(
            options,
            tools,
            source,
            seconds,
            source_digest={"kind": digest.kind, "digest": digest.digest},
            build_dir=str(build_dir),
            how=how,
            ninja_steps=steps.count,
        )
        (installed / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        make_readable(installed)
        if prefix.exists():
            shutil.rmtree(prefix)  # an unfinished leftover without a manifest
        os.replace(installed, prefix)
    except OSError as err:
        raise PgBuildUnavailable(f"building PostgreSQL failed: {err} (log: {log_path})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    build = _read_manifest(prefix, source)
    if build is None:
        raise PgBuildUnavailable(f"building PostgreSQL left no server binary in {prefix} (log: {log_path})")
    say(f"{how} build in {_minutes(seconds)} ({steps.count} ninja steps): {prefix}")
    return TreeBuild(build, how, seconds, steps.count, digest, build_dir)


def _installed_prefix(staging: Path) -> Path:
    """The one directory under ``staging`` that holds ``bin/postgres`` (the configured prefix)."""
    for root, dirs, _names in os.walk(staging):
        if "bin" in dirs and (Path(root) / "bin" / "postgres").is_file():
            return Path(root)
    raise PgBuildUnavailable(f"meson install put no bin/postgres under {staging}")


class _StepCounter:
    """Counts ninja's ``[done/total]`` steps and passes each line on."""

    def __init__(self, then: Callable[[str], None]) -> None:
        self.count = 0
        self._then = then

    def __call__(self, line: str) -> None:
        if line.startswith("[") and "/" in line.split("]", 1)[0]:
            self.count += 1
        self._then(line)
