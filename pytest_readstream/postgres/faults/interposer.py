"""Latency and faults for a real server: the read interposer and its control area.

A server the harness starts with ``interpose=True`` runs with a small library preloaded
(``LD_PRELOAD``, C source in ``interpose/rsinterpose.c``, compiled by :mod:`._cbuild`). It wraps
``pread``/``preadv``, through which PostgreSQL's ``pg_preadv()`` (``port/pg_iovec.h``) reads relation
data for ``md.c`` with ``io_method`` ``sync`` and ``worker``, and liburing's ``io_uring_submit`` and
``io_uring_peek_batch_cqe`` (``method_io_uring.c``): under ``io_uring`` a matched read's completion
gets its ``EIO``, short count or damaged pages before PostgreSQL reaps it; a delay or hang there
is refused (:func:`io_uring_problem`). Every process of the server shares
one control area, a file in the server's run directory mapped ``MAP_SHARED``: the harness writes
rules there between statements (no restart), the server's processes count, act and append to a
ledger the harness reads back.

A rule names the segment files of one relation fork by device and inode (resolved from
``pg_relation_filepath``), so WAL, catalogs and every file the harness did not name can never
match, and a block range inside it. It can add latency per request (fixed or drawn from a seeded
distribution), a cost per byte, and a limit of requests served at once (so a model device profile
can be imposed), fail a request with ``EIO``, make it short, hold it until released (then let it
succeed, or fail it with ``EIO``: ``hang_eio``), or damage the pages of its blocks in the data the
request returns (``corrupt``: the page then fails ``PageIsVerified`` on its checksum, the file is
untouched). It fires on every matching request or only on the *k*-th, at most ``times`` times.

Debian's ``libfiu`` (``fiu-run -x``) was evaluated first; ``docs/postgres.md`` says why it does not
do this job (no predicate on file or offset, no delay, control per process).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import mmap
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..builds._cbuild import build_shared_object, package_text
from ..errors import PgHarnessError, PgNotAvailable

__all__ = [
    "ACTIONS",
    "ControlArea",
    "FaultInjector",
    "IoRule",
    "Latency",
    "LedgerEntry",
    "URING_NO_DELAY",
    "RelationTarget",
    "interposer_library",
    "io_uring_problem",
    "rule_for_device",
    "rule_for_fault",
    "unsupported_fault",
]

_MAGIC = 0x50495352
_VERSION = 1
_MAX_RULES = 16
_MAX_FILES = 8
_LEDGER_CAP = 8192
_ENV = "READSTREAM_INTERPOSE_CONTROL"

Action = Literal["delay", "eio", "short", "hang", "corrupt", "hang_eio"]
#: Rule actions, in the C enum's order (``RsiAction`` in ``rsinterpose.h``).
ACTIONS: tuple[Action, ...] = ("delay", "eio", "short", "hang", "corrupt", "hang_eio")
_DISTS = ("fixed", "uniform", "exponential")
_FORK_SUFFIX = {"main": "", "fsm": "_fsm", "vm": "_vm", "init": "_init"}


# -- the shared layout (mirrors rsinterpose.h; the library refuses an area of another size) --
class _File(ctypes.Structure):
    _fields_ = [
        ("dev", ctypes.c_uint64),
        ("ino", ctypes.c_uint64),
        ("first_block", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


class _Rule(ctypes.Structure):
    _fields_ = [
        ("active", ctypes.c_uint32),
        ("action", ctypes.c_uint32),
        ("nfiles", ctypes.c_uint32),
        ("first_block", ctypes.c_uint32),
        ("last_block", ctypes.c_uint32),
        ("nth", ctypes.c_uint32),
        ("times", ctypes.c_uint32),
        ("short_bytes", ctypes.c_uint32),
        ("dist", ctypes.c_uint32),
        ("max_inflight", ctypes.c_uint32),
        ("latency_ns", ctypes.c_uint64),
        ("latency_b_ns", ctypes.c_uint64),
        ("ps_per_byte", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("files", _File * _MAX_FILES),
        ("matched", ctypes.c_uint64),
        ("fired", ctypes.c_uint64),
        ("draws", ctypes.c_uint64),
        ("inflight", ctypes.c_uint32),
        ("released", ctypes.c_uint32),
    ]


class _Entry(ctypes.Structure):
    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("pid", ctypes.c_int32),
        ("rule", ctypes.c_int32),
        ("action", ctypes.c_uint32),
        ("fired", ctypes.c_uint32),
        ("first_block", ctypes.c_uint32),
        ("nblocks", ctypes.c_uint32),
        ("result", ctypes.c_int64),
        ("asked", ctypes.c_uint64),
        ("delay_ns", ctypes.c_uint64),
        ("start_ns", ctypes.c_uint64),
        ("end_ns", ctypes.c_uint64),
    ]


class _Control(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("seq", ctypes.c_uint64),
        ("enabled", ctypes.c_uint32),
        ("blcksz", ctypes.c_uint32),
        ("nrules", ctypes.c_uint32),
        ("ledger_cap", ctypes.c_uint32),
        ("attached_pid", ctypes.c_int32),
        ("pad0", ctypes.c_uint32),
        ("ledger_next", ctypes.c_uint64),
        ("seen", ctypes.c_uint64),
        ("matched", ctypes.c_uint64),
        ("rules", _Rule * _MAX_RULES),
        ("ledger", _Entry * _LEDGER_CAP),
    ]


def interposer_library() -> Path:
    """Compile (once, cached) the interposer; raises ``CBuildUnavailable`` without a compiler.

    It needs no PostgreSQL headers: it only wraps libc calls, so it builds for any server.
    """
    sources = {name: package_text("faults/interpose", name) for name in ("rsinterpose.c", "rsinterpose.h")}
    return build_shared_object("rsinterpose", sources, libraries=("m", "dl"))


# -- what the harness asks for -------------------------------------------------------------------
@dataclass(frozen=True)
class Latency:
    """Per-request latency of the storage below ``md.c`` (what ``mdreadv``/``mdstartreadv`` wait
    for): ``fixed`` µs, ``uniform`` in [low, high] µs, or ``exponential`` with that mean.

    A drawn latency depends only on ``seed`` and the draw's number, so a run is reproducible
    whichever process happens to make the *k*-th draw.
    """

    dist: Literal["fixed", "uniform", "exponential"] = "fixed"
    us: float = 0.0
    high_us: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dist not in _DISTS:
            raise ValueError(f"latency distribution {self.dist!r} is not valid; allowed: {', '.join(_DISTS)}")
        if not 0 <= self.us <= 60_000_000:
            raise ValueError(f"latency {self.us!r} µs is out of range; allowed: 0..60000000")
        if self.dist == "uniform" and not self.us <= self.high_us <= 60_000_000:
            raise ValueError(
                f"uniform latency high {self.high_us!r} µs is out of range; allowed: {self.us}..60000000"
            )
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"latency seed {self.seed!r} is out of range; allowed: 0..2**64-1")

    def draw_ns(self, k: int) -> int:
        """The latency of the ``k``-th draw (0-based), in ns, exactly as the library computes it."""
        lat_ns = round(self.us * 1000)
        if self.dist == "fixed":
            return lat_ns
        u = ((_mix(self.seed ^ _mix(k)) >> 11) + 0.5) / 9007199254740992.0
        if self.dist == "uniform":
            return lat_ns + int(u * float(round(self.high_us * 1000) - lat_ns))
        return int(-math.log(u) * float(lat_ns))


_M64 = 2**64 - 1


def _mix(x: int) -> int:
    """splitmix64's output function (``rsi_mix`` in ``rsinterpose.c``)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


@dataclass(frozen=True)
class RelationTarget:
    """The segment files of one relation fork (``md.c``'s ``MdfdVec`` list), by device and inode,
    found through ``pg_relation_filepath``."""

    relation: str
    fork: str
    paths: tuple[Path, ...]
    files: tuple[tuple[int, int, int], ...]  # (st_dev, st_ino, first block of the segment)


@dataclass(frozen=True)
class IoRule:
    """What to do to the reads of ``target`` that touch blocks ``blocks`` (inclusive range): a fault
    of the storage below ``md.c``, seen by ``pg_preadv`` (``port/pg_iovec.h``).

    ``action``: ``delay`` (latency only), ``eio``, ``short`` (the request returns the bytes before
    ``blocks[0]``, or ``short_bytes`` if it starts there; with ``short_bytes=0`` such a request is
    left alone and the rule waits for one that starts earlier, as the model's ``short_read``
    does), ``hang`` (until :meth:`FaultInjector.release`), ``hang_eio`` (the same, then ``EIO``),
    ``corrupt`` (each page of ``blocks`` the request returns is damaged so that its checksum
    fails while its header stays sane: an all-zero page first gets an empty page's header; a
    server without data checksums would accept such a page). ``corrupt`` acts together with
    any other rule's action on the same request.
    ``nth``: fire only on the nth matching request (1-based); ``times``: fire at most this often.
    ``per_byte_ns`` and ``max_inflight`` model a device's transfer cost and parallelism.
    """

    target: RelationTarget
    action: Action = "delay"
    blocks: tuple[int, int] | None = None
    nth: int | None = None
    times: int | None = None
    latency: Latency | None = None
    per_byte_ns: float = 0.0
    max_inflight: int | None = None
    short_bytes: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"fault action {self.action!r} is not valid; allowed: {', '.join(ACTIONS)}")
        if self.blocks is not None:
            lo, hi = self.blocks
            if not (0 <= lo <= hi < 2**32 - 1):
                raise ValueError(
                    f"block range {self.blocks!r} is not valid; allowed: 0 <= first <= last < 2**32-1"
                )
        if self.nth is not None and not 1 <= self.nth < 2**32:
            raise ValueError(f"nth = {self.nth!r} is not valid; allowed: 1..2**32-1 or None (every read)")
        if self.times is not None and not 1 <= self.times < 2**32:
            raise ValueError(f"times = {self.times!r} is not valid; allowed: 1..2**32-1 or None (unlimited)")
        if self.max_inflight is not None and not 1 <= self.max_inflight <= 65536:
            raise ValueError(f"max_inflight = {self.max_inflight!r} is not valid; allowed: 1..65536 or None")
        if not 0 <= self.per_byte_ns <= 1_000_000:
            raise ValueError(f"per_byte_ns = {self.per_byte_ns!r} is not valid; allowed: 0..1000000")
        if not 0 <= self.short_bytes < 2**31:
            raise ValueError(f"short_bytes = {self.short_bytes!r} is not valid; allowed: 0..2**31-1")
        if (
            self.action == "delay"
            and self.latency is None
            and self.per_byte_ns == 0
            and self.max_inflight is None
        ):
            raise ValueError("a delay rule needs latency=, per_byte_ns= or max_inflight=")


#: Under ``io_method=io_uring`` the kernel performs the read; the interposer sees its submission
#: (``io_uring_submit``) and its completion (``io_uring_peek_batch_cqe``) only.
URING_NO_DELAY = (
    "io_method=io_uring: the kernel performs the read (method_io_uring.c), the interposer sees only "
    "its submission and completion, so it cannot delay or hold it (EIO, short reads, damaged pages "
    "and the ledger work)"
)


def io_uring_problem(rule: IoRule) -> str | None:
    """Why ``rule`` cannot act on reads submitted through io_uring (``None``: it can).

    ``eio``, ``short`` and ``corrupt`` change the completion PostgreSQL reaps (its ``res``, or the
    pages in the buffers); a latency, a transfer cost, a limit of requests at once or a hang
    would have to act while the kernel reads.
    """
    if rule.action in ("hang", "hang_eio"):
        return f"a {rule.action} rule under {URING_NO_DELAY}"
    lat = rule.latency
    if (lat is not None and (lat.us > 0 or lat.high_us > 0)) or rule.per_byte_ns > 0:
        return f"a rule with latency under {URING_NO_DELAY}"
    if rule.max_inflight is not None:
        return f"a rule with max_inflight under {URING_NO_DELAY}"
    return None


def unsupported_fault(fault: Any, *, data_checksums: bool = True) -> str | None:
    """Why the interposer cannot inject a model ``Fault`` as the model does (``None``: it can).

    ``data_checksums``: whether the server verifies page checksums (``SHOW data_checksums``);
    without them a page the interposer damages keeps a sane header and passes verification.
    """
    if fault.kind == "checksum" and not data_checksums:
        return (
            "the cluster has no data checksums (initdb --no-data-checksums), so a damaged page "
            "with a sane header passes verification"
        )
    if fault.nth_read is not None:
        return (
            "nth_read counts every read of the model's instance; the server's reads of catalogs "
            "and other relations are not the model's, so give block= instead"
        )
    return None


def rule_for_fault(fault: Any, target: RelationTarget) -> IoRule:
    """The rule doing what the model's ``FaultPlan.on_read`` does with a ``Fault`` of a block."""
    blocks = (int(fault.block), int(fault.block))
    if fault.kind == "eio":
        return IoRule(target, "eio", blocks=blocks, times=fault.times)
    if fault.kind == "checksum":
        # The page arrives damaged: the server's own PageIsVerified fails on its checksum.
        return IoRule(target, "corrupt", blocks=blocks, times=fault.times)
    if fault.kind == "short_read":
        # The model returns the blocks before the faulty one and leaves a read starting there
        # alone (short_bytes=0 keeps the rule armed for a later one).
        return IoRule(target, "short", blocks=blocks, times=fault.times, short_bytes=0)
    return IoRule(
        target, "delay", blocks=blocks, times=fault.times, latency=Latency("fixed", float(fault.extra_us))
    )


def rule_for_device(
    target: RelationTarget, profile: Any, *, seed: int = 0, blocks: tuple[int, int] | None = None
) -> IoRule:
    """A delay rule imposing a model device profile (``reference_impl`` ``DeviceProfile`` or name).

    Each request waits the profile's read latency plus its bytes at the profile's bandwidth,
    holding one of ``channels`` slots meanwhile. The model's transfer stage is shared by all
    channels; here each request pays its own transfer, which differs only when the bandwidth,
    not the latency, bounds the device.
    """
    from reference_impl.storage.device import device_profile

    prof = device_profile(profile)
    if prof.jitter:
        # The model multiplies by a log-normal factor; the interposer's seeded exponential is
        # the nearest distribution it offers, so a jittery profile is refused, not approximated.
        raise ValueError(
            f"device profile {prof.name!r} has jitter {prof.jitter}; allowed: profiles without jitter"
        )
    if prof.sequential_latency_us is not None:
        # A spinning disk's cheaper sequential request needs the previous request's end, which
        # the interposer does not track: refused rather than charged the random latency.
        raise ValueError(
            f"device profile {prof.name!r} has a sequential latency; allowed: profiles without one "
            "(nvme, sata-ssd, cloud-1ms, ram)"
        )
    return IoRule(
        target,
        "delay",
        blocks=blocks,
        latency=Latency("fixed", float(prof.read_latency_us), seed=seed),
        per_byte_ns=1000.0 / (prof.bandwidth_mb_s * 1.048576),
        max_inflight=prof.channels,
    )


@dataclass(frozen=True)
class LedgerEntry:
    """One ``pg_preadv`` request a rule matched (``RsiEntry`` in ``rsinterpose.h``): what fired, on
    which blocks, with what result."""

    pid: int
    rule: int
    action: Action
    fired: bool
    first_block: int
    nblocks: int
    result: int  # bytes returned, or -errno
    asked: int
    delay_us: float
    start_ns: int
    end_ns: int


# -- the control area -------------------------------------------------------------------------
class ControlArea:
    """The file the interposer maps (``RsiControl`` in ``rsinterpose.h``), seen from the harness: the
    rules every server process applies to its ``pread``/``preadv`` calls (``pg_preadv``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        size = ctypes.sizeof(_Control)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._c = _Control.from_buffer(self._map)
        self.reset()

    def reset(self) -> None:
        """Everything off and zeroed (before a postmaster start: rules do not survive one)."""
        ctypes.memset(ctypes.addressof(self._c), 0, ctypes.sizeof(_Control))
        self._c.magic = _MAGIC
        self._c.version = _VERSION
        self._c.ledger_cap = _LEDGER_CAP

    @property
    def attached_pid(self) -> int:
        return int(self._c.attached_pid)

    @property
    def seen(self) -> int:
        """Requests the interposer saw while rules were installed (any file)."""
        return int(self._c.seen)

    @property
    def matched(self) -> int:
        """Requests at least one rule matched."""
        return int(self._c.matched)

    def install(self, rules: Sequence[IoRule], blcksz: int) -> None:
        """Replace every rule (counters and ledger start afresh) under the sequence lock."""
        if len(rules) > _MAX_RULES:
            raise ValueError(f"{len(rules)} rules given; allowed: at most {_MAX_RULES}")
        for rule in rules:
            _check_files(rule)  # before anything changes: a bad rule leaves the old ones in force
        c = self._c
        c.seq += 1  # odd: readers wait until the rewrite is done
        try:
            for i in range(_MAX_RULES):
                ctypes.memset(ctypes.addressof(c.rules[i]), 0, ctypes.sizeof(_Rule))
            for i, rule in enumerate(rules):
                _fill(c.rules[i], rule)
            c.nrules = len(rules)
            c.blcksz = blcksz
            c.ledger_next = 0
            c.seen = 0
            c.matched = 0
            c.enabled = 1 if rules else 0
        finally:
            c.seq += 1

    def set_enabled(self, on: bool) -> None:
        """Let the installed rules act (or every read pass through), keeping their counters."""
        c = self._c
        c.seq += 1
        try:
            c.enabled = 1 if on and c.nrules else 0
        finally:
            c.seq += 1

    def fired(self, index: int) -> int:
        return int(self._c.rules[index].fired)

    def matched_by(self, index: int) -> int:
        return int(self._c.rules[index].matched)

    def release(self, index: int) -> None:
        self._c.rules[index].released = 1

    def ledger(self) -> tuple[list[LedgerEntry], int]:
        """The complete entries still in the ring, oldest first, and how many were overwritten."""
        total = int(self._c.ledger_next)
        first = max(0, total - _LEDGER_CAP)
        out = []
        for idx in range(first, total):
            e = self._c.ledger[idx % _LEDGER_CAP]
            if int(e.seq) != idx + 1:
                continue  # still being written (or overwritten meanwhile)
            out.append(
                LedgerEntry(
                    pid=int(e.pid),
                    rule=int(e.rule),
                    action=ACTIONS[int(e.action)] if int(e.action) < len(ACTIONS) else "delay",
                    fired=bool(e.fired),
                    first_block=int(e.first_block),
                    nblocks=int(e.nblocks),
                    result=int(e.result),
                    asked=int(e.asked),
                    delay_us=int(e.delay_ns) / 1000.0,
                    start_ns=int(e.start_ns),
                    end_ns=int(e.end_ns),
                )
            )
        return out, first

    def close(self) -> None:
        del self._c
        self._map.close()


def _check_files(rule: IoRule) -> None:
    files = rule.target.files
    if not files:
        raise ValueError(f"relation {rule.target.relation!r} ({rule.target.fork}) has no file to act on")
    if len(files) > _MAX_FILES:
        raise ValueError(
            f"relation {rule.target.relation!r} has {len(files)} segment files; allowed: at most {_MAX_FILES}"
        )


def _fill(slot: _Rule, rule: IoRule) -> None:
    files = rule.target.files
    lat = rule.latency or Latency()
    slot.action = ACTIONS.index(rule.action)
    slot.nfiles = len(files)
    for i, (dev, ino, first) in enumerate(files):
        slot.files[i].dev = dev
        slot.files[i].ino = ino
        slot.files[i].first_block = first
    lo, hi = rule.blocks if rule.blocks is not None else (0, 2**32 - 2)
    slot.first_block, slot.last_block = lo, hi
    slot.nth = rule.nth or 0
    slot.times = rule.times or 0
    slot.short_bytes = rule.short_bytes
    slot.dist = _DISTS.index(lat.dist)
    slot.max_inflight = rule.max_inflight or 0
    slot.latency_ns = round(lat.us * 1000)
    slot.latency_b_ns = round(lat.high_us * 1000)
    slot.ps_per_byte = int(rule.per_byte_ns * 1000)  # below a picosecond per byte: nothing
    slot.seed = lat.seed
    slot.active = 1


# -- the harness's handle on a server's interposer ---------------------------------------------
class FaultInjector:
    """Rules for the relation reads (``mdreadv``/``mdstartreadv`` in ``md.c``, through ``pg_preadv``)
    of a server started with the interposer (``PgServer.faults``).

    Rules are changed between statements; :meth:`apply` replaces them all, :meth:`clear` removes
    them (every read then passes straight through). The ledger records every request a rule
    matched since the last :meth:`apply`.
    """

    def __init__(self, server: Any, area: ControlArea) -> None:
        self._server = server
        self._area = area
        self.rules: tuple[IoRule, ...] = ()

    @property
    def area(self) -> ControlArea:
        return self._area

    def target(self, dbname: str, relation: str, fork: str = "main") -> RelationTarget:
        """The files of ``relation``'s ``fork`` in database ``dbname``, as they are now.

        A rewrite of the relation (``TRUNCATE``, ``VACUUM FULL``) gives it new files, which an
        existing rule does not follow; a segment created after this call is not covered either.
        """
        if fork not in _FORK_SUFFIX:
            raise ValueError(f"fork {fork!r} is not valid; allowed: {', '.join(_FORK_SUFFIX)}")
        data_dir = self._server.data_dir
        if data_dir is None:
            raise PgNotAvailable("fault injection needs a server the harness runs (its files)")
        with self._server.connect(dbname) as conn:
            row = conn.execute(
                "SELECT pg_relation_filepath(%s::regclass), "
                "(SELECT setting::int FROM pg_settings WHERE name = 'segment_size')",
                (relation,),
            ).fetchone()
        if row is None or row[0] is None:
            raise ValueError(f"relation {relation!r} has no storage in database {dbname!r}")
        base = Path(data_dir) / (str(row[0]) + _FORK_SUFFIX[fork])
        seg_blocks = int(row[1])
        paths: list[Path] = []
        files: list[tuple[int, int, int]] = []
        segno = 0
        while True:
            path = base if segno == 0 else base.with_name(f"{base.name}.{segno}")
            try:
                st = os.stat(path)
            except FileNotFoundError:
                break
            paths.append(path)
            files.append((st.st_dev, st.st_ino, segno * seg_blocks))
            segno += 1
        if not files:
            raise ValueError(f"relation {relation!r} has no {fork} fork file ({base.name})")
        return RelationTarget(relation, fork, tuple(paths), tuple(files))

    def apply(self, *rules: IoRule) -> None:
        """Install ``rules`` (replacing any before), effective for the next request read."""
        self._server.ensure_alive("installing I/O rules")
        if self._server.settings.io_method == "io_uring":
            for rule in rules:
                why = io_uring_problem(rule)
                if why is not None:
                    raise PgNotAvailable(f"{why}; use io_method sync or worker")
        self._area.install(list(rules), self._server.block_size)
        self.rules = tuple(rules)

    def clear(self) -> None:
        """Remove every rule; a hung request is let go first."""
        for i in range(len(self.rules)):
            self._area.release(i)
        self._area.install([], self._server.block_size)
        self.rules = ()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every read passes through inside the block; the rules and their counters stay."""
        self._area.set_enabled(False)
        try:
            yield
        finally:
            self._area.set_enabled(True)

    def release(self, index: int = 0) -> None:
        """Let the hung requests of rule ``index`` return (and stop it hanging new ones)."""
        self._check_index(index)
        self._area.release(index)

    def fired(self, index: int = 0) -> int:
        """How often rule ``index`` fired since :meth:`apply`."""
        self._check_index(index)
        return self._area.fired(index)

    def matched(self, index: int = 0) -> int:
        """How many requests rule ``index`` matched (fired or not)."""
        self._check_index(index)
        return self._area.matched_by(index)

    def wait_fired(self, index: int = 0, count: int = 1, *, timeout: float = 60.0) -> None:
        """Poll until rule ``index`` fired ``count`` times (the timeout only guards a broken run)."""
        deadline = time.monotonic() + timeout
        while self.fired(index) < count:
            self._server.ensure_alive("waiting for an injected fault")
            if time.monotonic() > deadline:
                raise PgHarnessError(
                    f"rule {index} ({self.rules[index].action}) fired {self.fired(index)} of {count} "
                    f"times within {timeout:.0f} s"
                )
            time.sleep(0.005)

    def ledger(self) -> list[LedgerEntry]:
        """The requests rules matched since :meth:`apply` (the newest 8192)."""
        return self._area.ledger()[0]

    def _check_index(self, index: int) -> None:
        if not 0 <= index < len(self.rules):
            raise IndexError(f"rule {index} does not exist; {len(self.rules)} rule(s) installed")


def preload_environment(library: Path, area: ControlArea, base: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The postmaster's environment: ``base`` plus the library preloaded and the area named."""
    env = dict(base)
    preload = env.get("LD_PRELOAD", "").split()
    env["LD_PRELOAD"] = " ".join([str(library), *[p for p in preload if p != str(library)]])
    env[_ENV] = str(area.path)
    return env
