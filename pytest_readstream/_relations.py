"""Synthetic relations for fixtures and strategies, from ``reference_impl.relations``.

A relation is described by a ``RelationSpec`` (a named shape from ``SHAPES`` plus parameters) and
built straight into the instance's simulated storage with ``build_relation``: the data never goes
through the implementation under test (the lesson of fsspec's abstract tests), so only its read
path is exercised. This module turns what a test wrote (a shape name, a mapping, a spec) into a
spec, and a spec into a relation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_SHAPE", "make_spec", "build", "spec_strategy"]

DEFAULT_SHAPE = "sequential"


def _relations() -> Any:
    import reference_impl.relations as relations

    return relations


def _shape_names() -> str:
    return ", ".join(sorted(_relations().SHAPES))


def make_spec(shape: Any, params: Mapping[str, Any], *, name: str | None = None, where: str) -> Any:
    """A ``RelationSpec`` from a shape name (or spec, or ``{"shape": ..., **params}``) and overrides."""
    from reference_impl.errors import SettingError

    relations = _relations()
    changes = dict(params)
    if isinstance(shape, Mapping):
        changes = {**shape, **changes}
        shape = changes.pop("shape", None)
    if shape is None:
        shape = DEFAULT_SHAPE
    if isinstance(shape, str):
        if shape not in relations.SHAPES:
            raise SettingError(f"{where}: unknown relation shape {shape!r}: allowed {_shape_names()}")
        spec = relations.SHAPES[shape]
    elif isinstance(shape, relations.RelationSpec):
        spec = shape
    else:
        raise SettingError(
            f"{where}: {shape!r} is not a relation shape name, a RelationSpec or a mapping with 'shape'"
        )
    if name is not None:
        changes["name"] = name
    return spec.replace(**changes) if changes else spec


def build(instance: Any, spec: Any) -> Any:
    """Build ``spec`` into ``instance``'s storage (``build_relation``); the built relation."""
    return _relations().build_relation(instance, spec)


def spec_strategy(*, shapes: tuple[str, ...] | None, max_blocks: int) -> Any:
    """Hypothesis: a shape from ``SHAPES`` with a drawn size and seed."""
    from hypothesis import strategies as st

    relations = _relations()
    names = tuple(sorted(relations.SHAPES)) if shapes is None else shapes
    unknown = [s for s in names if s not in relations.SHAPES]
    if unknown:
        raise ValueError(f"unknown relation shapes {unknown}: allowed {_shape_names()}")

    @st.composite
    def spec(draw: Any) -> Any:
        base = relations.SHAPES[draw(st.sampled_from(names))]
        return base.replace(
            nblocks=draw(st.integers(1, max_blocks)),
            seed=draw(st.integers(0, 2**32 - 1)),
        )

    return spec()
