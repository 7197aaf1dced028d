"""The plugin's configuration: options, ini keys and the environment, resolved once.

Every setting can come from four places. The first that gives a value wins:

1. the command line (``--readstream-impl=NAME``);
2. the environment (only ``READSTREAM_IMPL``: CI matrices set it per job);
3. the ini file (``readstream_impl = NAME`` in ``pytest.ini``, ``[tool.pytest.ini_options]``, ...);
4. the default.

The result is one frozen :class:`ReadstreamOptions`, kept in ``config.stash`` as pytest-postgresql
and hypothesis keep theirs, so fixtures and hooks never re-read options and cannot disagree. Each
value remembers where it came from, so an error can say "from READSTREAM_IMPL" instead of leaving
the user to guess which of three places holds the typo.

The seed is special: under pytest-xdist the controller chooses it (or takes the user's) and hands
it to every worker in ``workerinput``, so all workers draw from the same seed the header printed.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ENV_IMPL",
    "DEFAULT_IMPL",
    "WORKERINPUT_SEED",
    "WORKERINPUT_SEED_SOURCE",
    "ReadstreamOptions",
    "OPTIONS_KEY",
    "add_options",
    "resolve_options",
    "get_options",
]

ENV_IMPL = "READSTREAM_IMPL"
DEFAULT_IMPL = "reference"
WORKERINPUT_SEED = "readstream_seed"
WORKERINPUT_SEED_SOURCE = "readstream_seed_source"
_SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class ReadstreamOptions:
    """The plugin's settings for one pytest run, with where each came from.

    ``*_source`` is one of ``"command line"``, ``"environment"``, ``"ini"``, ``"default"`` or
    ``"random"`` (a seed nobody gave). An xdist worker reports its controller's source.
    """

    impl: str
    impl_source: str
    seed: int
    seed_source: str
    report: Path | None
    xfails: Path | None
    xfails_as_skips: bool
    pg_dsn: str | None
    pg_bindir: str | None
    pg_source: Path | None = None
    pg_fetch_source: bool = False
    pg_mutant: str | None = None
    pg_build: bool = False
    announce_report: bool = True
    failures: str = "condensed"
    model_version: str | None = None
    #: ``xfails`` was chosen by the server's version, not given (its unmatched lines are no news).
    xfails_auto: bool = False

    @property
    def seed_given(self) -> bool:
        """Whether somebody chose the seed (it was not drawn at random for this run)."""
        return self.seed_source != "random"

    def server_build_args(self) -> tuple[str, ...]:
        """The options that chose the server build under test, as a rerun command repeats them."""
        out = []
        if self.pg_bindir:
            out.append(f"--readstream-pg-bindir={self.pg_bindir}")
        if self.pg_source is not None:
            out.append(f"--readstream-pg-source={self.pg_source}")
        if self.pg_fetch_source:
            out.append("--readstream-pg-fetch-source")
        if self.pg_mutant:
            out.append(f"--readstream-pg-mutant={self.pg_mutant}")
        if self.pg_build:
            out.append("--readstream-pg-build")
        return tuple(out)

    def rerun_args(self) -> tuple[str, ...]:
        """What a rerun command repeats besides the seed and the implementation: the server
        build options and the model version."""
        model = () if self.model_version is None else (f"--readstream-model-version={self.model_version}",)
        return (*self.server_build_args(), *model)

    def describe_impl_source(self) -> str:
        """Where the implementation name came from, as an error message says it."""
        return {
            "command line": "--readstream-impl",
            "environment": f"environment variable {ENV_IMPL}",
            "ini": "ini option readstream_impl",
            "default": "the default",
        }[self.impl_source]


OPTIONS_KEY = pytest.StashKey[ReadstreamOptions]()


def _seed_arg(text: str) -> int:
    import argparse

    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer: allowed 0..{_SEED_MAX} (decimal or 0x-hex)"
        ) from None
    if not 0 <= value <= _SEED_MAX:
        raise argparse.ArgumentTypeError(f"{value} is out of range: allowed 0..{_SEED_MAX}")
    return value


def add_options(parser: pytest.Parser) -> None:
    """Declare the ``--readstream-*`` options and ``readstream_*`` ini keys."""
    group = parser.getgroup("readstream", "pytest-readstream (PostgreSQL read streams)")
    group.addoption(
        "--readstream-impl",
        dest="readstream_impl",
        metavar="NAME",
        default=None,
        help=(
            "implementation under test: reference (default), mutant:<bug>, postgres, "
            f"package.module:attr, or an entry-point name (env {ENV_IMPL}, ini readstream_impl)"
        ),
    )
    group.addoption(
        "--readstream-model-version",
        dest="readstream_model_version",
        metavar="VERSION",
        default=None,
        help=(
            "the model version of every test that names none: 18 (default), 19, 20devel or master "
            "(ini readstream_model_version)"
        ),
    )
    group.addoption(
        "--readstream-seed",
        dest="readstream_seed",
        metavar="N",
        type=_seed_arg,
        default=None,
        help="seed for every random choice (default: random, printed in the header)",
    )
    group.addoption(
        "--readstream-report",
        dest="readstream_report",
        metavar="PATH.json",
        default=None,
        help="write a JSON report of the run (written even when tests fail or the run is interrupted)",
    )
    group.addoption(
        "--readstream-xfails",
        dest="readstream_xfails",
        metavar="FILE",
        default=None,
        help="expectations file: one test-id prefix per line (# comments); matching tests are strict xfails",
    )
    group.addoption(
        "--readstream-xfails-as-skips",
        dest="readstream_xfails_as_skips",
        action="store_true",
        default=None,
        help="skip the tests listed in --readstream-xfails instead of running them as xfails",
    )
    group.addoption(
        "--readstream-failures",
        dest="readstream_failures",
        choices=("condensed", "full"),
        default=None,
        help=(
            "condensed (default): one full traceback per violated invariant and phase, one line for "
            "each other case; full: every traceback"
        ),
    )
    group.addoption(
        "--readstream-pg-dsn",
        dest="readstream_pg_dsn",
        metavar="URI",
        default=None,
        help="for --readstream-impl=postgres: a running PostgreSQL 18 server to use (libpq URI)",
    )
    group.addoption(
        "--readstream-pg-bindir",
        dest="readstream_pg_bindir",
        metavar="DIR",
        default=None,
        help="for --readstream-impl=postgres: a PostgreSQL 18 bin directory to start servers from",
    )
    group.addoption(
        "--readstream-pg-source",
        dest="readstream_pg_source",
        metavar="DIR",
        default=None,
        help=(
            "the source tree of the PostgreSQL server under test: its read_stream.c runs as a traced "
            "copy in the probe (must be the server's version)"
        ),
    )
    group.addoption(
        "--readstream-pg-fetch-source",
        dest="readstream_pg_fetch_source",
        action="store_true",
        default=None,
        help="fetch the embedded server's exact source (Debian's postgresql-NN source package), cached",
    )
    group.addoption(
        "--readstream-pg-mutant",
        dest="readstream_pg_mutant",
        metavar="NAME",
        default=None,
        help="for --readstream-impl=postgres with a source: build the traced copy with this C-level mutant",
    )
    group.addoption(
        "--readstream-pg-build",
        dest="readstream_pg_build",
        action="store_true",
        default=None,
        help=(
            "for --readstream-impl=postgres: run a PostgreSQL 18.6 built from source with liburing, "
            "assertions and injection points (built once into the cache; needs the [pgbuild] extra)"
        ),
    )
    parser.addini("readstream_impl", "implementation under test (see --readstream-impl)", default="")
    parser.addini("readstream_seed", "seed for every random choice (see --readstream-seed)", default="")
    parser.addini(
        "readstream_model_version",
        "model version of tests that name none (see --readstream-model-version)",
        default="",
    )
    parser.addini("readstream_report", "JSON report path, relative to the ini file", default="")
    parser.addini("readstream_xfails", "expectations file, relative to the ini file", default="")
    parser.addini(
        "readstream_xfails_as_skips",
        "skip the tests listed in the expectations file",
        type="bool",
        default=False,
    )
    parser.addini(
        "readstream_report_announce",
        "print 'report written to PATH' in the summary (readstream check turns it off for a "
        "report it deletes)",
        type="bool",
        default=True,
    )
    parser.addini("readstream_failures", "condensed or full (see --readstream-failures)", default="")
    parser.addini("readstream_pg_dsn", "PostgreSQL server URI for the postgres implementation", default="")
    parser.addini(
        "readstream_pg_bindir", "PostgreSQL bin directory for the postgres implementation", default=""
    )
    parser.addini(
        "readstream_pg_source", "source tree of the server under test, relative to the ini file", default=""
    )
    parser.addini(
        "readstream_pg_fetch_source",
        "fetch the embedded server's source (cached)",
        type="bool",
        default=False,
    )
    parser.addini("readstream_pg_mutant", "C-level mutant of the traced read_stream.c copy", default="")
    parser.addini(
        "readstream_pg_build",
        "run a PostgreSQL built from source (see --readstream-pg-build)",
        type="bool",
        default=False,
    )


def _ini_str(config: pytest.Config, name: str) -> str | None:
    value = config.getini(name)
    if isinstance(value, str):
        value = value.strip()
    return value or None


def _ini_base(config: pytest.Config) -> Path:
    inipath = config.inipath
    return inipath.parent if inipath is not None else config.rootpath


def _path(config: pytest.Config, option: str, ini: str) -> Path | None:
    given = config.getoption(option)
    if given:
        return (config.invocation_params.dir / given).resolve()
    from_ini = _ini_str(config, ini)
    if from_ini:
        return (_ini_base(config) / from_ini).resolve()
    return None


def _xfails_path(config: pytest.Config) -> Path | None:
    """The expectations file: a path, or the bare name of a file shipped with the plugin.

    A file of that name in the current (or ini) directory wins over the shipped one.
    """
    path = _path(config, "readstream_xfails", "readstream_xfails")
    if path is None or path.exists():
        return path
    from .xfails import shipped_expectations

    given = config.getoption("readstream_xfails") or _ini_str(config, "readstream_xfails") or ""
    return shipped_expectations(str(given)) or path


def _failures(config: pytest.Config) -> str:
    given = config.getoption("readstream_failures")
    if given:
        return str(given)
    ini = _ini_str(config, "readstream_failures")
    if ini is None:
        return "condensed"
    if ini not in ("condensed", "full"):
        raise pytest.UsageError(
            f"ini option readstream_failures = {ini!r} is invalid: allowed condensed, full"
        )
    return ini


def _impl(config: pytest.Config) -> tuple[str, str]:
    given = config.getoption("readstream_impl")
    if given is not None and given.strip():
        return given.strip(), "command line"
    env = os.environ.get(ENV_IMPL, "").strip()
    if env:
        return env, "environment"
    ini = _ini_str(config, "readstream_impl")
    if ini:
        return ini, "ini"
    return DEFAULT_IMPL, "default"


def _seed(config: pytest.Config) -> tuple[int, str]:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and WORKERINPUT_SEED in workerinput:
        # The controller's own source ("random", "command line", ...) travels with the seed, so a
        # worker knows whether somebody chose it.
        return int(workerinput[WORKERINPUT_SEED]), str(workerinput.get(WORKERINPUT_SEED_SOURCE, "random"))
    given = config.getoption("readstream_seed")
    if given is not None:
        return given, "command line"
    ini = _ini_str(config, "readstream_seed")
    if ini:
        try:
            value = int(ini, 0)
        except ValueError:
            raise pytest.UsageError(
                f"ini option readstream_seed = {ini!r} is not an integer: allowed 0..{_SEED_MAX}"
            ) from None
        if not 0 <= value <= _SEED_MAX:
            raise pytest.UsageError(
                f"ini option readstream_seed = {value} is out of range: allowed 0..{_SEED_MAX}"
            )
        return value, "ini"
    # Not global random state: a fresh draw that the header prints so the run can be repeated.
    return secrets.randbelow(_SEED_MAX + 1), "random"


def _optional_str(config: pytest.Config, option: str, ini: str) -> str | None:
    given = config.getoption(option)
    if given:
        return str(given)
    return _ini_str(config, ini)


def _check_report_path(path: Path | None) -> None:
    """Refuse at start a report path that could not be written at the end of the run.

    One rule for every output of the project (``readstream --json``, ``--plot``, the bench
    scripts): the directory must exist; nothing creates directories a typo named.
    """
    if path is None:
        return
    if path.is_dir():
        raise pytest.UsageError(f"--readstream-report {str(path)!r} is a directory; give a file path")
    parent = path.parent
    if not parent.is_dir():
        # Name the real obstacle: a file somewhere up the path, or a directory to create.
        ancestor = parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            what = f"{str(ancestor)!r} is not a directory"
        else:
            what = f"directory {str(parent)!r} does not exist (create it first)"
        raise pytest.UsageError(f"--readstream-report {str(path)!r} cannot be written: {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise pytest.UsageError(
            f"--readstream-report {str(path)!r} cannot be written: directory {str(parent)!r} is not writable"
        )


def _check_source_options(
    impl: str,
    pg_dsn: str | None,
    pg_bindir: str | None,
    pg_source: Path | None,
    fetch: bool,
    pg_mutant: str | None,
) -> None:
    """Refuse at start option combinations a traced copy cannot be built from, each in one line."""
    if pg_mutant is not None:
        if impl != "postgres":
            raise pytest.UsageError(
                f"--readstream-pg-mutant {pg_mutant} needs --readstream-impl=postgres (the implementation is {impl})"
            )
        if pg_source is None and not fetch:
            raise pytest.UsageError(
                f"--readstream-pg-mutant {pg_mutant} needs the server's source: give --readstream-pg-source=DIR "
                "or --readstream-pg-fetch-source"
            )
    if pg_source is None and not fetch:
        return
    given = f"--readstream-pg-source {pg_source}" if pg_source is not None else "--readstream-pg-fetch-source"
    if pg_source is not None and fetch:
        raise pytest.UsageError(
            f"give either --readstream-pg-source {pg_source} or --readstream-pg-fetch-source, not both"
        )
    if pg_dsn:
        raise pytest.UsageError(
            f"{given} needs a server the harness starts (--readstream-pg-bindir or the embedded one), "
            "not --readstream-pg-dsn: the traced copy is compiled against the server's headers"
        )
    if fetch and pg_bindir:
        raise pytest.UsageError(
            "--readstream-pg-fetch-source fetches the embedded server's source; for "
            f"--readstream-pg-bindir {pg_bindir} give that build's tree with --readstream-pg-source=DIR"
        )
    # The source tree's version is checked against the server's by the postgres implementation
    # when it is created, still before any test runs (the plugin itself does not import the
    # server harness).


def _check_build_options(
    impl: str, pg_dsn: str | None, pg_bindir: str | None, pg_source: Path | None, pg_build: bool
) -> None:
    """Refuse at start what cannot go with a build from source, each in one line."""
    if not pg_build:
        return
    if impl != "postgres":
        raise pytest.UsageError(
            f"--readstream-pg-build needs --readstream-impl=postgres (the implementation is {impl})"
        )
    if pg_dsn:
        raise pytest.UsageError(
            "give either --readstream-pg-build (a server built from source) or --readstream-pg-dsn, not both"
        )
    if pg_bindir:
        raise pytest.UsageError(
            f"give either --readstream-pg-build (a server built from source) or --readstream-pg-bindir "
            f"{pg_bindir}, not both"
        )
    if pg_source is not None:
        raise pytest.UsageError(
            f"--readstream-pg-build builds the fetched source of the embedded server's version; to trace "
            f"its read_stream.c add --readstream-pg-fetch-source, not --readstream-pg-source {pg_source} "
            "(a build of your own tree: give its bin/ with --readstream-pg-bindir)"
        )


def _model_version(config: pytest.Config) -> str | None:
    """``--readstream-model-version`` (or the ini key) as a model version, or None."""
    given = config.getoption("readstream_model_version")
    where = "--readstream-model-version"
    if not given:
        given, where = _ini_str(config, "readstream_model_version"), "ini option readstream_model_version"
    if not given:
        return None
    from reference_impl.errors import SettingError
    from reference_impl.versions import canonical_version

    try:
        return canonical_version(given)
    except SettingError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def resolve_options(config: pytest.Config) -> ReadstreamOptions:
    """Read every source once and build the run's :class:`ReadstreamOptions`."""
    impl, impl_source = _impl(config)
    seed, seed_source = _seed(config)
    as_skips = config.getoption("readstream_xfails_as_skips")
    if as_skips is None:
        as_skips = bool(config.getini("readstream_xfails_as_skips"))
    report = _path(config, "readstream_report", "readstream_report")
    _check_report_path(report)
    pg_dsn = _optional_str(config, "readstream_pg_dsn", "readstream_pg_dsn")
    pg_bindir = _optional_str(config, "readstream_pg_bindir", "readstream_pg_bindir")
    pg_source = _path(config, "readstream_pg_source", "readstream_pg_source")
    fetch = config.getoption("readstream_pg_fetch_source")
    if fetch is None:
        fetch = bool(config.getini("readstream_pg_fetch_source"))
    pg_mutant = _optional_str(config, "readstream_pg_mutant", "readstream_pg_mutant")
    pg_build = config.getoption("readstream_pg_build")
    if pg_build is None:
        pg_build = bool(config.getini("readstream_pg_build"))
    _check_build_options(impl, pg_dsn, pg_bindir, pg_source, bool(pg_build))
    _check_source_options(impl, pg_dsn, pg_bindir, pg_source, bool(fetch), pg_mutant)
    return ReadstreamOptions(
        impl=impl,
        impl_source=impl_source,
        seed=seed,
        seed_source=seed_source,
        report=report,
        xfails=_xfails_path(config),
        xfails_as_skips=bool(as_skips),
        pg_dsn=pg_dsn,
        pg_bindir=pg_bindir,
        pg_source=pg_source,
        pg_fetch_source=bool(fetch),
        pg_mutant=pg_mutant,
        pg_build=bool(pg_build),
        announce_report=bool(config.getini("readstream_report_announce")),
        failures=_failures(config),
        model_version=_model_version(config),
    )


def get_options(config: pytest.Config) -> ReadstreamOptions:
    """The run's options (resolved in ``pytest_configure``)."""
    try:
        return config.stash[OPTIONS_KEY]
    except KeyError:
        raise RuntimeError(
            "pytest-readstream is not configured in this session (was the plugin disabled with "
            "-p no:readstream?)"
        ) from None
