"""Old module names of this package, kept importable for one release with a DeprecationWarning.

The real-server harness moved from ``pytest_readstream._pg`` to :mod:`pytest_readstream.postgres`
(and its modules then into rooms by concern: ``postgres.server`` is ``postgres.servers.server``),
and the benchmark machinery from ``pytest_readstream.bench_*`` / ``pytest_readstream.plots`` to
:mod:`pytest_readstream.bench`. A meta-path finder maps each old name onto the new module object
itself (not a copy), so ``isinstance`` checks, monkeypatching and module state stay shared.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

_PKG = "pytest_readstream"
_RENAMED_PACKAGES = {f"{_PKG}._pg": f"{_PKG}.postgres"}
_RENAMED_MODULES = {
    f"{_PKG}.bench_{name}": f"{_PKG}.bench.{name}"
    for name in ("tables", "seeds", "runs", "readahead", "model", "calibration")
} | {f"{_PKG}.plots": f"{_PKG}.bench.plots"}
# The harness's modules, moved into rooms by concern (the package ``faults`` keeps its name: it
# re-exports the interposer module's public names).
_POSTGRES_ROOMS = {
    "servers": (
        "_cluster",
        "_process",
        "_install",
        "_cleanup",
        "_walquiet",
        "_contracts",
        "server",
        "session",
        "settings",
        "scratch",
        "observe",
    ),
    "builds": ("_cbuild", "probe_build", "traced_copy", "cmutants", "pgsource", "pgbuild", "traced_scan"),
    "faults": ("foreign_io", "stream_faults"),
    "impl": ("implementation", "remote_stream", "relbuild", "scanops"),
    "fidelity": ("oracle", "scenarios", "facts", "timing", "seed_timing", "compare"),
}
_RENAMED_MODULES |= {
    f"{_PKG}.postgres.{name}": f"{_PKG}.postgres.{room}.{name}"
    for room, names in _POSTGRES_ROOMS.items()
    for name in names
}


def new_name(old: str) -> str | None:
    """The current name of a module once importable as ``old``, or ``None`` if it did not move."""
    if old in _RENAMED_MODULES:
        return _RENAMED_MODULES[old]
    for old_pkg, new_pkg in _RENAMED_PACKAGES.items():
        if old == old_pkg or old.startswith(old_pkg + "."):
            return new_pkg + old[len(old_pkg) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target
        self._target_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} has moved to {self._target}; the old name goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self._target)
        self._target_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module is the already-executed new one; nothing to run again. The import system
        # has just set its __spec__ to the old name's (with this loader, which has no resource
        # reader): give it back its own, or importlib.resources could no longer open the
        # package's data files (the probe's C sources) for the rest of the process.
        if self._target_spec is not None:
            module.__spec__ = self._target_spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        target_name = new_name(fullname)
        if target_name is None:
            return None
        is_package = fullname in _RENAMED_PACKAGES
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=is_package)


def install() -> None:
    """Register the finder once (idempotent)."""
    # First in line: otherwise the path finder would find ``_pg.observe`` through the aliased
    # package's ``__path__`` and execute a second copy of the module under the old name.
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
