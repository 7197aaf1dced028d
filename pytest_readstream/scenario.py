"""Turning markers and parameters into model objects: settings, storage profiles, fault plans.

A test describes its scenario declaratively, with a marker (``@pytest.mark.readstream_settings(
io_method="sync")``) or an indirect parameter (``parametrize("readstream_settings", [{...}],
indirect=True)``). The functions here build the model's objects from those descriptions. They are
shared by the fixtures and by the capability check that runs before a test's fixtures (the
reference implementation's ``pause-resume`` depends on the settings' ``version``), so both see the
same settings.

Markers apply outermost first (class or module, then function), each overriding the one before;
an indirect parameter is applied last. Bad values raise the model's ``SettingError``, whose
message names the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

__all__ = [
    "NO_PARAM",
    "set_model_version",
    "model_version",
    "model_versions",
    "default_settings",
    "settings_from",
    "storage_from",
    "faults_from",
    "item_param",
    "settings_for_item",
    "profile_value",
    "changed_profile",
    "plan_parts",
]

NO_PARAM: Any = object()

# The model version of the run (--readstream-model-version): the version of every Settings the
# harness makes for a test that does not name one. None: the Settings default (18).
_MODEL_VERSION: str | None = None


def set_model_version(version: str | None) -> None:
    """Make ``version`` (``"18"``, ``"19"``, ``"20devel"`` or ``"master"``) the run's model version."""
    global _MODEL_VERSION
    if version is None:
        _MODEL_VERSION = None
        return
    from reference_impl.versions import canonical_version

    _MODEL_VERSION = canonical_version(version)


def model_version() -> str | None:
    """The run's model version, or None if none was chosen (the Settings default, 18)."""
    return _MODEL_VERSION


def model_versions() -> tuple[str, ...]:
    """The versions a test drawing settings at random may draw: the run's, or every version."""
    from reference_impl.versions import VERSIONS

    return VERSIONS if _MODEL_VERSION is None else (_MODEL_VERSION,)


def default_settings(**changes: Any) -> Any:
    """``Settings(**changes)`` in the run's model version unless ``changes`` names a version."""
    from reference_impl import Settings

    if _MODEL_VERSION is not None and "version" not in changes:
        changes = {"version": _MODEL_VERSION, **changes}
    return Settings(**changes)


def item_param(item: pytest.Item, fixture: str) -> Any:
    """The indirect parameter given to ``fixture`` for this item, or :data:`NO_PARAM`."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and fixture in callspec.params:
        return callspec.params[fixture]
    return NO_PARAM


def _markers_outermost_first(item: pytest.Item, name: str) -> list[pytest.Mark]:
    return list(reversed(list(item.iter_markers(name))))


def _apply_settings(base: Any, value: Any, where: str) -> Any:
    from reference_impl import Settings
    from reference_impl.errors import SettingError

    if value is None:
        return base
    if isinstance(value, Settings):
        return value
    if isinstance(value, Mapping):
        return base.replace(**dict(value)) if value else base
    if callable(value):
        # A function of the settings so far (their version above all): for settings a test
        # states in each version's own terms, such as the I/O worker pool (io_worker_pool).
        return _apply_settings(base, value(base), where)
    raise SettingError(
        f"{where}: {value!r} is not a Settings object, a mapping of GUC names to values or a "
        "function of the settings so far returning one"
    )


def settings_from(item: pytest.Item, param: Any = NO_PARAM) -> Any:
    """The ``Settings`` for a test: defaults (in the run's model version, else the implementation's
    own: a server is judged by the model of its version), then markers, then the indirect
    parameter."""
    settings = (
        default_settings()
        if _MODEL_VERSION is not None
        else default_settings(version=native_version(item.config))
    )
    for mark in _markers_outermost_first(item, "readstream_settings"):
        for arg in mark.args:
            settings = _apply_settings(settings, arg, "@pytest.mark.readstream_settings")
        if mark.kwargs:
            settings = settings.replace(**mark.kwargs)
    if param is not NO_PARAM:
        settings = _apply_settings(settings, param, "readstream_settings parameter")
    return settings


def native_version(config: pytest.Config) -> str:
    """The model version a test's settings get when they name none: the implementation's own
    (``model_version``: a PostgreSQL server is judged by the model of its version), else the
    ``Settings`` default."""
    from reference_impl import Settings

    from ._stash import IMPL_KEY

    impl = config.stash.get(IMPL_KEY, None)
    try:
        version = getattr(impl, "model_version", None)
    except Exception:  # a server that cannot say: its tests report that themselves
        version = None
    return version if isinstance(version, str) else Settings().version


def settings_for_item(item: pytest.Item) -> Any:
    return settings_from(item, item_param(item, "readstream_settings"))


def profile_value(value: Any, where: str) -> Any:
    from reference_impl import DeviceProfile
    from reference_impl.errors import SettingError
    from reference_impl.storage import device_profile

    if isinstance(value, DeviceProfile):
        return value
    if isinstance(value, str):
        return device_profile(value)
    if isinstance(value, Mapping):
        changes = dict(value)
        base = device_profile(changes.pop("profile", "nvme"))
        return changed_profile(base, changes)
    raise SettingError(f"{where}: {value!r} is not a device profile name, a DeviceProfile or a mapping")


def changed_profile(base: Any, changes: dict[str, Any]) -> Any:
    if not changes:
        return base
    if "name" not in changes:
        desc = ", ".join(f"{k}={v!r}" for k, v in sorted(changes.items()))
        changes["name"] = f"{base.name}({desc})"
    return base.with_changes(**changes)


def storage_from(item: pytest.Item, param: Any = NO_PARAM) -> Any:
    """The ``DeviceProfile`` for a test: ``nvme``, then markers, then the indirect parameter.

    A marker takes a profile name (or ``DeviceProfile``) and/or field overrides:
    ``@pytest.mark.readstream_storage("hdd", jitter=0.1)``. A parameter is a name, a profile or a
    mapping (``{"profile": "cloud-1ms", "read_latency_us": 2000}``).
    """
    from reference_impl.storage import device_profile

    profile = device_profile("nvme")
    for mark in _markers_outermost_first(item, "readstream_storage"):
        for arg in mark.args:
            profile = profile_value(arg, "@pytest.mark.readstream_storage")
        profile = changed_profile(profile, dict(mark.kwargs))
    if param is not NO_PARAM:
        profile = profile_value(param, "readstream_storage parameter")
    return profile


def plan_parts(value: Any, where: str, parts: dict[str, Any]) -> None:
    from reference_impl import CancelAt, Fault, FaultPlan, ForeignIO
    from reference_impl.errors import SettingError

    if isinstance(value, Fault):
        parts["faults"].append(value)
    elif isinstance(value, ForeignIO):
        parts["foreign_ios"].append(value)
    elif isinstance(value, CancelAt):
        parts["cancel"] = value
    elif isinstance(value, FaultPlan):
        plan_parts(value.to_dict(), where, parts)
    elif isinstance(value, Mapping):
        plan = FaultPlan.from_dict(dict(value))
        parts["faults"].extend(plan.faults)
        parts["foreign_ios"].extend(plan.foreign_ios)
        if plan.cancel is not None:
            parts["cancel"] = plan.cancel
    elif isinstance(value, (list, tuple)):
        for v in value:
            plan_parts(v, where, parts)
    else:
        raise SettingError(
            f"{where}: {value!r} is not a Fault, ForeignIO, CancelAt, FaultPlan, a list of them "
            "or a FaultPlan.to_dict() mapping"
        )


def _random_faults(spec: Any, seed: int, where: str) -> list[Any]:
    from reference_impl import FaultPlan
    from reference_impl.errors import SettingError

    if not isinstance(spec, Mapping) or "relation" not in spec or "nblocks" not in spec:
        raise SettingError(
            f"{where}: random={spec!r} must be a mapping with relation=..., nblocks=... "
            "(and optionally count=..., kinds=(...))"
        )
    return FaultPlan.random(seed, **dict(spec)).faults


def faults_from(item: pytest.Item, seed: int, param: Any = NO_PARAM) -> Any:
    """A fresh ``FaultPlan`` for a test: empty, then markers, then the indirect parameter.

    Markers take ``Fault`` / ``ForeignIO`` / ``CancelAt`` objects (or a ``FaultPlan``) as
    arguments, and keywords ``faults=[...]``, ``foreign_ios=[...]``, ``cancel=CancelAt(...)`` or
    ``random={"relation": "t", "nblocks": 100, "count": 3}`` (drawn from the test's seed). A plan
    holds state (how often each fault fired, the ledger), so every test gets its own copy.
    """
    from reference_impl import FaultPlan

    parts: dict[str, Any] = {"faults": [], "foreign_ios": [], "cancel": None}
    for mark in _markers_outermost_first(item, "readstream_faults"):
        where = "@pytest.mark.readstream_faults"
        for arg in mark.args:
            plan_parts(arg, where, parts)
        for key, value in mark.kwargs.items():
            if key == "random":
                parts["faults"].extend(_random_faults(value, seed, where))
            elif key in ("faults", "foreign_ios", "cancel"):
                plan_parts(value if isinstance(value, (list, tuple)) else [value], where, parts)
            else:
                from reference_impl.errors import SettingError

                raise SettingError(
                    f"{where}: unknown keyword {key!r}: allowed faults, foreign_ios, cancel, random"
                )
    if param is not NO_PARAM:
        plan_parts(param, "readstream_faults parameter", parts)
    return FaultPlan(parts["faults"], foreign_ios=parts["foreign_ios"], cancel=parts["cancel"], seed=seed)
