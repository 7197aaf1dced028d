"""Synthetic relations for fixtures and strategies, from ``reference_impl.relations``.

A relation is described by a ``RelationSpec`` and built straight into the instance's simulated
storage with ``build_relation``: the data never goes through the implementation under test (the
lesson of fsspec's abstract tests), so only its read path is exercised. This module turns what a
test wrote into a spec:

* nothing — the ``small`` shape (1,000 blocks with a btree index);
* a shape name of ``SHAPES`` (``"tiny"``, ``"bulk"``, ``"segment-crossing"``, ...), possibly with
  field overrides (``nblocks=...``): the shape keeps its own seed;
* fields only (``nblocks=500, dead_fraction=0.1``) — a ``RelationSpec`` named ``t`` whose seed,
  unless given, is the test's seed;
* a ``RelationSpec``, or a mapping ``{"shape": ..., **fields}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_SHAPE", "make_spec", "build", "spec_strategy"]

DEFAULT_SHAPE = "small"


def make_spec(
    shape: Any, params: Mapping[str, Any], *, name: str | None = None, seed: int = 0, where: str
) -> Any:
    """A ``RelationSpec`` from a shape name, spec or mapping, field overrides and a default seed."""
    from reference_impl.errors import SettingError
    from reference_impl.relations import RelationSpec
    from reference_impl.relations import shape as named_shape

    changes = dict(params)
    if isinstance(shape, Mapping):
        changes = {**shape, **changes}
        shape = changes.pop("shape", None)
    elif "shape" in changes:
        # readstream_relation(shape="bulk", nblocks=10): the keyword form of the mapping form.
        if shape is not None:
            raise SettingError(
                f"{where}: the shape is given twice ({shape!r} and shape={changes['shape']!r})"
            )
        shape = changes.pop("shape")
    if name is not None:
        changes["name"] = name
    allowed = {f.name for f in dataclasses.fields(RelationSpec) if f.init and not f.name.startswith("_")}
    unknown = sorted(set(changes) - allowed)
    if unknown:
        raise SettingError(
            f"{where}: unknown RelationSpec field(s) {', '.join(unknown)}: allowed shape, {', '.join(sorted(allowed))}"
        )
    if shape is None:
        if not changes:
            return named_shape(DEFAULT_SHAPE)
        return RelationSpec(**{"seed": seed, **changes})
    if isinstance(shape, str):
        spec = named_shape(shape)
    elif isinstance(shape, RelationSpec):
        spec = shape
    else:
        raise SettingError(
            f"{where}: {shape!r} is not a relation shape name, a RelationSpec or a mapping with 'shape'"
        )
    return spec.replace(**changes) if changes else spec


def build(instance: Any, spec: Any) -> Any:
    """Build ``spec`` into ``instance``'s storage: a ``SyntheticRelation`` (``.heap`` is the table)."""
    from reference_impl.relations import build_relation

    return build_relation(instance, spec)


def spec_strategy(*, shapes: tuple[str, ...] | None, max_blocks: int) -> Any:
    """Hypothesis: ``RelationSpec`` objects, from named shapes or from drawn fields."""
    from hypothesis import strategies as st

    from reference_impl.relations import SHAPES, VM_PATTERNS, IndexSpec, RelationSpec

    if not isinstance(max_blocks, int) or max_blocks < 1:
        raise ValueError(f"max_blocks = {max_blocks!r} is invalid: allowed >= 1")
    names = tuple(sorted(SHAPES)) if shapes is None else shapes
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown relation shapes {unknown}: allowed {', '.join(sorted(SHAPES))}")
    seeds = st.integers(0, 2**32 - 1)

    @st.composite
    def from_shape(draw: Any) -> Any:
        base = SHAPES[draw(st.sampled_from(names))]
        return base.replace(nblocks=draw(st.integers(1, max_blocks)), seed=draw(seeds))

    @st.composite
    def from_fields(draw: Any) -> Any:
        visible = draw(st.sampled_from((0.0, 0.25, 0.5, 1.0)))
        vacuumed = visible > 0 or draw(st.booleans())
        return RelationSpec(
            nblocks=draw(st.integers(0, max_blocks)),
            tuple_width=draw(st.sampled_from((4, 100, 400, 2000))),
            dead_fraction=draw(st.sampled_from((0.0, 0.05, 0.5))),
            vacuumed=vacuumed,
            all_visible_fraction=visible,
            all_frozen_fraction=visible * draw(st.sampled_from((0.0, 0.5, 1.0))),
            vm_pattern=draw(st.sampled_from(VM_PATTERNS)),
            indexes=draw(st.sampled_from(((), (IndexSpec("btree"),)))),
            seed=draw(seeds),
        )

    return st.one_of(from_shape(), from_fields()) if names else from_fields()
