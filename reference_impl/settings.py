"""Settings: PostgreSQL's GUCs that shape the read path, with their names, units and ranges.

A ``Settings`` object is the model's ``postgresql.conf``. Field names are the GUC names, values
use the GUC's own unit (blocks of 8 kB for ``shared_buffers``, ``io_combine_limit`` and
``io_max_combine_limit``; kB for ``vacuum_buffer_usage_limit``; milliseconds for
``vacuum_cost_delay``), and every value is checked against the range PostgreSQL 18's GUC table
(``src/backend/utils/misc/guc_tables.c``) and check hooks allow. A bad value raises
``SettingError`` naming the setting, the value and the allowed range, so a typo in a test or on
the command line fails with one readable line.

Values can also be given as strings with PostgreSQL's units (``"128kB"``, ``"1MB"``,
``"on"``) through :meth:`Settings.from_mapping`, which is what ``--setting NAME=VALUE`` uses.

Derived numbers that several layers need (the effective ``io_combine_limit``, ``MaxBackends``,
the per-backend pin limit) are computed here once, from the formulas of ``postinit.c``
(``InitializeMaxBackends``) and ``bufmgr.c`` (``InitBufferManagerAccess``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import SettingError
from .versions import VERSIONS, canonical_version

__all__ = [
    "Settings",
    "GUC_RANGES",
    "VERSIONS",
    "VERSION_SETTINGS",
    "IO_METHODS",
    "NUM_AUXILIARY_PROCS",
    "io_worker_pool",
]

BLCKSZ = 8192
IO_METHODS = ("sync", "worker", "io_uring")
# PG 18: NUM_AUXILIARY_PROCS = 6 + MAX_IO_WORKERS (32).
NUM_AUXILIARY_PROCS = 6 + 32
# PG 18.4: the autovacuum launcher and the slot-sync worker (NUM_SPECIAL_WORKER_PROCS).
NUM_SPECIAL_WORKER_PROCS = 2

_INT_MAX = 2147483647

# name -> (minimum, maximum, unit shown in errors, unit kind for string parsing)
# unit kind: "blocks" (8 kB units), "kB", "ms", None (plain number)
GUC_RANGES: dict[str, tuple[float, float, str, str | None]] = {
    "shared_buffers": (16, 1073741823, "blocks of 8 kB", "blocks"),
    "io_combine_limit": (1, 128, "blocks of 8 kB (128 = 1 MB)", "blocks"),
    "io_max_combine_limit": (1, 128, "blocks of 8 kB (128 = 1 MB)", "blocks"),
    "effective_io_concurrency": (0, 1000, "", None),
    "maintenance_io_concurrency": (0, 1000, "", None),
    "io_workers": (1, 32, "", None),
    "io_min_workers": (1, 32, "", None),
    "io_max_workers": (1, 32, "", None),
    "io_worker_idle_timeout": (0, _INT_MAX, "ms", "ms"),
    "io_worker_launch_interval": (0, _INT_MAX, "ms", "ms"),
    "temp_buffers": (100, _INT_MAX // 2, "blocks of 8 kB", "blocks"),
    "max_connections": (1, 262143, "", None),
    "autovacuum_worker_slots": (1, 262143, "", None),
    "max_worker_processes": (0, 262143, "", None),
    "max_wal_senders": (0, 262143, "", None),
    "vacuum_buffer_usage_limit": (0, 16777216, "kB (0, or 128 kB .. 16 GB)", "kB"),
    "default_statistics_target": (1, 10000, "", None),
    "vacuum_cost_delay": (0, 100, "ms", "ms"),
    "vacuum_cost_limit": (1, 10000, "", None),
    "vacuum_cost_page_hit": (0, 10000, "", None),
    "vacuum_cost_page_miss": (0, 10000, "", None),
    "vacuum_cost_page_dirty": (0, 10000, "", None),
}

# The I/O worker GUCs of each version (method_worker.c): 18 has a fixed pool of io_workers, 19 and
# later a pool that sizes itself between io_min_workers and io_max_workers. Each maps to its
# default (guc_tables.c / guc_parameters.dat); a version refuses the others (None = not set).
VERSION_SETTINGS: dict[str, dict[str, int]] = {
    "18": {"io_workers": 3},
    "19": {
        "io_min_workers": 2,
        "io_max_workers": 8,
        "io_worker_idle_timeout": 60000,
        "io_worker_launch_interval": 100,
    },
}
VERSION_SETTINGS["20devel"] = VERSION_SETTINGS["19"]
_ALL_VERSION_SETTINGS = tuple(dict.fromkeys(n for v in VERSION_SETTINGS.values() for n in v))

_BOOL_SETTINGS = (
    "synchronize_seqscans",
    "zero_damaged_pages",
    "ignore_checksum_failure",
)
_DIRECT_IO_OPTIONS = ("data", "wal", "wal_init")

_UNIT_KB = {"kB": 1, "MB": 1024, "GB": 1024 * 1024, "TB": 1024 * 1024 * 1024}
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60000.0}


@dataclass(frozen=True, slots=True)
class Settings:
    """The GUCs of ``postgresql.conf`` that the read path depends on (``guc_tables.c``).

    ``version`` selects the behaviour: ``"18"`` (PostgreSQL 18, the default), ``"19"`` or
    ``"20devel"`` (the development branch; ``"master"`` names it and is stored as ``"20devel"``),
    each following its own source (:mod:`reference_impl.versions`).
    """

    version: str = "18"
    shared_buffers: int = 16384
    io_combine_limit: int = 16
    io_max_combine_limit: int = 16
    effective_io_concurrency: int = 16
    maintenance_io_concurrency: int = 16
    io_method: str = "worker"
    io_workers: int | None = None
    io_min_workers: int | None = None
    io_max_workers: int | None = None
    io_worker_idle_timeout: int | None = None
    io_worker_launch_interval: int | None = None
    temp_buffers: int = 1024
    debug_io_direct: str = ""
    max_connections: int = 100
    autovacuum_worker_slots: int = 16
    max_worker_processes: int = 8
    max_wal_senders: int = 10
    vacuum_buffer_usage_limit: int = 2048
    default_statistics_target: int = 100
    synchronize_seqscans: bool = True
    zero_damaged_pages: bool = False
    ignore_checksum_failure: bool = False
    vacuum_cost_delay: float = 0.0
    vacuum_cost_limit: int = 200
    vacuum_cost_page_hit: int = 1
    vacuum_cost_page_miss: int = 2
    vacuum_cost_page_dirty: int = 20
    _derived: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # "master" is stored as the version it names, so that equal models compare equal.
        object.__setattr__(self, "version", canonical_version(self.version))
        own = VERSION_SETTINGS[self.version]
        for name in _ALL_VERSION_SETTINGS:
            value = getattr(self, name)
            if name not in own:
                if value is not None:
                    raise SettingError(
                        f"{name} is not a setting of PostgreSQL {self.version}: it has "
                        f"{_version_settings_text(self.version)} instead"
                    )
            elif value is None:
                object.__setattr__(self, name, own[name])
        if self.io_method not in IO_METHODS:
            raise SettingError(f"io_method = {self.io_method!r} is invalid: allowed {', '.join(IO_METHODS)}")
        for name in _BOOL_SETTINGS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise SettingError(f"{name} = {value!r} is invalid: allowed on/off (a boolean)")
        for name, (lo, hi, unit, _kind) in GUC_RANGES.items():
            value = getattr(self, name)
            if value is None and name in _ALL_VERSION_SETTINGS and name not in own:
                continue
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if name != "vacuum_cost_delay" and not isinstance(value, int):
                is_number = False
            if not is_number or math.isnan(value) or not (lo <= value <= hi):
                unit_txt = f" {unit}" if unit else ""
                raise SettingError(
                    f"{name} = {value!r} is out of range: allowed {_fmt(lo)}..{_fmt(hi)}{unit_txt}"
                )
        if 0 < self.vacuum_buffer_usage_limit < 128:
            raise SettingError(
                f"vacuum_buffer_usage_limit = {self.vacuum_buffer_usage_limit} kB is invalid: "
                "allowed 0 (no ring) or 128 kB .. 16777216 kB (16 GB)"
            )
        if self.debug_io_direct:
            opts = [o.strip() for o in self.debug_io_direct.split(",") if o.strip()]
            bad = [o for o in opts if o not in _DIRECT_IO_OPTIONS]
            if bad:
                raise SettingError(
                    f"debug_io_direct = {self.debug_io_direct!r} is invalid: allowed a "
                    f"comma-separated list of {', '.join(_DIRECT_IO_OPTIONS)} (or empty)"
                )
        max_backends = (
            self.max_connections
            + self.autovacuum_worker_slots
            + self.max_worker_processes
            + self.max_wal_senders
            + NUM_SPECIAL_WORKER_PROCS
        )
        if max_backends > 262143:
            raise SettingError(
                f"max_connections + autovacuum_worker_slots + max_worker_processes + "
                f"max_wal_senders = {max_backends - NUM_SPECIAL_WORKER_PROCS} is too large: "
                "MaxBackends must stay at most 262143"
            )
        self._derived["max_backends"] = max_backends
        self._derived["pin_limit"] = self.shared_buffers // (max_backends + NUM_AUXILIARY_PROCS)

    # ----------------------------------------------------------------------------- derived
    @property
    def effective_io_combine_limit(self) -> int:
        """``io_combine_limit`` as the server uses it: capped by ``io_max_combine_limit``."""
        return min(self.io_combine_limit, self.io_max_combine_limit)

    @property
    def nbuffers(self) -> int:
        """``NBuffers``: shared buffer slots."""
        return self.shared_buffers

    @property
    def max_backends(self) -> int:
        """``MaxBackends`` (``InitializeMaxBackends``)."""
        return self._derived["max_backends"]

    @property
    def pin_limit(self) -> int:
        """``GetPinLimit()`` = ``MaxProportionalPins`` (may be 0 on tiny pools)."""
        return self._derived["pin_limit"]

    @property
    def io_direct_data(self) -> bool:
        """``debug_io_direct`` contains ``data`` (no page cache, no read-ahead advice)."""
        return "data" in [o.strip() for o in self.debug_io_direct.split(",")]

    # ----------------------------------------------------------------------------- building
    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed (values may be strings with units).

        A copy for another ``version`` takes that version's defaults for the I/O worker settings
        it has, and drops those it lacks (``io_workers`` of 18 means nothing to 19's pool, which
        sizes itself; ``VERSION_SETTINGS``) unless ``changes`` names them, which is refused.
        """
        return Settings.from_mapping(_changed(self.as_dict(), changes))

    def as_dict(self) -> dict[str, Any]:
        """Every setting of this version by GUC name (what trace JSON and reports print); the
        I/O worker settings of other versions are left out."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not f.name.startswith("_")
            and (f.name not in _ALL_VERSION_SETTINGS or f.name in VERSION_SETTINGS[self.version])
        }

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if not f.name.startswith("_"))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build from GUC names to values; strings are parsed with PostgreSQL's units."""
        known = set(cls.names())
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingError(f"unknown setting {unknown[0]!r}: allowed {', '.join(sorted(known))}")
        parsed = {name: parse_setting(name, value) for name, value in values.items()}
        return cls(**parsed)

    @classmethod
    def parse_assignments(cls, items: list[str], base: Settings | None = None) -> Settings:
        """Parse ``NAME=VALUE`` strings (the CLI's ``--setting``) on top of ``base``."""
        changes: dict[str, Any] = {}
        for item in items:
            if "=" not in item:
                raise SettingError(f"setting {item!r} is not of the form NAME=VALUE")
            name, _, value = item.partition("=")
            changes[name.strip()] = value.strip()
        start = (base or cls()).as_dict()
        return cls.from_mapping(_changed(start, changes))


def io_worker_pool(version: str, workers: int) -> dict[str, int]:
    """The settings of a pool of exactly ``workers`` I/O workers in the terms ``version`` has
    (``method_worker.c``): 18's fixed ``io_workers``; from 19 on ``io_min_workers =
    io_max_workers``, which the postmaster starts at once (``maybe_start_io_workers_scheduled_at``
    returns "as soon as possible" below ``io_min_workers``) and never grows past (nothing is
    launched at ``io_max_workers``), so the pool neither grows nor times out
    (``pgaio_worker_can_timeout``: only a worker numbered ``io_min_workers`` or higher may)."""
    version = canonical_version(version)
    if "io_workers" in VERSION_SETTINGS[version]:
        return {"io_workers": workers}
    return {"io_min_workers": workers, "io_max_workers": workers}


def _version_settings_text(version: str) -> str:
    if version == "18":
        return "io_workers (a fixed pool of I/O workers)"
    return "io_min_workers and io_max_workers (a pool of I/O workers that sizes itself)"


def _changed(start: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``start`` (an ``as_dict``) with ``changes`` applied; if the version changes, the I/O
    worker settings of the old version that the new one lacks are dropped first."""
    out = dict(start)
    if "version" in changes:
        new = canonical_version(changes["version"])
        for name in list(out):
            if name in _ALL_VERSION_SETTINGS and name not in VERSION_SETTINGS[new]:
                del out[name]
    out.update(changes)
    return out


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


_NUM_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_setting(name: str, value: Any) -> Any:
    """Convert one value to the type and unit of setting ``name`` (strings accept units)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name in _BOOL_SETTINGS:
        low = text.lower()
        if low in ("on", "true", "yes", "1"):
            return True
        if low in ("off", "false", "no", "0"):
            return False
        raise SettingError(f"{name} = {value!r} is invalid: allowed on/off")
    if name in ("version", "io_method", "debug_io_direct"):
        return text
    if name not in GUC_RANGES:
        raise SettingError(f"unknown setting {name!r}")
    _lo, _hi, unit, kind = GUC_RANGES[name]
    m = _NUM_RE.match(text)
    if not m:
        raise SettingError(f"{name} = {value!r} is not a number with an optional unit")
    number, suffix = float(m.group(1)), m.group(2)
    if suffix:
        if kind in ("blocks", "kB") and suffix in _UNIT_KB:
            kb = number * _UNIT_KB[suffix]
            number = kb / 8 if kind == "blocks" else kb
        elif kind == "ms" and suffix in _UNIT_MS:
            number = number * _UNIT_MS[suffix]
        else:
            allowed = {
                "blocks": "kB, MB, GB, TB",
                "kB": "kB, MB, GB, TB",
                "ms": "us, ms, s, min",
            }
            raise SettingError(
                f"{name} = {value!r} has an invalid unit {suffix!r}: allowed "
                f"{allowed.get(kind or '', 'none (a plain number)')}"
            )
    if name == "vacuum_cost_delay":
        return number
    if not float(number).is_integer():
        raise SettingError(f"{name} = {value!r} is not a whole number of {unit or 'units'}")
    return int(number)
