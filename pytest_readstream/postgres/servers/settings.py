"""Settings the harness gives a PostgreSQL server (18, 19, master), split by when they can change.

PostgreSQL decides per GUC when a new value may take effect (``GucContext`` in ``guc.h``): some
only at postmaster start (``io_method``, ``shared_buffers``, ``io_max_combine_limit``,
``debug_io_direct``), some on a configuration reload (``io_workers``; from 19 on
``io_min_workers`` / ``io_max_workers``), the rest per session
(``io_combine_limit``, the I/O concurrencies, planner switches, ...). The harness mirrors that
split with two frozen dataclasses:

* :class:`ServerSettings` — what the server must be started (or reloaded) with. ``None`` means
  "PostgreSQL's default" on a server the harness runs and "whatever it has" on a server reached
  through a DSN.
* :class:`SessionSettings` — applied with ``SET`` on the measured connection after a
  ``RESET ALL``, so a session's state never leaks into the next measurement.

Values use PostgreSQL's own GUC names and base units (blocks for ``shared_buffers`` and the
combine limits, kB for ``vacuum_buffer_usage_limit``, ms for ``statement_timeout``) and are
checked on construction against PostgreSQL's ranges (``guc_tables.c``). Which of the server
settings need a restart and which a reload is read from the running server's ``pg_settings``
rather than assumed.

Versions
--------
:class:`ServerSettings` speaks the harness's vocabulary; :meth:`ServerSettings.for_server` turns
it into the GUCs of one server version and :meth:`ServerSettings.from_server` reads them back.
The one difference so far is the I/O worker pool: PostgreSQL 18 has a fixed pool of
``io_workers`` processes; 19 replaced that GUC by a pool that grows and shrinks between
``io_min_workers`` and ``io_max_workers`` (``method_worker.c``). ``io_workers = N`` asks for a
fixed pool of N workers on every version (on 19 and later ``io_min_workers = io_max_workers =
N``); ``io_min_workers`` / ``io_max_workers`` name a growing pool and exist only from 19 on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

__all__ = ["WORKER_POOL_VERSION_NUM", "ServerSettings", "SessionSettings", "SettingNotOnVersion"]

#: The first ``server_version_num`` with ``io_min_workers`` / ``io_max_workers`` instead of
#: ``io_workers`` (PostgreSQL 19's ``method_worker.c``).
WORKER_POOL_VERSION_NUM = 190000
#: The GUCs of 19's self-sizing I/O worker pool (``guc_parameters.dat``, all ``PGC_SIGHUP``).
_POOL_GUCS = ("io_min_workers", "io_max_workers", "io_worker_idle_timeout", "io_worker_launch_interval")

_IO_METHODS = ("sync", "worker", "io_uring")
_DIRECT_IO_FLAGS = ("data", "wal", "wal_init")
_INT_MAX = 2**31 - 1
_PLANNER_NAME = re.compile(r"^enable_[a-z_]+$")


def _check_int(name: str, value: int | None, low: int, high: int, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if zero_ok and value == 0:
        return
    if not low <= value <= high:
        allowed = f"{low}..{high}" + (" or 0" if zero_ok else "")
        raise ValueError(f"{name} = {value} is out of range; allowed: {allowed}")


def _check_bool(name: str, value: bool | None) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None, got {value!r}")


def _guc_bool(value: bool) -> str:
    return "on" if value else "off"


@dataclass(frozen=True)
class ServerSettings:
    """Postmaster-level and reload-level GUCs (``PGC_POSTMASTER`` / ``PGC_SIGHUP`` in ``guc.h``).

    ``shared_buffers`` and ``io_max_combine_limit`` are in 8 kB blocks; ``debug_io_direct`` is
    PostgreSQL's comma-separated list (``""``, ``"data"``, ``"data,wal"``, ...).
    """

    io_method: str | None = None
    shared_buffers: int | None = None
    io_max_combine_limit: int | None = None
    io_workers: int | None = None
    debug_io_direct: str | None = None
    io_min_workers: int | None = None
    io_max_workers: int | None = None
    io_worker_idle_timeout: int | None = None  # ms, 19+
    io_worker_launch_interval: int | None = None  # ms, 19+

    def __post_init__(self) -> None:
        if self.io_method is not None and self.io_method not in _IO_METHODS:
            raise ValueError(
                f"io_method = {self.io_method!r} is not valid; allowed: {', '.join(_IO_METHODS)}"
            )
        _check_int("shared_buffers", self.shared_buffers, 16, 2**30 - 1)
        _check_int("io_max_combine_limit", self.io_max_combine_limit, 1, 128)
        _check_int("io_workers", self.io_workers, 1, 32)
        _check_int("io_min_workers", self.io_min_workers, 1, 32)
        _check_int("io_max_workers", self.io_max_workers, 1, 32)
        _check_int("io_worker_idle_timeout (ms)", self.io_worker_idle_timeout, 0, _INT_MAX)
        _check_int("io_worker_launch_interval (ms)", self.io_worker_launch_interval, 0, _INT_MAX)
        if self.io_workers is not None:
            for name in ("io_min_workers", "io_max_workers"):
                other = getattr(self, name)
                if other is not None and other != self.io_workers:
                    raise ValueError(
                        f"{name} = {other} contradicts io_workers = {self.io_workers} (a fixed pool "
                        f"of {self.io_workers}); allowed: io_workers alone, or io_min_workers and "
                        "io_max_workers without it"
                    )
        if self.debug_io_direct is not None:
            flags = [f.strip() for f in self.debug_io_direct.split(",") if f.strip()]
            bad = [f for f in flags if f not in _DIRECT_IO_FLAGS]
            if bad:
                raise ValueError(
                    f"debug_io_direct = {self.debug_io_direct!r} has unknown flag(s) {bad}; "
                    f"allowed: {', '.join(_DIRECT_IO_FLAGS)} (comma-separated) or ''"
                )

    def to_gucs(self) -> dict[str, str]:
        """The settings that are not ``None``, as GUC name -> configuration-file value."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "debug_io_direct":
                flags = [x.strip() for x in str(value).split(",") if x.strip()]
                out[f.name] = ",".join(flags)
            else:
                out[f.name] = str(value)
        return out

    def for_server(self, version_num: int) -> dict[str, str]:
        """:meth:`to_gucs` in the GUC names of a server of ``version_num``.

        Raises :class:`SettingNotOnVersion` (one line) for a setting that version lacks.
        """
        out = self.to_gucs()
        pool = version_num >= WORKER_POOL_VERSION_NUM
        if not pool:
            for name in _POOL_GUCS:
                if name in out:
                    raise SettingNotOnVersion(
                        name,
                        out[name],
                        version_num,
                        "PostgreSQL 18 has a fixed pool of io_workers; io_min_workers, "
                        "io_max_workers, io_worker_idle_timeout and io_worker_launch_interval "
                        "exist from 19 on",
                    )
            return out
        workers = out.pop("io_workers", None)
        if workers is not None:
            out["io_min_workers"] = out["io_max_workers"] = workers
        return out

    @staticmethod
    def server_names(version_num: int) -> tuple[str, ...]:
        """The GUCs :meth:`for_server` may write for a server of ``version_num``."""
        base = ("io_method", "shared_buffers", "io_max_combine_limit", "debug_io_direct")
        if version_num >= WORKER_POOL_VERSION_NUM:
            return (*base, *_POOL_GUCS)
        return (*base, "io_workers")

    @classmethod
    def from_server(cls, values: Mapping[str, str], version_num: int) -> ServerSettings:
        """The settings a server of ``version_num`` runs with, from its GUC values (base units).

        On 19 and later ``io_workers`` is filled in only when the pool is fixed
        (``io_min_workers == io_max_workers``); on 18 the two pool fields stay ``None``.
        """
        kwargs: dict[str, object] = {}
        for name in cls.server_names(version_num):
            if name in values:
                raw = values[name]
                kwargs[name] = raw if name in ("io_method", "debug_io_direct") else int(raw)
        low, high = kwargs.get("io_min_workers"), kwargs.get("io_max_workers")
        if low is not None and low == high:
            kwargs["io_workers"] = low
        return cls(**kwargs)  # type: ignore[arg-type]


class SettingNotOnVersion(ValueError):
    """A server setting that the server's PostgreSQL version does not have (one line)."""

    def __init__(self, setting: str, value: str, version_num: int, reason: str) -> None:
        self.setting = setting
        self.version_num = version_num
        super().__init__(
            f"{setting} = {value!r} is not a setting of PostgreSQL {_major(version_num)}: {reason}"
        )


def _major(version_num: int) -> str:
    return str(version_num // 10000)


@dataclass(frozen=True)
class SessionSettings:
    """Per-session GUCs set on the measured client backend (``PGC_USERSET``/``PGC_SUSET``).

    ``max_parallel_workers_per_gather`` defaults to 0 so every scan runs in the measured backend
    (parallel workers would be other backends, and their reads would not be that session's).
    ``planner`` maps ``enable_*`` switch names to on/off.
    """

    io_combine_limit: int | None = None
    effective_io_concurrency: int | None = None
    maintenance_io_concurrency: int | None = None
    synchronize_seqscans: bool | None = None
    max_parallel_workers_per_gather: int | None = 0
    vacuum_buffer_usage_limit: int | None = None
    zero_damaged_pages: bool | None = None
    ignore_checksum_failure: bool | None = None
    statement_timeout: int | None = None
    planner: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_int("io_combine_limit", self.io_combine_limit, 1, 128)
        _check_int("effective_io_concurrency", self.effective_io_concurrency, 0, 1000)
        _check_int("maintenance_io_concurrency", self.maintenance_io_concurrency, 0, 1000)
        _check_int(
            "max_parallel_workers_per_gather",
            self.max_parallel_workers_per_gather,
            0,
            1024,
        )
        _check_int(
            "vacuum_buffer_usage_limit (kB)",
            self.vacuum_buffer_usage_limit,
            128,
            16 * 1024 * 1024,
            zero_ok=True,
        )
        _check_int("statement_timeout (ms)", self.statement_timeout, 0, _INT_MAX)
        _check_bool("synchronize_seqscans", self.synchronize_seqscans)
        _check_bool("zero_damaged_pages", self.zero_damaged_pages)
        _check_bool("ignore_checksum_failure", self.ignore_checksum_failure)
        frozen: dict[str, bool] = {}
        for name, value in dict(self.planner).items():
            if not isinstance(name, str) or not _PLANNER_NAME.match(name):
                raise ValueError(f"planner switch {name!r} is not valid; allowed: names of the form enable_*")
            _check_bool(name, value)
            frozen[name] = value
        # A read-only copy keeps the dataclass honest about being frozen.
        object.__setattr__(self, "planner", dict(sorted(frozen.items())))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_gucs().items())))

    def to_gucs(self) -> dict[str, str]:
        """The settings that are not ``None``, as GUC name -> ``SET`` value."""
        out: dict[str, str] = {}
        for f in fields(self):
            if f.name == "planner":
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = _guc_bool(value) if isinstance(value, bool) else str(value)
        for name, flag in self.planner.items():
            out[name] = _guc_bool(flag)
        return out
