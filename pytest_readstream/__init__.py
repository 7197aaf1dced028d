"""pytest-readstream: a pytest plugin and conformance harness for PostgreSQL's streaming reads.

The plugin (``pytest_readstream.plugin``, loaded automatically through the ``pytest11`` entry
point) selects the implementation under test (``--readstream-impl``), provides the
``readstream_*`` fixtures and markers, and reports results per invariant family. Public modules:

* :mod:`pytest_readstream.protocol` — what an implementation must provide;
* :mod:`pytest_readstream.implementations` — the reference implementation and the loader;
* :mod:`pytest_readstream.factories` — fixture factories for a project's ``conftest.py``;
* :mod:`pytest_readstream.strategies` — hypothesis strategies (imports hypothesis);
* :mod:`pytest_readstream.postgres` — the harness that starts, drives and measures a real
  PostgreSQL server (needs the ``postgres`` extra);
* :mod:`pytest_readstream.bench` — the benchmark machinery behind ``readstream bench`` and the
  scripts in the checkout's ``bench/``.

This package imports nothing heavy on its own; see ``docs/plugin.md``.
"""

from __future__ import annotations

from . import _moved

# ``pytest_readstream._pg`` and ``pytest_readstream.bench_*`` still import, with a warning.
_moved.install()

__all__: list[str] = []
