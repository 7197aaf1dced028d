"""Fixtures for the plugin's own tests (run with ``pytester``)."""

from __future__ import annotations

# pytester's in-process runs drop the modules an inner run imported; numpy cannot be imported a
# second time in one process, so the model and numpy are imported here, once, for every run.
import shutil
from pathlib import Path

import numpy  # noqa: F401
import pytest

import reference_impl.relations
import reference_impl.scans  # noqa: F401

HERE = Path(__file__).parent


@pytest.fixture
def with_no_lookahead(pytester: pytest.Pytester) -> str:
    """Copy the demo implementation into the pytester directory and make it importable."""
    shutil.copy(HERE / "no_lookahead.py", pytester.path / "no_lookahead.py")
    pytester.syspathinsert()
    return "no_lookahead:NoLookaheadImplementation"
