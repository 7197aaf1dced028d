"""Hypothesis profiles for readstream tests: ``ci``, ``dev`` and ``thorough``.

Select one with ``pytest --hypothesis-profile=ci``. All three disable the deadline, since a
simulated scan's run time says nothing about the code under test.

* ``ci`` — few examples, no example database, and every example drawn from the run's
  ``--readstream-seed`` (the plugin hands it to hypothesis as its seed), so a CI failure repeats
  exactly from the seed printed in the log;
* ``dev`` — hypothesis' defaults with more examples, and the example database, so a failure found
  once is tried first next time;
* ``thorough`` — many examples, for a nightly job or before a release, drawn from the run's seed
  as under ``ci``.

A failing example is printed with the seed and the ``@reproduce_failure`` blob that replay it.

A project that registered a profile of the same name keeps its own: the plugin only registers
names that are still free, except ``ci``, which replaces hypothesis' own built-in ``ci`` profile
(derandomized, so blind to the run's seed) unless the project registered a ``ci`` of its own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OWN_PROFILES", "SEEDED_PROFILES", "register_profiles"]

OWN_PROFILES = ("ci", "dev", "thorough")
# Profiles under which the plugin hands the run's seed to hypothesis.
SEEDED_PROFILES = ("ci", "thorough")


def _profiles() -> dict[str, dict[str, Any]]:
    from hypothesis import HealthCheck

    slow = [HealthCheck.too_slow]
    return {
        "ci": {
            "max_examples": 25,
            "deadline": None,
            "database": None,
            "derandomize": False,
            "print_blob": True,
            "suppress_health_check": slow,
        },
        "dev": {"max_examples": 100, "deadline": None, "print_blob": True},
        "thorough": {
            "max_examples": 1000,
            "deadline": None,
            "print_blob": True,
            "suppress_health_check": slow,
        },
    }


def register_profiles() -> list[str]:
    """Register the profiles not registered yet; the names registered now."""
    import hypothesis._settings as internals
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    builtin_ci = getattr(internals, "CI", None)
    done = []
    for name, values in _profiles().items():
        try:
            existing = settings.get_profile(name)
        except InvalidArgument:
            existing = None
        if existing is None or (name == "ci" and existing is builtin_ci):
            settings.register_profile(name, **values)
            done.append(name)
    return done
