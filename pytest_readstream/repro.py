"""Reproductions: what a failing test needs to be re-run by hand, pasted from a CI log.

Each readstream test gets one :class:`Reproduction` (the ``readstream_repro`` fixture, also kept
in ``item.stash``). The plugin's fixtures fill it as they build things: the settings, the storage
profile, the fault plan, the relation spec, and the arguments of every stream begun through
``readstream_stream_factory``.
A test adds whatever else it generated (``readstream_repro.record(blocks=..., note=...)``).

When the test fails, its report gets a *readstream reproduction* section with the command line
that re-runs exactly this test with the same seed, and each recorded value written as a Python
expression (``Settings(io_combine_limit=4)``, ``FaultPlan.from_dict({...})``,
``[*range(0, 100), 200]``), so the scenario can be pasted into a script or a new test. The same
data, as JSON, is the test's ``scenario`` in ``--readstream-report``.
"""

from __future__ import annotations

import dataclasses
import enum
import shlex
from collections.abc import Iterable
from typing import Any

import pytest

__all__ = [
    "Reproduction",
    "REPRO_KEY",
    "block_runs",
    "blocks_expression",
    "jsonable",
]

REPRO_KEY = pytest.StashKey["Reproduction"]()
_MAX_BLOCKS = 100_000


def block_runs(blocks: Iterable[int]) -> list[list[int]]:
    """Run-length form ``[[first, count], ...]`` of a block sequence (order kept)."""
    runs: list[list[int]] = []
    for b in blocks:
        b = int(b)
        if runs and runs[-1][0] + runs[-1][1] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return runs


def blocks_expression(runs: list[list[int]]) -> str:
    """A Python expression rebuilding the block list of ``runs``."""
    parts = []
    for first, count in runs:
        if count == 1:
            parts.append(str(first))
        elif count == 2:
            parts.append(f"{first}, {first + 1}")
        else:
            parts.append(f"*range({first}, {first + count})")
    return "[" + ", ".join(parts) + "]"


def jsonable(value: Any) -> Any:
    """A JSON- and execnet-safe copy of ``value`` (dicts, lists, str, int, float, bool, None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset, range)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    for method in ("to_dict", "as_dict"):
        fn = getattr(value, method, None)
        if callable(fn):
            return jsonable(fn())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return jsonable(value.item())
    return repr(value)


def _settings_expression(settings: Any) -> tuple[str, dict[str, Any]]:
    from reference_impl import Settings

    if not isinstance(settings, Settings):
        return repr(settings), jsonable(settings)
    base = Settings().as_dict()
    changes = {k: v for k, v in settings.as_dict().items() if base.get(k) != v}
    args = ", ".join(f"{k}={v!r}" for k, v in changes.items())
    return f"Settings({args})", changes


def _storage_expression(profile: Any) -> str:
    from reference_impl import DEVICE_PROFILES

    name = getattr(profile, "name", None)
    if name in DEVICE_PROFILES and DEVICE_PROFILES[name] == profile:
        return f"DEVICE_PROFILES[{name!r}]"
    return repr(profile)


class Reproduction:
    """The scenario of one readstream test, for the failure report and the JSON report."""

    def __init__(
        self,
        nodeid: str,
        run_seed: int,
        test_seed: int,
        implementation: str,
        *,
        impl_args: tuple[str, ...] = (),
        launcher: tuple[str, ...] = ("pytest",),
        target: list[str] | None = None,
        options: tuple[str, ...] = (),
    ) -> None:
        self.nodeid = nodeid
        # How the rerun is written: see pytest_readstream._rerun (the way the run was started).
        self.launcher = launcher
        self.target = target if target is not None else [nodeid]
        self.options = options
        self.run_seed = run_seed
        self.test_seed = test_seed
        self.implementation = implementation
        # Options that choose the server build under test (--readstream-pg-bindir, -source, -mutant).
        self.impl_args = impl_args
        self.settings: Any = None
        self.storage: Any = None
        self.faults: Any = None
        self.relations: list[Any] = []
        self.streams: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}

    # ------------------------------------------------------------------------------ recording
    def record(self, **values: Any) -> None:
        """Record scenario values: ``settings``, ``storage``, ``faults``, ``relation``, ``blocks``
        (a block sequence the test generated) and anything else (shown under its name)."""
        for key, value in values.items():
            if key == "settings":
                self.settings = value
            elif key == "storage":
                self.storage = value
            elif key == "faults":
                self.faults = value
            elif key == "relation":
                self.relations.append(value)
            elif key == "blocks":
                self.extra["blocks"] = [int(b) for b in value]
            else:
                self.extra[key] = value

    def note_stream(self, **arguments: Any) -> None:
        """Record the arguments a stream was begun with (``readstream_stream_factory`` does)."""
        self.streams.append(arguments)

    # ------------------------------------------------------------------------------ output
    def rerun_command(self) -> str:
        """The shell command that reruns this test alone with the same seed."""
        # The server build options come in impl_args; the run's own options may repeat one.
        given = {a.split("=", 1)[0] for a in self.impl_args if a.startswith("--")}
        options = [a for a in self.options if not (a.startswith("--") and a.split("=", 1)[0] in given)]
        args = [
            *self.launcher,
            *self.target,
            *options,
            f"--readstream-seed={self.run_seed}",
            f"--readstream-impl={self.implementation}",
            *self.impl_args,
        ]
        return " ".join(shlex.quote(a) for a in args)

    def as_dict(self) -> dict[str, Any]:
        """The scenario as JSON (the report's ``scenario``)."""
        data: dict[str, Any] = {
            "seed": self.run_seed,
            "test_seed": self.test_seed,
            "rerun": self.rerun_command(),
        }
        if self.settings is not None:
            data["settings"] = _settings_expression(self.settings)[1]
        if self.storage is not None:
            data["storage"] = jsonable(self.storage)
        if self.faults is not None:
            data["faults"] = jsonable(self.faults)
            ledger = getattr(self.faults, "ledger", None)
            if ledger:
                data["faults_fired"] = jsonable(ledger)
        if self.relations:
            data["relations"] = [jsonable(r) for r in self.relations]
        if self.streams:
            data["streams"] = [jsonable(s) for s in self.streams]
        for key, value in self.extra.items():
            data[key] = block_runs(value[:_MAX_BLOCKS]) if key == "blocks" else jsonable(value)
        return data

    def render(self) -> str:
        """The failure report section: a command and Python expressions to paste."""
        lines = [
            f"rerun:          {self.rerun_command()}",
            f"seed:           {self.run_seed} (this test's seed: {self.test_seed})",
            f"implementation: {self.implementation}",
        ]
        if self.settings is not None:
            lines.append(f"settings:       {_settings_expression(self.settings)[0]}")
        if self.storage is not None:
            lines.append(f"storage:        {_storage_expression(self.storage)}")
        if self.faults is not None:
            to_dict = getattr(self.faults, "to_dict", None)
            expr = f"FaultPlan.from_dict({to_dict()!r})" if callable(to_dict) else repr(self.faults)
            lines.append(f"faults:         {expr}")
            for entry in getattr(self.faults, "ledger", None) or []:
                lines.append(f"  fired:        {entry}")
        for rel in self.relations:
            lines.append(f"relation:       {rel!r}")
        if "blocks" in self.extra:
            blocks = self.extra["blocks"]
            more = f"  # first {_MAX_BLOCKS} of {len(blocks)}" if len(blocks) > _MAX_BLOCKS else ""
            lines.append(f"blocks:         {blocks_expression(block_runs(blocks[:_MAX_BLOCKS]))}{more}")
        for i, stream in enumerate(self.streams, start=1):
            args = ", ".join(f"{k}={v!r}" if k != "private" else f"private={v}" for k, v in stream.items())
            lines.append(f"stream {i}:       {args}")
        for key, value in self.extra.items():
            if key != "blocks":
                lines.append(f"{key + ':':<15} {value!r}")
        return "\n".join(lines)
