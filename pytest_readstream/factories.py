"""Fixture factories for a project's ``conftest.py`` (as pytest-postgresql's ``factories``).

The plugin's own fixtures give every test one simulated instance with one relation. A project
that wants more (a second relation, an HDD-backed twin of the default instance, a fixed fault
plan shared by a whole module) makes named variants here::

    # conftest.py
    from pytest_readstream import factories

    hdd = factories.readstream_storage_factory("hdd")
    slow_instance = factories.readstream_instance_factory(storage="hdd", settings={"io_method": "sync"})
    big_table = factories.readstream_relation_factory("bulk", nblocks=20_000, instance="slow_instance")

    # test_mine.py
    def test_big_scan(slow_instance, big_table): ...

A factory's arguments are the fixture's values (they do not read markers, which belong to the
plugin's default fixtures). Everything is rebuilt per test (function scope) unless ``scope`` says
otherwise; an instance must not outlive the relations and streams made in it, so relation
fixtures share their instance fixture's scope. Seeds come from the test's seed as for the default
fixtures, so a factory-made fixture is reproducible from ``--readstream-seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest

from .fixtures import derive_seed, repro_for

__all__ = [
    "readstream_settings_factory",
    "readstream_storage_factory",
    "readstream_faults_factory",
    "readstream_instance_factory",
    "readstream_relation_factory",
]

_Scope = Literal["session", "package", "module", "class", "function"]


def _settings_value(settings: Any = None) -> Any:
    from reference_impl import Settings

    if settings is None:
        return Settings()
    if isinstance(settings, Settings):
        return settings
    if isinstance(settings, dict):
        return Settings().replace(**settings)
    raise TypeError(f"settings={settings!r} is invalid: allowed a Settings, a dict of GUCs or None")


def _storage_value(storage: Any) -> Any:
    from .scenario import profile_value

    return profile_value("nvme" if storage is None else storage, "storage factory argument")


def _seed_for(request: pytest.FixtureRequest) -> int:
    from .config import get_options

    run_seed = get_options(request.config).seed
    return derive_seed(run_seed, getattr(request.node, "nodeid", request.fixturename or ""))


def readstream_settings_factory(*, scope: _Scope = "function", **gucs: Any) -> Callable[..., Any]:
    """A fixture returning ``Settings(**gucs)`` (values may be strings with units: ``"1MB"``)."""
    value = _settings_value(gucs)

    @pytest.fixture(scope=scope)
    def settings_fixture() -> Any:
        return value

    return settings_fixture


def readstream_storage_factory(
    profile: Any = "nvme", *, scope: _Scope = "function", **fields: Any
) -> Callable[..., Any]:
    """A fixture returning a ``DeviceProfile``: a named profile with optional field overrides."""
    from .scenario import changed_profile

    value = changed_profile(_storage_value(profile), dict(fields))

    @pytest.fixture(scope=scope)
    def storage_fixture() -> Any:
        return value

    return storage_fixture


def _plan(faults: Any, seed: int) -> Any:
    from reference_impl import FaultPlan

    from .scenario import plan_parts

    parts: dict[str, Any] = {"faults": [], "foreign_ios": [], "cancel": None}
    if faults is not None:
        plan_parts(faults, "faults factory argument", parts)
    return FaultPlan(parts["faults"], foreign_ios=parts["foreign_ios"], cancel=parts["cancel"], seed=seed)


def readstream_faults_factory(*faults: Any, scope: _Scope = "function") -> Callable[..., Any]:
    """A fixture returning a fresh ``FaultPlan`` of ``faults`` (``Fault``/``ForeignIO``/``CancelAt``)."""
    _plan(list(faults), 0)  # validate now, at conftest import, not in the first test

    @pytest.fixture(scope=scope)
    def faults_fixture(request: pytest.FixtureRequest) -> Any:
        return _plan(list(faults), _seed_for(request))

    return faults_fixture


def readstream_instance_factory(
    *,
    settings: Any = None,
    storage: Any = None,
    faults: Any = None,
    scope: _Scope = "function",
    debug: bool = True,
) -> Callable[..., Any]:
    """A fixture returning a new ``reference_impl.Instance``.

    ``settings`` is a ``Settings`` or a dict of GUCs; ``storage`` a profile name, a
    ``DeviceProfile`` or a dict (``{"profile": "hdd", "jitter": 0.1}``); ``faults`` a list of
    ``Fault``/``ForeignIO``/``CancelAt`` or a ``FaultPlan``. ``None`` means the plugin's default
    fixture (``readstream_settings``, ``readstream_storage``, ``readstream_faults``, which honour
    the test's markers) for a function-scoped instance, and the model's defaults otherwise.
    """
    fixed_settings = None if settings is None else _settings_value(settings)
    fixed_storage = None if storage is None else _storage_value(storage)
    if faults is not None:
        _plan(faults, 0)  # validate now, at conftest import

    @pytest.fixture(scope=scope)
    def instance_fixture(request: pytest.FixtureRequest) -> Any:
        from reference_impl import Instance

        per_test = scope == "function"
        seed = _seed_for(request)

        def default(fixture: str, fallback: Callable[[], Any]) -> Any:
            return request.getfixturevalue(fixture) if per_test else fallback()

        s = fixed_settings if fixed_settings is not None else default("readstream_settings", _settings_value)
        d = (
            fixed_storage
            if fixed_storage is not None
            else default("readstream_storage", lambda: _storage_value(None))
        )
        f = (
            _plan(faults, seed)
            if faults is not None
            else default("readstream_faults", lambda: _plan(None, seed))
        )
        if per_test:
            repro_for(request.node).record(settings=s, storage=d, faults=f)
        return Instance(s, device=d, faults=f, seed=seed, debug=debug)

    return instance_fixture


def readstream_relation_factory(
    shape: Any = None,
    *,
    instance: str = "readstream_instance",
    name: str | None = None,
    scope: _Scope = "function",
    **fields: Any,
) -> Callable[..., Any]:
    """A fixture building a synthetic relation in the instance of fixture ``instance``.

    ``shape`` is a name of ``reference_impl.relations.SHAPES`` or a ``RelationSpec``; ``fields``
    override the spec's fields (``nblocks=...``) or, without a shape, describe it (its seed is
    then the test's seed unless given); ``name`` names the relation (give each relation of one
    instance its own). The fixture returns a ``SyntheticRelation`` (``.heap`` is the table).
    """
    from ._relations import make_spec

    make_spec(shape, fields, name=name, where="readstream_relation_factory")  # validate at import

    @pytest.fixture(scope=scope)
    def relation_fixture(request: pytest.FixtureRequest) -> Any:
        from ._relations import build

        inst = request.getfixturevalue(instance)
        spec = make_spec(
            shape, fields, name=name, seed=_seed_for(request), where="readstream_relation_factory"
        )
        if scope == "function":
            repro_for(request.node).record(relation=spec)
        return build(inst, spec)

    return relation_fixture
