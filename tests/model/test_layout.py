"""The package layout: no import circles, old module names still import (with a warning)."""

from __future__ import annotations

import ast
import importlib
import importlib.resources
import re
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules(top: Path) -> dict[str, tuple[Path, bool]]:
    mods: dict[str, tuple[Path, bool]] = {}
    for path in top.rglob("*.py"):
        parts = list(path.relative_to(top.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


def import_graph(top: Path) -> dict[str, set[str]]:
    """Every import between modules under ``top``: top-level, lazy and ``TYPE_CHECKING`` alike."""
    mods = _modules(top)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        package = name.split(".") if is_pkg else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_sees_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("top", ["reference_impl", "pytest_readstream", "conformance"])
def test_no_import_circles(top: str) -> None:
    assert cycles(import_graph(ROOT / top)) == []


def test_the_plugin_imports_neither_the_server_harness_nor_the_benchmarks() -> None:
    graph = import_graph(ROOT / "pytest_readstream")
    plugin_side = {"pytest_readstream.plugin", "pytest_readstream.fixtures", "pytest_readstream.config"}
    for name in plugin_side:
        bad = {
            t for t in graph[name] if t.startswith(("pytest_readstream.postgres", "pytest_readstream.bench"))
        }
        assert not bad, f"{name} imports {sorted(bad)}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pytest_readstream._pg", "pytest_readstream.postgres"),
        ("pytest_readstream._pg.observe", "pytest_readstream.postgres.observe"),
        ("pytest_readstream.postgres.server", "pytest_readstream.postgres.servers.server"),
        ("pytest_readstream.postgres.implementation", "pytest_readstream.postgres.impl.implementation"),
        ("pytest_readstream.bench_seeds", "pytest_readstream.bench.seeds"),
        ("pytest_readstream.plots", "pytest_readstream.bench.plots"),
    ],
)
def test_old_module_names_warn_and_give_the_new_module(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    sys.modules.pop("pytest_readstream._pg", None)
    with pytest.warns(DeprecationWarning) as record:
        module = importlib.import_module(old)
    assert any(f"{old} has moved to {new}" in str(w.message) for w in record)
    assert module is importlib.import_module(new)
    sys.modules.pop(old, None)


def test_an_old_name_leaves_the_new_package_its_spec_and_data_files() -> None:
    # Imported through the old name, the package once kept the old name's spec (a loader with no
    # resource reader): importlib.resources then failed to open the probe's C sources ("Can't
    # open orphan path") in whichever pytest worker had run this file's tests first.
    sys.modules.pop("pytest_readstream._pg", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module("pytest_readstream._pg")
    new = importlib.import_module("pytest_readstream.postgres")
    assert new.__spec__ is not None and new.__spec__.name == "pytest_readstream.postgres"
    text = (
        importlib.resources.files("pytest_readstream.postgres")
        .joinpath("builds", "probe", "rsprobe.c")
        .read_text()
    )
    assert "read_stream" in text
    sys.modules.pop("pytest_readstream._pg", None)


def test_old_package_gives_its_public_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pytest_readstream._pg import PgServer as old
    from pytest_readstream.postgres import PgServer

    assert old is PgServer


def test_readme_where_things_are_matches_the_tree() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\s*[-*]?\s*`([\w./]+/)`", section, flags=re.M))
    assert named, "the section names no directories"
    for entry in named:
        assert (ROOT / entry).is_dir(), f"README names {entry}, which is not in the tree"
    packages = {
        p.parent.relative_to(ROOT).as_posix() + "/"
        for p in (ROOT / "pytest_readstream").glob("*/__init__.py")
    }
    assert packages <= named, f"README's layout omits {sorted(packages - named)}"


def test_server_harness_public_names_are_documented() -> None:
    pytest.importorskip("psycopg")
    import pytest_readstream.postgres as harness

    doc = (ROOT / "docs" / "postgres.md").read_text()
    assert doc.startswith("# The PostgreSQL harness (`pytest_readstream.postgres`)")
    undocumented = [n for n in harness.__all__ if not re.search(rf"`[^`]*\b{re.escape(n)}\b[^`]*`", doc)]
    assert undocumented == []
    for block in re.findall(r"from pytest_readstream\.postgres import \(([^)]*)\)", doc):
        for name in re.findall(r"\w+", block):
            assert name in harness.__all__, f"docs/postgres.md imports {name}, which is not public"
