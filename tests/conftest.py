"""The project's own tests: hypothesis defaults to the plugin's fast ``ci`` profile."""

from __future__ import annotations

import os

from hypothesis import settings

# The plugin (installed with the project, loaded before any conftest) registers the profiles.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# pytester drives the plugin's own tests (tests/plugin, tests/conformance); pytest accepts
# pytest_plugins only in the top-level conftest.
pytest_plugins = ["pytester"]
