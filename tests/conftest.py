"""The project's own tests: hypothesis defaults to the plugin's fast ``ci`` profile."""

from __future__ import annotations

import os

from hypothesis import settings

try:
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except Exception:  # the plugin registers the profiles; without it keep hypothesis' default
    pass
