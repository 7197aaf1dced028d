"""The plugin's keys on ``pytest.Config.stash``, in a module of their own.

They are read by modules that the fixtures themselves import (``scenario`` asks the
implementation under test for its model version); keeping the keys here, and not in
``fixtures``, keeps those imports free of a circle.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["IMPL_KEY", "CALL_FAILED_KEY"]

#: The implementation under test, set once per session by the plugin.
IMPL_KEY = pytest.StashKey[Any]()
#: Set on an item whose call phase failed (the report uses it).
CALL_FAILED_KEY = pytest.StashKey[bool]()
