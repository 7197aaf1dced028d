"""``readstream review``: what a patch to PostgreSQL does to the read path, for its reviewers.

One room, one job per module:

* :mod:`.inputs` — the base tree, the patch (or patched tree), checked before anything runs,
  and the patched copy of the base made from them (``git apply``);
* :mod:`.plan` — from the files the patch touches, what must be built: nothing (a patch of
  ``read_stream.c`` only runs as traced copies in the base's server) or the patched server
  (an incremental build of the base's build directory, :mod:`.rebuild`);
* :mod:`.run` — the conformance suite on each side, ``compare``'s scenarios, and the traced
  stream's time under each seed thread's latency profile (:mod:`.timing`);
* :mod:`.report` — the verdicts, the tests whose outcome changed (an expectation of a version
  the patch changes apart from a broken invariant), per-scenario differences, timing ratios:
  as text, Markdown and JSON; :mod:`.plots` draws the read sizes over the scan.
"""
