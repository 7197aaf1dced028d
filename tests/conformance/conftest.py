"""Fixtures for the conformance suite's own tests (the suite itself runs under ``pytester``)."""

from __future__ import annotations

# pytester's in-process runs drop the modules an inner run imported; numpy cannot be imported a
# second time in one process, so the model and numpy are imported here, once, for every run.
import numpy  # noqa: F401

import reference_impl.relations
import reference_impl.scans  # noqa: F401
