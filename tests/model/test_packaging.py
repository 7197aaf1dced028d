"""The explicit package list in pyproject.toml covers every package directory of the project."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (
        ("reference_impl", "reference_impl"),
        ("pytest_readstream", "pytest_readstream"),
        ("conformance", "readstream_conformance"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"
