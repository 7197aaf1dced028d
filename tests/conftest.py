"""The project's own tests: hypothesis defaults to the plugin's fast ``ci`` profile."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# pytester drives the plugin's own tests (tests/plugin, tests/conformance); pytest accepts
# pytest_plugins only in the top-level conftest.
pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The project's own tests run under the plugin's ``ci`` profile (or ``$HYPOTHESIS_PROFILE``).

    pytest also loads this conftest when ``--pyargs readstream_conformance`` is run from the
    checkout (an invocation directory's ``test*`` folders give initial conftests): the suite
    then keeps hypothesis' own default, 100 examples, as it has anywhere else; an explicit
    ``--hypothesis-profile`` is left to hypothesis. Runs before the plugin's own (also tryfirst)
    ``pytest_configure``, which registered the profiles at import and reads the current one.
    """
    if config.option.pyargs or config.getoption("hypothesis_profile", None):
        return
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run only when the marker expression names them (``-m slow``)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long-running: select with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
