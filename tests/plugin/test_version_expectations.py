"""A PostgreSQL server's known failures are those of its version (issue 24, must-show 1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_readstream.config import ReadstreamOptions
from pytest_readstream.plugin import _version_expectations
from pytest_readstream.xfails import SHIPPED_DIR, parse_xfails


def _opts(impl: str = "postgres", xfails: Path | None = None) -> ReadstreamOptions:
    return ReadstreamOptions(impl, "command line", 1, "command line", None, xfails, False, None, None)


@pytest.mark.parametrize("version", ["18", "19", "20devel"])
def test_the_servers_version_chooses_the_shipped_file(version: str) -> None:
    chosen = _version_expectations(_opts(), SimpleNamespace(model_version=version))
    assert chosen.xfails == SHIPPED_DIR / f"postgresql-{version}.txt"
    assert parse_xfails(chosen.xfails), "each shipped file lists its failures"


def test_a_given_file_or_another_implementation_is_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    assert _version_expectations(_opts(xfails=mine), SimpleNamespace(model_version="19")).xfails == mine
    assert _version_expectations(_opts("reference"), SimpleNamespace(model_version="19")).xfails is None
    assert _version_expectations(_opts(), SimpleNamespace(model_version="21devel")).xfails is None


def test_each_entry_of_the_newer_versions_says_why() -> None:
    for version in ("19", "20devel"):
        for line in (SHIPPED_DIR / f"postgresql-{version}.txt").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                assert "   # " in line, f"postgresql-{version}.txt: an entry without its reason: {line}"
