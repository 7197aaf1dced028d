"""The ``rerun:`` command of a reproduction, written the way the run was started.

A printed reproduction must run as printed, from the directory the run was started in:

* the launcher: ``pytest`` when the run was started by that script, ``python3 -m pytest`` (the
  interpreter's own name, or its full path when that name finds another interpreter) otherwise,
  including a ``readstream check`` run;
* the test: a ``--pyargs`` run names it ``--pyargs package.module::test[id]``, because its node id
  (``test_lifecycle.py::...``) is relative to a rootdir the user never sees; a path run names the
  file relative to the invocation directory;
* the options that decide what runs and how: ``-p``, ``-o``, ``-c``, ``--rootdir``,
  ``--hypothesis-profile`` and the server options. ``-n``, ``-k`` and the like are left out: one
  test is rerun.

Under pytest-xdist the reproduction is rendered on a worker, whose ``sys.argv`` is not the user's;
xdist hands each worker the controller's (``workerinput["mainargv"]``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["RerunStyle", "rerun_style", "rerun_target"]

_SCRIPTS = ("pytest", "py.test")


@dataclass(frozen=True)
class RerunStyle:
    """How this run's reruns are written (one per session, in ``config.stash``)."""

    launcher: tuple[str, ...]
    # (dotted name, directory or file) of each package or module named with --pyargs.
    pyargs_roots: tuple[tuple[str, Path], ...]
    invocation_dir: Path
    options: tuple[str, ...]


def _on_path_as(name: str, path: str) -> bool:
    """Whether ``name`` typed in a shell finds ``path`` (symlinks kept: a venv's python is a link)."""
    found = shutil.which(name)
    return found is not None and os.path.abspath(found) == os.path.abspath(path)


def _launcher(argv0: str) -> tuple[str, ...]:
    base = os.path.basename(argv0)
    if base in _SCRIPTS:
        return (base,) if _on_path_as(base, argv0) else (argv0,)
    python = os.path.basename(sys.executable)
    return (python if _on_path_as(python, sys.executable) else sys.executable, "-m", "pytest")


def _options(config: pytest.Config) -> tuple[str, ...]:
    opt = config.option
    out: list[str] = []
    for plugin in getattr(opt, "plugins", None) or []:
        out += ["-p", str(plugin)]
    for override in getattr(opt, "override_ini", None) or []:
        out += ["-o", str(override)]
    if getattr(opt, "inifilename", None):
        out += ["-c", str(opt.inifilename)]
    if getattr(opt, "rootdir", None):
        out += ["--rootdir", str(opt.rootdir)]
    profile = getattr(opt, "hypothesis_profile", None)
    if profile:
        out.append(f"--hypothesis-profile={profile}")
    for dest, flag in (
        ("readstream_pg_dsn", "--readstream-pg-dsn"),
        ("readstream_pg_bindir", "--readstream-pg-bindir"),
    ):
        value = getattr(opt, dest, None)
        if value:
            out.append(f"{flag}={value}")
    if getattr(opt, "readstream_pg_build", None):
        out.append("--readstream-pg-build")
    return tuple(out)


def _pyargs_roots(config: pytest.Config) -> tuple[tuple[str, Path], ...]:
    """Where the names given with ``--pyargs`` live: an editable install imports the suite under
    its directory's name (``conformance.test_reads``), which is not the name a user can type."""
    if not getattr(config.option, "pyargs", False):
        return ()
    roots: list[tuple[str, Path]] = []
    for arg in config.args:
        name = str(arg).split("::")[0]
        if not name or not all(part.isidentifier() for part in name.split(".")):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            roots += [(name, Path(loc).resolve()) for loc in spec.submodule_search_locations]
        elif spec.origin:
            roots.append((name, Path(spec.origin).resolve()))
    return tuple(roots)


def rerun_style(config: pytest.Config) -> RerunStyle:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    argv = workerinput.get("mainargv") if workerinput else None
    argv0 = str(argv[0]) if argv else (sys.argv[0] if sys.argv else "pytest")
    return RerunStyle(
        launcher=_launcher(argv0),
        pyargs_roots=_pyargs_roots(config),
        invocation_dir=config.invocation_params.dir,
        options=_options(config),
    )


def rerun_target(item: pytest.Item, style: RerunStyle) -> list[str]:
    """The arguments that select ``item`` alone, from the invocation directory."""
    _, sep, rest = item.nodeid.partition("::")
    path = Path(item.path).resolve()
    for name, root in style.pyargs_roots:
        if path == root:
            return ["--pyargs", f"{name}{sep}{rest}"]
        if path.suffix == ".py" and path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ["--pyargs", ".".join([name, *parts]) + f"{sep}{rest}"]
    path = Path(item.path)
    try:
        rel = os.path.relpath(path, style.invocation_dir)
    except ValueError:  # another drive (Windows)
        rel = str(path)
    return [f"{rel}{sep}{rest}"]
