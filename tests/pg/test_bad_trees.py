"""Bad trees and builds, each one line and exit status 2 (issue 24, must-show 4).

A tree of 17, a tree that is not PostgreSQL, a bin/ without headers, a build that fails and a
server without a GUC the harness wanted. Small fake trees and bin directories in ``tmp_path``
stand in where a real one is not needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_readstream.cli import main

READ_STREAM_C = Path("src/backend/storage/aio/read_stream.c")


def _tree(root: Path, version: str, *, project: str = "postgresql", body: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "meson.build").write_text(f"project('{project}', 'c', version: '{version}')\n{body}")
    (root / READ_STREAM_C).parent.mkdir(parents=True)
    (root / READ_STREAM_C).write_text("/* read_stream.c */\n")
    return root


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


def test_a_tree_of_17_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _tree(tmp_path / "postgresql-17.4", "17.4")
    assert main(["pg-build", "--source", str(tree)]) == 2
    assert _one_line(capsys) == (
        f"readstream pg-build: --source {tree} is PostgreSQL 17.4: allowed PostgreSQL 18.x, 19.x and "
        "master (20devel)"
    )


@pytest.mark.parametrize("kind", ["other-project", "no-read-stream", "empty"])
def test_a_tree_that_is_not_postgresql_is_refused(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tmp_path / "tree"
    if kind == "other-project":
        tree.mkdir()
        (tree / "meson.build").write_text("project('zlib', 'c', version: '1.3')\n")
    elif kind == "no-read-stream":
        tree.mkdir()
        (tree / "meson.build").write_text("project('postgresql', 'c', version: '16.4')\n")
    else:
        tree.mkdir()
    assert main(["pg-build", "--source", str(tree)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"readstream pg-build: --source {tree}: not a PostgreSQL source tree"), line


def test_a_version_without_a_model_is_refused_even_with_read_stream_c(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _tree(tmp_path / "next", "21devel")
    assert main(["pg-build", "--source", str(tree)]) == 2
    assert "is PostgreSQL 21devel: allowed PostgreSQL 18.x, 19.x and master (20devel)" in _one_line(capsys)


def test_a_build_directory_that_is_not_mesons_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pg-build", "--build-dir", str(tmp_path)]) == 2
    assert "not a configured meson build directory" in _one_line(capsys)


def test_a_build_that_fails_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master tree whose meson.build fails: the step, its error and the log, in one line."""
    from pytest_readstream.postgres.builds.pgbuild import PgBuildUnavailable, _find_tools

    try:
        _find_tools()
    except PgBuildUnavailable as err:
        pytest.skip(f"no build tools here: {err}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = _tree(
        tmp_path / "postgresql-20devel", "20devel", body="error('this tree is deliberately broken')\n"
    )
    assert main(["pg-build", "--source", str(tree)]) == 2
    captured = capsys.readouterr()
    errors = [
        ln
        for ln in captured.err.splitlines()
        if not ln.startswith("readstream pg-build: PostgreSQL 20devel tree")
    ]
    errors = [ln for ln in errors if "configuring" not in ln]
    assert len(errors) == 1 and "Traceback" not in captured.err, captured.err
    assert errors[0].startswith("readstream pg-build: building PostgreSQL failed at meson setup: "), errors[0]
    # meson stops at its first error (here: the fake tree declares none of the options).
    assert "ERROR: " in errors[0] and "(full log: " in errors[0], errors[0]


def test_a_bin_without_headers_is_refused_for_the_c_mutants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("initdb", "postgres"):
        (bindir / name).write_text("#!/bin/sh\necho 'postgres (PostgreSQL) 18.6'\n")
        (bindir / name).chmod(0o755)
    tree = _tree(tmp_path / "src", "18.6")
    assert main(["mutants", "--impl", "postgres", "--pg-source", str(tree), "--pg-bindir", str(bindir)]) == 2
    line = _one_line(capsys)
    assert line == (
        f"readstream mutants: --pg-bindir {bindir}: no pg_config in {bindir}: the server's development files "
        "are not installed; the C mutants are compiled against its headers"
    )


# ------------------------------------------------------------------------------ a server lacking a GUC
def _wrapped_bindir(tmp_path: Path, refused: str) -> Path:
    """A bin/ whose postgres is the embedded one, except that ``postgres -C refused`` fails as a
    server without that GUC does."""
    pytest.importorskip("psycopg")
    from pytest_readstream.postgres import embedded_bindir
    from pytest_readstream.postgres.errors import PgNotAvailable
    from pytest_readstream.postgres.servers._install import reachable_bindir
    from pytest_readstream.postgres.servers._process import _run_as

    try:
        real = reachable_bindir(embedded_bindir(), _run_as(None))
    except PgNotAvailable as err:
        pytest.skip(f"no embedded PostgreSQL here: {err}")
    bindir = tmp_path / "wrapped" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "postgres").write_text(
        "#!/bin/sh\n"
        'prev=""\n'
        'for a in "$@"; do\n'
        f'  if [ "$prev" = "-C" ] && [ "$a" = "{refused}" ]; then\n'
        f"    echo 'postgres: unrecognized configuration parameter \"{refused}\"' >&2; exit 1\n"
        "  fi\n"
        '  prev="$a"\n'
        "done\n"
        f'exec {real / "postgres"} "$@"\n'
    )
    (bindir / "postgres").chmod(0o755)
    (bindir / "initdb").symlink_to(real / "initdb")
    return bindir


@pytest.mark.postgres
def test_a_server_without_a_guc_the_harness_sets_does_not_start_in_one_line(tmp_path: Path) -> None:
    from pytest_readstream.postgres import PgServer, PgStartupError

    bindir = _wrapped_bindir(tmp_path, "wal_writer_flush_after")
    with pytest.raises(PgStartupError) as info:
        PgServer.from_bindir(bindir, tmp_path / "w")
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(
        "has no setting wal_writer_flush_after, which the harness sets on every server it starts "
        "(postgres -C does not know it)"
    ), message


@pytest.mark.postgres
def test_a_server_without_a_guc_a_test_wants_refuses_that_setting_in_one_line(tmp_path: Path) -> None:
    from pytest_readstream.postgres import PgServer, PgSettingUnavailable, ServerSettings

    bindir = _wrapped_bindir(tmp_path, "io_workers")
    with PgServer.from_bindir(bindir, tmp_path / "w") as server:  # nothing asked io_workers yet
        with pytest.raises(PgSettingUnavailable) as info:
            server.configure(ServerSettings(io_method="worker", io_workers=3))
    assert "\n" not in str(info.value)
    assert "has no setting io_workers (postgres -C does not know it)" in str(info.value)


@pytest.mark.postgres
def test_check_on_a_server_without_a_guc_is_an_error_exit_2(tmp_path: Path) -> None:
    bindir = _wrapped_bindir(tmp_path, "wal_writer_flush_after")
    cmd = [sys.executable, "-m", "pytest_readstream.cli", "check", "--impl", "postgres", "-n", "0"]
    cmd += ["--", f"--readstream-pg-bindir={bindir}", "-k", "test_bulkread_ring_only_above"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "READSTREAM_"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(
        "readstream check: postgres ERROR: the harness could not start the PostgreSQL server: "
    ), last
    assert "has no setting wal_writer_flush_after" in last and "CONFORM" not in last, last
