"""The ``readstream_*`` markers: declaration, validation at collection, capability skips.

* ``readstream_settings(**gucs)``, ``readstream_storage(name, **fields)``,
  ``readstream_faults(*faults, **kw)``: the scenario (read by the fixtures, see ``scenario.py``);
* ``readstream_requires(*capabilities)``: skip, with the reason, when the implementation under
  test lacks one;
* ``readstream_invariant(family, tier, kind=...)``: the invariant family a conformance test checks,
  its tier (``MUST``, ``SHOULD``, ``MAY``, as the JSON-Schema test suite grades its tests) and its
  kind (``contract`` or ``implementation``, :data:`KINDS`; SHOULD and MAY are ``implementation``
  unless they say otherwise); the summary and the report group by family, and the report carries
  the kind (``readstream_meta``'s ``invariant``) and, for a failure, the kind of the check that
  failed (``readstream_failure_kind``).

A malformed marker (an unknown capability, a tier that is not one of the three) is found at
collection and makes that test fail at setup with a message naming the marker and what is
allowed; the rest of the run goes on, and nothing is silently ignored.

A *readstream test* is one that uses a ``readstream_*`` fixture or marker. Only those carry the
plugin's per-test metadata (``readstream_meta`` user property), so a project that merely has the
plugin installed sees no change in its reports.
"""

from __future__ import annotations

from typing import Any

import pytest

from .protocol import CAPABILITIES
from .reporting import META_PROPERTY

__all__ = [
    "MARKERS",
    "TIERS",
    "KINDS",
    "invariant_kind",
    "register_markers",
    "is_readstream_item",
    "validate_item",
    "MARKER_ERROR_KEY",
    "READSTREAM_ITEM_KEY",
    "add_meta",
    "invariant_tier",
    "note_missing_capability",
    "required_capabilities",
]

TIERS = ("MUST", "SHOULD", "MAY")
#: What an invariant states (docs/conformance.md, "Contract and implementation"): ``contract``,
#: what PostgreSQL promises the callers of its stream (pins released by the end of the statement,
#: each block returned once, in order, ...); ``implementation``, what a version merely does (that
#: reset and end wait for every started read, exact read sequences, ...), a per-version
#: expectation that a patch may change on purpose.
KINDS = ("contract", "implementation")
MARKERS: dict[str, str] = {
    "readstream_settings": "readstream_settings(**gucs): reference_impl.Settings for the test's instance",
    "readstream_storage": "readstream_storage(profile, **fields): the simulated device (a DeviceProfile)",
    "readstream_faults": (
        "readstream_faults(*faults, faults=, foreign_ios=, cancel=, random=): the test's FaultPlan"
    ),
    "readstream_requires": "readstream_requires(*capabilities): skip when the implementation lacks one",
    "readstream_invariant": (
        "readstream_invariant(family, tier, kind=None): the invariant family, MUST/SHOULD/MAY tier, and "
        "kind (contract: what PostgreSQL promises callers; implementation: what a version does)"
    ),
    "readstream_relation": "readstream_relation(shape, **params): the readstream_relation fixture's spec",
}

MARKER_ERROR_KEY = pytest.StashKey[str]()
READSTREAM_ITEM_KEY = pytest.StashKey[bool]()


def register_markers(config: pytest.Config) -> None:
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)


def is_readstream_item(item: pytest.Item) -> bool:
    if any(name.startswith("readstream_") for name in getattr(item, "fixturenames", ())):
        return True
    return any(m.name.startswith("readstream_") for m in item.iter_markers())


def _invariant(item: pytest.Item) -> dict[str, str] | None:
    mark = item.get_closest_marker("readstream_invariant")
    if mark is None:
        return None
    args = list(mark.args)
    family = mark.kwargs.get("family", args[0] if args else None)
    tier = mark.kwargs.get("tier", args[1] if len(args) > 1 else None)
    if not isinstance(family, str) or not family.strip():
        raise ValueError(
            f"@pytest.mark.readstream_invariant needs a family name (a non-empty string), got {family!r}"
        )
    if not isinstance(tier, str) or tier.upper() not in TIERS:
        raise ValueError(
            f"@pytest.mark.readstream_invariant({family!r}, {tier!r}): tier must be one of {', '.join(TIERS)}"
        )
    kind = mark.kwargs.get("kind", args[2] if len(args) > 2 else None)
    if kind is not None and kind not in KINDS:
        raise ValueError(
            f"@pytest.mark.readstream_invariant({family!r}, {tier!r}, kind={kind!r}): kind must be one of "
            f"{', '.join(KINDS)}"
        )
    if kind is None and tier.upper() != "MUST":
        # What a version does beyond its promises is a SHOULD or MAY by definition.
        kind = "implementation"
    return {"family": family.strip(), "tier": tier.upper(), "kind": kind}


def invariant_tier(item: pytest.Item) -> str | None:
    """The item's tier (``MUST``, ``SHOULD``, ``MAY``), or ``None`` when it has no valid marker."""
    try:
        invariant = _invariant(item)
    except ValueError:
        return None
    return invariant["tier"] if invariant else None


def invariant_kind(item: pytest.Item) -> str | None:
    """The item's kind (``contract`` or ``implementation``), or ``None`` when it has none."""
    try:
        invariant = _invariant(item)
    except ValueError:
        return None
    return invariant["kind"] if invariant else None


def required_capabilities(item: pytest.Item) -> list[str]:
    caps: list[str] = []
    for mark in item.iter_markers("readstream_requires"):
        for cap in mark.args:
            if cap not in caps:
                caps.append(cap)
    return caps


def validate_item(item: pytest.Item) -> None:
    """Check the item's markers; remember a problem to report when the test is set up."""
    item.stash[READSTREAM_ITEM_KEY] = is_readstream_item(item)
    if not item.stash[READSTREAM_ITEM_KEY]:
        return
    try:
        _invariant(item)
    except ValueError as err:
        item.stash[MARKER_ERROR_KEY] = str(err)
        return
    for cap in required_capabilities(item):
        if cap not in CAPABILITIES:
            item.stash[MARKER_ERROR_KEY] = (
                f"@pytest.mark.readstream_requires: unknown capability {cap!r}: allowed "
                f"{', '.join(CAPABILITIES)}"
            )
            return


def _meta(item: pytest.Item) -> dict[str, Any] | None:
    for name, value in item.user_properties:
        if name == META_PROPERTY and isinstance(value, dict):
            return value
    return None


def add_meta(item: pytest.Item, implementation: str) -> dict[str, Any]:
    """Attach the test's ``readstream_meta`` user property (once) and return it."""
    meta = _meta(item)
    if meta is None:
        try:
            invariant = _invariant(item)
        except ValueError:
            invariant = None
        meta = {"implementation": implementation, "invariant": invariant, "missing_capabilities": []}
        item.user_properties.append((META_PROPERTY, meta))
    return meta


def note_missing_capability(item: pytest.Item, capability: str) -> None:
    """Record that the test is skipped for lacking ``capability`` (for the summary)."""
    meta = _meta(item)
    if meta is None:
        from .config import get_options

        meta = add_meta(item, get_options(item.config).impl)
    if capability not in meta["missing_capabilities"]:
        meta["missing_capabilities"].append(capability)
