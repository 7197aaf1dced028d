"""The rerun command a failure prints: each option once, so it runs exactly as printed."""

from __future__ import annotations

import shlex

from pytest_readstream.repro import Reproduction


def test_a_server_build_option_is_written_once() -> None:
    """The run's own options and the server build options both carry ``--readstream-pg-bindir``;
    the command says it once, with the build's value."""
    repro = Reproduction(
        "conformance/test_reads.py::test_x",
        7,
        8,
        "postgres",
        impl_args=("--readstream-pg-bindir=/build/bin", "--readstream-pg-source=/src"),
        options=("-p", "no:cacheprovider", "--readstream-pg-bindir=/build/bin"),
    )
    words = shlex.split(repro.rerun_command())
    assert sum(w.startswith("--readstream-pg-bindir") for w in words) == 1
    assert words[-2:] == ["--readstream-pg-bindir=/build/bin", "--readstream-pg-source=/src"]
    assert words[words.index("-p") + 1] == "no:cacheprovider"
    assert "--readstream-seed=7" in words and "--readstream-impl=postgres" in words
