"""readstream_conformance: the conformance suite of pytest-readstream.

Run it against an implementation with ``pytest --pyargs readstream_conformance
--readstream-impl=NAME`` (``readstream check`` does this). Every test is tagged with the
invariant family it checks and its tier (MUST / SHOULD / MAY, ``read_stream.md`` §9); tests that
need a capability the implementation lacks are skipped with that reason.

:class:`Scenario` is public so that a failing stateful test's printed reproduction can be pasted
into a regression test::

    from readstream_conformance import Scenario

    def test_regression(readstream_impl):
        d = Scenario(settings={"io_combine_limit": 4}, blocks=[0, 1, 2, 9]).start(readstream_impl)
        d.next()
        d.end()
"""

from __future__ import annotations

from ._harness import ConformanceViolation, Scenario, StreamDriver

__all__ = ["Scenario", "StreamDriver", "ConformanceViolation"]
