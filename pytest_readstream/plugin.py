"""pytest-readstream's pytest plugin (the ``pytest11`` entry point ``readstream``).

What happens when, in one run:

``pytest_configure`` (first among plugins)
    resolve the options once (command line > ``READSTREAM_IMPL`` > ini > default) into a frozen
    :class:`~pytest_readstream.config.ReadstreamOptions`; load the implementation and check it
    against the protocol, turning any problem into one ``pytest.UsageError``; read the
    expectations file; register the hypothesis profiles and, where asked for, hand the seed to
    hypothesis. Under pytest-xdist the controller does this too, so a bad name fails before any
    worker starts, and it passes its seed to the workers (``pytest_configure_node``).
``pytest_collection_modifyitems``
    validate the ``readstream_*`` markers; apply the expectations file (strict xfails, or skips);
    warn about expectation lines that match no test.
``pytest_runtest_setup``
    attach the test's metadata, skip it when it requires a capability the implementation lacks.
``pytest_runtest_makereport``
    attach the scenario; add the reproduction section to a failure.
``pytest_runtest_logreport`` / ``pytest_terminal_summary`` / ``pytest_sessionfinish``
    gather results where reports arrive (the xdist controller), print the summary, write the
    JSON report atomically, also after failures and interruptions.

The module imports nothing heavy: the model, numpy, hypothesis and faker are imported when a
hook or fixture needs them, so a project that only has the plugin installed pays little.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .config import (
    OPTIONS_KEY,
    WORKERINPUT_SEED,
    WORKERINPUT_SEED_SOURCE,
    ReadstreamOptions,
    add_options,
    get_options,
    resolve_options,
)
from .fixtures import (
    CALL_FAILED_KEY,
    IMPL_KEY,
    readstream_backend,
    readstream_clock,
    readstream_faker,
    readstream_faults,
    readstream_impl,
    readstream_instance,
    readstream_pool,
    readstream_relation,
    readstream_repro,
    readstream_rng,
    readstream_seed,
    readstream_settings,
    readstream_stats,
    readstream_storage,
    readstream_stream_factory,
    readstream_test_seed,
    repro_for,
)
from .markers import (
    MARKER_ERROR_KEY,
    READSTREAM_ITEM_KEY,
    add_meta,
    invariant_kind,
    invariant_tier,
    note_missing_capability,
    register_markers,
    required_capabilities,
    validate_item,
)
from .reporting import FAILURE_KIND_PROPERTY, SCENARIO_PROPERTY, Results, write_json_atomically
from .scenario import set_model_version

__all__ = [
    "readstream_backend",
    "readstream_clock",
    "readstream_faker",
    "readstream_faults",
    "readstream_impl",
    "readstream_instance",
    "readstream_pool",
    "readstream_relation",
    "readstream_repro",
    "readstream_rng",
    "readstream_seed",
    "readstream_settings",
    "readstream_stats",
    "readstream_storage",
    "readstream_stream_factory",
    "readstream_test_seed",
]


@dataclass
class _State:
    """The plugin's per-run state (in ``config.stash``; never module globals, for pytester)."""

    options: ReadstreamOptions
    implementation: Any
    is_worker: bool
    xfails: list[Any] = field(default_factory=list)
    results: Results = field(default_factory=Results)
    report_written: str | None = None
    report_error: str | None = None
    # Readstream tests deselected (-k, -m, --deselect) per tier, so that a verdict can say how
    # many tests of a tier exist, not only how many were collected into the run.
    deselected: Counter[str] = field(default_factory=Counter)
    violation_groups: list[Any] = field(default_factory=list)
    restore_hypothesis_seed: tuple[Any] | None = None


_STATE_KEY = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
    return config.stash[_STATE_KEY]


def _is_readstream(item: pytest.Item) -> bool:
    return item.stash.get(READSTREAM_ITEM_KEY, False)


def _failure_kind(item: pytest.Item, exc: BaseException) -> str | None:
    checked = getattr(exc, "readstream_kind", None)
    if checked == "implementation":
        return "implementation"
    return invariant_kind(item)


# ------------------------------------------------------------------------------------ start-up
def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _load(config: pytest.Config, opts: ReadstreamOptions) -> Any:
    from .implementations import ImplementationNotFound, load_implementation

    # A module named on the command line is looked for where the user typed the command, then
    # in the rootdir (an xdist worker gets the controller's invocation directory).
    search_dirs = [config.invocation_params.dir, config.rootpath]
    pg_bindir = opts.pg_bindir
    pg_source = str(opts.pg_source) if opts.pg_source is not None else None
    pg_fetch_source = opts.pg_fetch_source
    if opts.pg_build:
        build = _pg_build(config)
        pg_bindir = str(build.bindir)
        if (
            pg_fetch_source
            and (build.source / "src" / "backend" / "storage" / "aio" / "read_stream.c").is_file()
        ):
            # The traced copy comes from the tree that was built (the same fetched source); if
            # that cache was removed since, the fetch of the same version happens again.
            pg_source, pg_fetch_source = str(build.source), False
    try:
        return load_implementation(
            opts.impl,
            pg_dsn=opts.pg_dsn,
            pg_bindir=pg_bindir,
            pg_source=pg_source,
            pg_fetch_source=pg_fetch_source,
            pg_mutant=opts.pg_mutant,
            search_dirs=search_dirs,
        )
    except ImplementationNotFound as err:
        text = " ".join(str(err).split())  # one line, whatever the underlying error printed
        raise pytest.UsageError(
            f"--readstream-impl={opts.impl} (from {opts.describe_impl_source()}): {text}"
        ) from None


def _pg_build(config: pytest.Config) -> Any:
    """The server built from source (``--readstream-pg-build``), built now if it is not cached.

    The controller builds, with one progress line per step on stderr, before any worker starts;
    the workers find the build in the cache (they would wait on its lock otherwise). Anything
    missing is one line and exit 4, before any test runs: the user asked for this build.
    """
    from .implementations import ImplementationNotFound, build_postgres_from_source

    is_worker = hasattr(config, "workerinput")

    def say(line: str) -> None:
        if not is_worker:
            sys.stderr.write(f"readstream pg-build: {line}\n")
            sys.stderr.flush()

    try:
        return build_postgres_from_source(say)
    except ImplementationNotFound as err:
        raise pytest.UsageError(f"--readstream-pg-build: {err}") from None


def _check_server_options(config: pytest.Config, opts: ReadstreamOptions, impl: Any, is_worker: bool) -> None:
    """The server options, refused at start-up with one line (exit 4) when they cannot work.

    Given on the command line for another implementation they would be ignored without a word,
    so that is an error too; an ini file may set them for a project that runs several
    implementations. Reachability is checked once, by the controller, before any worker starts.
    """
    from ._server_args import dsn_problem

    if opts.impl != "postgres":
        for dest, flag in (
            ("readstream_pg_dsn", "--readstream-pg-dsn"),
            ("readstream_pg_bindir", "--readstream-pg-bindir"),
        ):
            if config.getoption(dest):
                raise pytest.UsageError(
                    f"{flag} applies only to --readstream-impl=postgres (the implementation is {opts.impl!r})"
                )
        return
    # A DSN with a bin directory is refused by the implementation itself, at creation. The
    # server is asked only by the harness's own implementation: a substitute registered under
    # the name (a test double, a wrapper) decides what its DSN means.
    connect = not is_worker and type(impl).__module__.startswith("pytest_readstream.postgres")
    problem = dsn_problem("--readstream-pg-dsn", opts.pg_dsn, connect=connect) if opts.pg_dsn else None
    if problem:
        raise pytest.UsageError(problem)


def _version_expectations(opts: ReadstreamOptions, impl: Any) -> ReadstreamOptions:
    """With no expectations file given, a PostgreSQL server's known failures are those of its
    version: the shipped ``postgresql-<model version>`` file (``postgresql-19``,
    ``postgresql-20devel``, ...), when there is one."""
    if opts.xfails is not None or opts.impl != "postgres":
        return opts
    try:
        version = getattr(impl, "model_version", None)
    except Exception:  # a server that cannot say: the tests report that themselves
        return opts
    if not isinstance(version, str):
        return opts
    from dataclasses import replace

    from .xfails import shipped_expectations

    shipped = shipped_expectations(f"postgresql-{version}")
    return replace(opts, xfails=shipped, xfails_auto=True) if shipped is not None else opts


def _setup_hypothesis(config: pytest.Config, opts: ReadstreamOptions, state: _State) -> None:
    profile = getattr(config.option, "hypothesis_profile", None)
    if not profile and "hypothesis" not in sys.modules:
        return
    from hypothesis import settings

    from .hypothesis_profiles import SEEDED_PROFILES, register_profiles

    own = register_profiles()
    if profile:
        from hypothesis.errors import InvalidArgument

        try:
            settings.get_profile(profile)
        except InvalidArgument:
            # Said here, before hypothesis' own plugin meets the name and stops with an
            # internal error. The known names are not public API; list them when readable.
            known = sorted(getattr(settings, "_profiles", {}) or own)
            raise pytest.UsageError(
                f"--hypothesis-profile {profile!r} is not registered: available {', '.join(known)}"
            ) from None
    current = settings.get_current_profile_name()
    if current in own:
        # A conftest loaded this name before the plugin registered it (hypothesis' own "ci"):
        # load it again so that the plugin's version is the one in force.
        settings.load_profile(current)
    # One seed drives hypothesis too when the run asked for reproducibility: the ci or thorough
    # profile, or a seed chosen by the user. (Not dev: a forced seed would bypass its example
    # database.) An explicit --hypothesis-seed always wins.
    if (
        hasattr(config.option, "hypothesis_seed")
        and config.option.hypothesis_seed is None
        and ((profile or current) in SEEDED_PROFILES or opts.seed_given)
    ):
        config.option.hypothesis_seed = str(opts.seed)
        # hypothesis keeps the seed in a module global; put it back at unconfigure so that an
        # in-process run (pytester) does not leak it into the surrounding session.
        import hypothesis.core

        state.restore_hypothesis_seed = (getattr(hypothesis.core, "global_force_seed", None),)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
    opts = resolve_options(config)
    config.stash[OPTIONS_KEY] = opts
    set_model_version(opts.model_version)
    is_worker = hasattr(config, "workerinput")
    impl = _load(config, opts)
    _check_server_options(config, opts, impl, is_worker)
    opts = _version_expectations(opts, impl)
    config.stash[OPTIONS_KEY] = opts
    config.stash[IMPL_KEY] = impl
    state = _State(options=opts, implementation=impl, is_worker=is_worker)
    if opts.xfails is not None:
        from .xfails import parse_xfails

        state.xfails = parse_xfails(opts.xfails)
    config.stash[_STATE_KEY] = state
    if not state.is_worker:
        config.pluginmanager.register(_Results(config), "readstream-results")
    _setup_hypothesis(config, opts, state)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: give every worker the controller's seed."""
    opts = get_options(node.config)
    node.workerinput[WORKERINPUT_SEED] = opts.seed
    node.workerinput[WORKERINPUT_SEED_SOURCE] = opts.seed_source


def pytest_unconfigure(config: pytest.Config) -> None:
    set_model_version(None)
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    if state.restore_hypothesis_seed is not None:
        import hypothesis.core

        hypothesis.core.global_force_seed = state.restore_hypothesis_seed[0]
    close = getattr(state.implementation, "close", None)
    if callable(close):
        close()


def _capabilities(impl: Any) -> frozenset[str]:
    """What the implementation offers for its default settings (``capabilities_for(None)``): a
    server's stream capabilities are known only once its probe was built and loaded."""
    from .implementations import capabilities_for

    return capabilities_for(impl, None)


def _impl_description(config: pytest.Config) -> str:
    state = _state(config)
    opts = state.options
    impl = state.implementation
    caps = ", ".join(sorted(_capabilities(impl))) or "none"
    source = "" if opts.impl_source == "default" else f", from {opts.describe_impl_source()}"
    return f"{opts.impl} ({type(impl).__name__}{source}); capabilities: {caps}"


def _seed_description(opts: ReadstreamOptions) -> str:
    how = "random" if not opts.seed_given else opts.seed_source
    return f"{opts.seed} ({how}; reproduce with --readstream-seed={opts.seed})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    opts = get_options(config)
    lines = [
        f"readstream: implementation {_impl_description(config)}",
        f"readstream: seed {_seed_description(opts)}",
    ]
    if opts.model_version is not None:
        lines.append(f"readstream: model version {opts.model_version} (--readstream-model-version)")
    return lines


# ------------------------------------------------------------------------------------ collection
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    state = _state(config)
    for item in items:
        validate_item(item)
        if _is_readstream(item):
            _skip_missing_capabilities(item, state.implementation, state.options.impl)
    opts = state.options
    if opts.xfails is None:
        return
    import warnings

    from .xfails import ReadstreamXfailsWarning, apply_xfails

    unused = apply_xfails(items, state.xfails, opts.xfails, as_skips=opts.xfails_as_skips)
    if opts.xfails_auto:
        unused = []  # a run of some of the suite, or of one's own tests: nothing to fix there
    for entry in unused:
        # Point the warning at the line of the expectations file, where the fix is.
        warnings.warn_explicit(
            ReadstreamXfailsWarning(
                f"--readstream-xfails {opts.xfails.name} line {entry.lineno}: {entry.prefix!r} "
                "matches no collected test (renamed or removed? delete the line)"
            ),
            category=ReadstreamXfailsWarning,
            filename=str(opts.xfails),
            lineno=entry.lineno,
        )


_DESELECTED_OUTPUT = "readstream_deselected"


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    state = items[0].config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    for item in items:
        tier = invariant_tier(item)
        if tier is not None:
            state.deselected[tier] += 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its deselection counts to the controller (``workeroutput``)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    state = session.config.stash.get(_STATE_KEY, None)
    if workeroutput is not None and state is not None:
        workeroutput[_DESELECTED_OUTPUT] = dict(state.deselected)


# ------------------------------------------------------------------------------------ running
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _is_readstream(item):
        return
    state = _state(item.config)
    add_meta(item, state.options.impl)
    for cap in item.stash.get(_MISSING_KEY, ()):
        note_missing_capability(item, cap)
    problem = item.stash.get(MARKER_ERROR_KEY, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    harness = item.stash.get(_HARNESS_PROBLEM_KEY, None)
    if harness is not None:
        from .harness_errors import HarnessError

        raise HarnessError(harness)


_MISSING_KEY = pytest.StashKey[list[str]]()
_HARNESS_PROBLEM_KEY = pytest.StashKey[str]()


def _skip_missing_capabilities(item: pytest.Item, implementation: Any, impl_name: str) -> None:
    """Skip (by marker, so the report points at the test) when a required capability is missing."""
    needed = required_capabilities(item)
    if not needed or item.stash.get(MARKER_ERROR_KEY, None) is not None:
        return
    from .implementations import capabilities_for
    from .protocol import CAPABILITIES
    from .scenario import settings_for_item

    try:
        settings = settings_for_item(item)
    except Exception:  # the readstream_settings fixture will report the bad settings itself
        settings = None
    have = capabilities_for(implementation, settings)
    missing = [cap for cap in needed if cap not in have]
    problem = getattr(implementation, "harness_problem", None)
    for cap in missing:
        why_not = problem(cap) if callable(problem) else None
        if why_not:
            # Not a capability the implementation lacks, but one the harness failed to set up
            # (the probe did not build, the server did not start): the test errors as such.
            item.stash[_HARNESS_PROBLEM_KEY] = why_not
            return
    if missing:
        item.stash[_MISSING_KEY] = missing
        name = getattr(implementation, "name", impl_name)
        why = getattr(implementation, "why_lacking", None)
        reasons = [why(cap) if callable(why) else None for cap in missing]
        reason = f"implementation {name!r} lacks " + ", ".join(
            f"capability {cap!r} ({CAPABILITIES[cap]})" + (f": {r}" if r else "")
            for cap, r in zip(missing, reasons, strict=True)
        )
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    readstream = _is_readstream(item)
    if readstream and call.when == "teardown":
        # The teardown report is the last one: it carries the complete scenario.
        item.user_properties.append((SCENARIO_PROPERTY, repro_for(item).as_dict()))
    report: pytest.TestReport = yield
    if report.failed and call.excinfo is not None:
        from .harness_errors import HARNESS_ERROR_PROPERTY, harness_error_line

        line = harness_error_line(call.excinfo.value)
        if line is not None:
            # The test judged nothing: the report and the verdict say so (harness_errors.py).
            report.user_properties.append((HARNESS_ERROR_PROPERTY, line))
        elif readstream:
            # A contract test can fail on a per-version expectation its driver checks (reset
            # waiting for every read): the kind of the check that failed, beside the test's.
            kind = _failure_kind(item, call.excinfo.value)
            if kind is not None:
                report.user_properties.append((FAILURE_KIND_PROPERTY, kind))
    if readstream and report.failed:
        already = item.stash.get(CALL_FAILED_KEY, False)
        if call.when == "call":
            item.stash[CALL_FAILED_KEY] = True
        if not already:
            report.sections.append(("readstream reproduction", repro_for(item).render()))
    return report


# ------------------------------------------------------------------------------------ results
class _Results:
    """Where reports arrive (a serial run, or the xdist controller): summary and JSON report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _state(self.config).results.add_report(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        # Every worker collects and deselects the same tests: the counts are taken once, not summed.
        counts = getattr(node, "workeroutput", {}).get(_DESELECTED_OUTPUT) or {}
        state = _state(self.config)
        for tier, n in counts.items():
            state.deselected[tier] = max(state.deselected[tier], int(n))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        state = _state(self.config)
        self._condense(state)
        path = state.options.report
        if path is None:
            return
        from importlib.metadata import PackageNotFoundError, version

        try:
            plugin_version = version("pytest-readstream")
        except PackageNotFoundError:
            plugin_version = "unknown"
        impl = state.implementation
        data = state.results.as_report(
            implementation={
                "spec": state.options.impl,
                "source": state.options.impl_source,
                "name": getattr(impl, "name", None),
                "class": f"{type(impl).__module__}.{type(impl).__qualname__}",
                "capabilities": sorted(_capabilities(impl)),
            },
            seed=state.options.seed,
            exitstatus=int(exitstatus),
            interrupted=int(exitstatus) == int(pytest.ExitCode.INTERRUPTED),
            plugin_version=plugin_version,
        )
        data["deselected"] = dict(sorted(state.deselected.items()))
        try:
            write_json_atomically(path, data)
            state.report_written = str(path)
        except OSError as err:
            state.report_error = f"could not write --readstream-report {str(path)!r}: {err}"

    def _condense(self, state: _State) -> None:
        """Shorten repeated failures before pytest prints them (the terminal reporter prints its
        failures section after every ``pytest_sessionfinish`` implementation has run)."""
        if state.options.failures != "condensed":
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        from ._condense import condense

        reports = [*reporter.stats.get("failed", []), *reporter.stats.get("error", [])]
        state.violation_groups = condense(reports, state.results)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        state = _state(config)
        opts = state.options
        if not state.results.readstream_tests() and opts.impl_source == "default" and opts.report is None:
            return  # nothing of ours ran and nothing was asked of us
        terminalreporter.section("readstream")
        lines = state.results.summary_lines(
            impl_line=f"implementation: {_impl_description(config)}",
            seed_line=f"seed: {_seed_description(opts)}",
        )
        for line in lines:
            terminalreporter.write_line(line)
        if state.violation_groups:
            from ._condense import summary_lines

            terminalreporter.write_line("")
            for line in summary_lines(state.violation_groups):
                terminalreporter.write_line(line)
        if state.report_written and opts.announce_report:
            terminalreporter.write_line(f"report written to {state.report_written}")
        if state.report_error:
            terminalreporter.write_line(state.report_error, red=True)
