"""Fault injection: deterministic, seeded failures of the storage below the buffer manager.

A ``FaultPlan`` is consulted by the storage layer for every physical read. Each ``Fault`` names
what it does and where it applies:

* ``eio`` — the read fails with an I/O error (``EIO``); PostgreSQL reports
  ``could not read blocks ...`` when the reader waits for that I/O;
* ``short_read`` — the kernel returns fewer bytes than asked; ``WaitReadBuffers`` must issue a
  follow-up read for the rest (``ProcessReadBuffersResult`` / partial reads);
* ``checksum`` — the page arrives but fails verification (``PageIsVerified``); an error unless
  ``zero_damaged_pages`` (page zeroed) or ``ignore_checksum_failure`` (page accepted) is on;
* ``latency`` — the read takes ``extra_us`` longer (a latency spike).

A fault applies to reads covering ``block`` of a relation/fork, or to the ``nth_read``-th
physical read of the instance (1-based), and fires ``times`` times (``None``: every time). Two
further entries are not storage faults but travel in the same plan because tests describe a
scenario with one object: ``ForeignIO`` (another backend has an I/O in progress on some blocks,
finishing or failing at a given time: the ``004_read_stream.pl`` cases) and ``CancelAt`` (the
statement is cancelled when the consumer has received a given number of buffers).

Every fault that fires is written to ``plan.ledger`` (what, where, when), as FoundationDB's
simulated disk keeps a ledger, so a failing test can say exactly what was injected. Random plans
come from :meth:`FaultPlan.random`, which takes a seed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import SettingError
from .relation import ForkNumber, fork_from_name

__all__ = [
    "Fault",
    "ForeignIO",
    "CancelAt",
    "FaultPlan",
    "ReadFaultOutcome",
    "FAULT_KINDS",
]

FAULT_KINDS = ("eio", "short_read", "checksum", "latency")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected storage fault (see the module docstring for the kinds)."""

    kind: str
    relation: str | None = None
    fork: ForkNumber = ForkNumber.MAIN
    block: int | None = None
    nth_read: int | None = None
    times: int | None = 1
    short_blocks: int = 1
    extra_us: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise SettingError(f"fault kind {self.kind!r} is invalid: allowed {', '.join(FAULT_KINDS)}")
        object.__setattr__(self, "fork", fork_from_name(self.fork))
        if (self.block is None) == (self.nth_read is None):
            raise SettingError(
                f"{self.kind} fault needs exactly one of block=... or nth_read=... "
                f"(got block={self.block!r}, nth_read={self.nth_read!r})"
            )
        if self.block is not None and (not isinstance(self.block, int) or self.block < 0):
            raise SettingError(f"fault block {self.block!r} is invalid: allowed a block number >= 0")
        if self.nth_read is not None and (not isinstance(self.nth_read, int) or self.nth_read < 1):
            raise SettingError(f"fault nth_read {self.nth_read!r} is invalid: allowed >= 1")
        if self.times is not None and (not isinstance(self.times, int) or self.times < 1):
            raise SettingError(f"fault times {self.times!r} is invalid: allowed >= 1 or None (always)")
        if self.kind == "short_read" and (not isinstance(self.short_blocks, int) or self.short_blocks < 1):
            raise SettingError(f"short_read short_blocks {self.short_blocks!r} is invalid: allowed >= 1")
        if self.kind == "checksum" and self.block is None:
            raise SettingError("a checksum fault names a page: give block=..., not nth_read")
        if self.kind == "latency" and (not isinstance(self.extra_us, int) or self.extra_us < 1):
            raise SettingError(f"latency fault extra_us {self.extra_us!r} is invalid: allowed >= 1")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fork"] = int(self.fork)
        return d


@dataclass(frozen=True, slots=True)
class ForeignIO:
    """Another backend holds an I/O in progress on ``nblocks`` blocks from ``block``.

    It started at ``starts_at_us`` and completes ``duration_us`` later, successfully or (with
    ``fails``) with an error, after which the blocks are read by whoever needs them next.
    """

    relation: str
    block: int
    nblocks: int = 1
    fork: ForkNumber = ForkNumber.MAIN
    starts_at_us: int = 0
    duration_us: int = 1000
    fails: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "fork", fork_from_name(self.fork))
        if self.nblocks < 1 or self.block < 0 or self.duration_us < 1 or self.starts_at_us < 0:
            raise SettingError(
                f"ForeignIO({self.relation!r}, block={self.block}, nblocks={self.nblocks}, "
                f"duration_us={self.duration_us}) is invalid: needs block >= 0, nblocks >= 1, "
                "duration_us >= 1, starts_at_us >= 0"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fork"] = int(self.fork)
        return d


@dataclass(frozen=True, slots=True)
class CancelAt:
    """Cancel the statement once the consumer has received ``after_buffers`` buffers."""

    after_buffers: int

    def __post_init__(self) -> None:
        if not isinstance(self.after_buffers, int) or self.after_buffers < 0:
            raise SettingError(f"CancelAt.after_buffers {self.after_buffers!r} is invalid: allowed >= 0")


@dataclass(slots=True)
class ReadFaultOutcome:
    """What the plan decided for one physical read."""

    eio: bool = False
    ok_blocks: int = -1  # -1: the whole read; otherwise a short read of this many blocks
    corrupt: list[int] = field(default_factory=list)
    extra_us: int = 0


class FaultPlan:
    """A deterministic plan of storage faults plus foreign I/Os and cancellations."""

    def __init__(
        self,
        faults: list[Fault] | tuple[Fault, ...] = (),
        *,
        foreign_ios: list[ForeignIO] | tuple[ForeignIO, ...] = (),
        cancel: CancelAt | None = None,
        seed: int | None = None,
    ) -> None:
        for f in faults:
            if not isinstance(f, Fault):
                raise SettingError(f"{f!r} is not a Fault")
        self.faults: list[Fault] = list(faults)
        self.foreign_ios: list[ForeignIO] = list(foreign_ios)
        self.cancel = cancel
        self.seed = seed
        self._fired: dict[int, int] = {}
        self.ledger: list[dict[str, Any]] = []
        self.reads_seen = 0

    @property
    def empty(self) -> bool:
        return not self.faults

    def on_read(
        self, relation: str, fork: ForkNumber, start: int, n: int, at_us: int
    ) -> ReadFaultOutcome | None:
        """Decide the fate of one physical read (called by the storage layer, in order)."""
        self.reads_seen += 1
        nth = self.reads_seen
        if not self.faults:
            return None
        out: ReadFaultOutcome | None = None
        end = start + n
        for i, f in enumerate(self.faults):
            if f.times is not None and self._fired.get(i, 0) >= f.times:
                continue
            if f.nth_read is not None:
                if f.nth_read != nth:
                    continue
            else:
                if f.relation is not None and f.relation != relation:
                    continue
                if f.fork != fork or not (start <= f.block < end):  # type: ignore[operator]
                    continue
            if out is None:
                out = ReadFaultOutcome()
            if f.kind == "eio":
                out.eio = True
            elif f.kind == "short_read":
                if f.block is not None:
                    ok = f.block - start
                else:
                    ok = min(f.short_blocks, n - 1)
                if ok < 1:
                    continue  # cannot shorten a read to nothing; the fault stays armed
                out.ok_blocks = ok if out.ok_blocks < 0 else min(out.ok_blocks, ok)
            elif f.kind == "checksum":
                out.corrupt.append(f.block)  # type: ignore[arg-type]
            else:
                out.extra_us += f.extra_us
            self._fired[i] = self._fired.get(i, 0) + 1
            self.ledger.append(
                {
                    "fault": f.kind,
                    "index": i,
                    "relation": relation,
                    "fork": int(fork),
                    "read_start": start,
                    "read_nblocks": n,
                    "nth_read": nth,
                    "at_us": at_us,
                }
            )
        return out

    @classmethod
    def random(
        cls,
        seed: int,
        *,
        relation: str,
        nblocks: int,
        count: int = 3,
        kinds: tuple[str, ...] = FAULT_KINDS,
    ) -> FaultPlan:
        """``count`` faults on random blocks of ``relation``, from a seeded generator."""
        if nblocks < 1:
            raise SettingError(f"FaultPlan.random needs nblocks >= 1, got {nblocks}")
        for k in kinds:
            if k not in FAULT_KINDS:
                raise SettingError(f"fault kind {k!r} is invalid: allowed {', '.join(FAULT_KINDS)}")
        rng = np.random.default_rng(seed)
        faults = []
        for _ in range(count):
            kind = kinds[int(rng.integers(len(kinds)))]
            block = int(rng.integers(nblocks))
            extra = int(rng.integers(100, 20000)) if kind == "latency" else 0
            faults.append(Fault(kind, relation=relation, block=block, extra_us=extra))
        return cls(faults, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "faults": [f.to_dict() for f in self.faults],
            "foreign_ios": [f.to_dict() for f in self.foreign_ios],
            "cancel": None if self.cancel is None else {"after_buffers": self.cancel.after_buffers},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultPlan:
        faults = [Fault(**{**f, "fork": ForkNumber(f.get("fork", 0))}) for f in data.get("faults", [])]
        foreign = [
            ForeignIO(**{**f, "fork": ForkNumber(f.get("fork", 0))}) for f in data.get("foreign_ios", [])
        ]
        cancel = data.get("cancel")
        return cls(
            faults,
            foreign_ios=foreign,
            cancel=CancelAt(**cancel) if cancel else None,
            seed=data.get("seed"),
        )

    def __repr__(self) -> str:
        return f"FaultPlan({len(self.faults)} faults, {len(self.foreign_ios)} foreign I/Os, cancel={self.cancel})"
