"""The project's own tests: hypothesis defaults to the plugin's fast ``ci`` profile."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# The plugin (installed with the project, loaded before any conftest) registers the profiles.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# pytester drives the plugin's own tests (tests/plugin, tests/conformance); pytest accepts
# pytest_plugins only in the top-level conftest.
pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run only when the marker expression names them (``-m slow``)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long-running: select with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
