"""The patched server, built incrementally from the base's build directory.

A fresh build of master takes 6 to 18 minutes on two cores; a patch touches a few files. The
base's meson build directory (:func:`..postgres.builds.pgtree.tree_build_dir`, kept by
``readstream pg-build --source``) already holds every object of the base; what the patched
server needs is that directory with only the patch's consequences recompiled.

Meson writes the source tree's path into the build directory, relative (``../../../postgresql/src/include``)
and absolute (``MESON_SOURCE_ROOT``, generator commands, ``install.dat``), and ninja keys its
log by the commands' text: a build directory moved to another tree, with its paths rewritten,
rebuilds nearly everything (the generated node headers' commands change, and every file includes
them). So the copy is not rewritten at all. It is built where the base's was: in a private
mount namespace (``unshare --mount``, root or an unprivileged user namespace) the patched copy
of the tree is bind-mounted over the base tree's path and the copy of the build directory over
the base build directory's, and ninja and ``meson install`` run there as they would for the
base. Every file the patch left alone has the base's modification time in the copy (the copy
keeps them), so ninja recompiles exactly the patch's files and what includes them. Nothing
outside the namespace sees the mounts; the base tree and its build directory are never written.

Without a usable ``unshare`` the patched copy is built fresh, and the progress line says why.
The install is cached by the patched tree's content like any ``pg-build --source`` tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..postgres._filelock import exclusive_lock
from ..postgres.builds.pgbuild import (
    _MANIFEST,
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
from ..postgres.builds.pgtree import _installed_prefix, _StepCounter, build_tree, tree_build_dir, tree_digest
from ..postgres.servers._install import make_readable

__all__ = ["PatchedBuild", "build_patched", "mount_namespace"]


@dataclass(frozen=True)
class PatchedBuild:
    """The patched server's install and how it came about (``cached``, ``incremental``, ``fresh``)."""

    build: PgBuild
    how: str
    seconds: float
    steps: int
    why_fresh: str | None = None

    def describe(self) -> str:
        if self.how == "cached":
            return "patched server already built for this content"
        text = f"{self.how} build of the patched server in {self.seconds:.0f} s ({self.steps} ninja steps)"
        return text + (f"; {self.why_fresh}" if self.why_fresh else "")


def mount_namespace() -> list[str] | None:
    """The ``unshare`` prefix that gives a private mount namespace here, or ``None``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "--mount"], [unshare, "--map-root-user", "--mount"]):
        try:
            ok = subprocess.run(
                [*prefix, "--", "true"], capture_output=True, timeout=30, check=False
            ).returncode
        except (OSError, subprocess.SubprocessError):
            continue
        if ok == 0:
            return prefix
    return None


def build_patched(
    base_tree: Path,
    patched_tree: Path,
    options: BuildOptions,
    *,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> PatchedBuild:
    """Build ``patched_tree`` (a copy of ``base_tree`` with the patch applied) into the cache.

    The base is built first if it is not (``pg-build --source``, once per content; a no-op when
    built). Raises :class:`PgBuildUnavailable` with one line.
    """
    say = progress or (lambda _line: None)
    cache = Path(cache_dir) if cache_dir is not None else build_cache_dir()
    base_tree, patched_tree = Path(base_tree).resolve(), Path(patched_tree).resolve()
    base = build_tree(base_tree, options, cache_dir=cache, progress=say)
    options = base.build.options
    base_dir = tree_build_dir(base_tree, options, cache)
    tools = _find_tools()
    digest = tree_digest(patched_tree)
    key_parts = [options.version, *meson_options(options), tools.compiler, tools.liburing, digest.digest]
    key = hashlib.sha256("\0".join(["patched", *key_parts]).encode()).hexdigest()[:16]
    prefix = cache / f"postgresql-{options.version}-{key}"
    done = _read_manifest(prefix, patched_tree)
    if done is not None:
        return PatchedBuild(done, "cached", 0.0, 0)
    namespace = mount_namespace()
    why: str | None = None
    if not (base_dir / "build.ninja").is_file():
        why = f"the base's build directory {base_dir} is gone"
    elif namespace is None:
        why = "no private mount namespace here (unshare --mount), so the base's objects cannot be reused"
    if why is not None:
        say(f"building the patched tree fresh: {why}")
        fresh = build_tree(patched_tree, options, cache_dir=cache, progress=say)
        return PatchedBuild(fresh.build, fresh.how, fresh.seconds, fresh.steps, why)
    assert namespace is not None
    with exclusive_lock(cache / f".{base_dir.parent.name}-{base_dir.name}.lock"):
        return _incremental(
            namespace,
            tools,
            options,
            base_tree,
            patched_tree,
            base_dir,
            cache,
            prefix,
            say,
        )


def _incremental(
    namespace: list[str],
    tools: _Tools,
    options: BuildOptions,
    base_tree: Path,
    patched_tree: Path,
    base_dir: Path,
    cache: Path,
    prefix: Path,
    say: Callable[[str], None],
) -> PatchedBuild:
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{prefix.name}-", dir=cache))
    log_path = cache / f"{prefix.name}.log"
    steps = _StepCounter(_NinjaProgress(say))
    try:
        build_copy = work / "build"
        say(f"copying the base's build directory ({base_dir}) to build the patch incrementally")
        shutil.copytree(base_dir, build_copy, symlinks=True)
        staging = work / "staging"
        jobs = options.jobs or os.cpu_count() or 1
        script = "\n".join(
            [
                "set -e",
                f"mount --bind {shlex.quote(str(patched_tree))} {shlex.quote(str(base_tree))}",
                f"mount --bind {shlex.quote(str(build_copy))} {shlex.quote(str(base_dir))}",
                f"{shlex.quote(tools.ninja)} -C {shlex.quote(str(base_dir))} -j {jobs}",
                f"{shlex.join(tools.meson)} install -C {shlex.quote(str(base_dir))} --quiet --no-rebuild "
                f"--destdir={shlex.quote(str(staging))}",
            ]
        )
        say(f"compiling with ninja -j {jobs} (incremental, in the base's build directory's copy)")
        with open(log_path, "w") as log:
            status = _run_logged([*namespace, "--", "sh", "-c", script], log, on_line=steps)
        if status != 0:
            raise _failure("ninja (patched tree, incremental)", log_path)
        installed = _installed_prefix(staging)
        seconds = time.monotonic() - start
        manifest = build_manifest(
            options,
            tools,
            patched_tree,
            seconds,
            base_source=str(base_tree),
            how="incremental",
            ninja_steps=steps.count,
        )
        (installed / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        make_readable(installed)
        if prefix.exists():
            shutil.rmtree(prefix)
        os.replace(installed, prefix)
    except OSError as err:
        raise PgBuildUnavailable(f"building the patched PostgreSQL failed: {err} (log: {log_path})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    build = _read_manifest(prefix, patched_tree)
    if build is None:
        raise PgBuildUnavailable(
            f"building the patched PostgreSQL left no server in {prefix} (log: {log_path})"
        )
    say(f"incremental build of the patched server in {seconds:.0f} s ({steps.count} ninja steps)")
    return PatchedBuild(build, "incremental", seconds, steps.count)
