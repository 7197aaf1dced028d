"""Relations as the storage manager sees them: forks, 8 kB blocks, 1 GiB segment files.

PostgreSQL stores each fork of a relation (main, free space map, visibility map, init) as a
series of 1 GiB segment files (``md.c``); block *b* lives in segment ``b // RELSEG_SIZE``. The
only consequence for reads is that one vectored read never crosses a segment boundary
(``mdmaxcombine``), which ``StartReadBuffers`` applies before forming an I/O.

A ``Relation`` here is lazy: it is a few integers (the size of each fork) plus an optional
*content* object that knows what is on a page when a scan asks. Nothing is stored per block, so
an 8,388,608-block (64 GiB) relation costs the same memory as an 8-block one. Sizes can change
while a scan runs (a relation that grows, a truncation), which is how tests check that a scan's
``numblocks`` is fixed when it starts.

Buffer tags are plain integers for speed: ``tag = tag_base(fork) + block`` where the base packs
the relation id and fork number above the 32-bit block number (``BufferTag`` in ``buf_internals.h``
holds the same three fields).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Protocol

from ..errors import ModelUsageError

__all__ = [
    "BLCKSZ",
    "RELSEG_SIZE",
    "InvalidBlockNumber",
    "MaxBlockNumber",
    "ForkNumber",
    "FORK_NAMES",
    "Relation",
    "PageContent",
    "md_max_combine",
    "segment_of",
    "fork_from_name",
]

BLCKSZ = 8192
RELSEG_SIZE = 131072  # blocks per 1 GiB segment file
InvalidBlockNumber = 0xFFFFFFFF
MaxBlockNumber = 0xFFFFFFFE


class ForkNumber(IntEnum):
    """``ForkNumber`` (``common/relpath.h``)."""

    MAIN = 0
    FSM = 1
    VM = 2
    INIT = 3


FORK_NAMES: dict[int, str] = {
    ForkNumber.MAIN: "main",
    ForkNumber.FSM: "fsm",
    ForkNumber.VM: "vm",
    ForkNumber.INIT: "init",
}
_FORK_BY_NAME = {v: ForkNumber(k) for k, v in FORK_NAMES.items()}


def fork_from_name(name: str | int | ForkNumber) -> ForkNumber:
    """Accept ``"main"``/``"fsm"``/``"vm"``/``"init"`` or a fork number."""
    if isinstance(name, ForkNumber):
        return name
    if isinstance(name, int):
        try:
            return ForkNumber(name)
        except ValueError:
            raise ModelUsageError(f"fork number {name} is invalid: allowed 0..3") from None
    try:
        return _FORK_BY_NAME[name]
    except KeyError:
        raise ModelUsageError(f"fork {name!r} is invalid: allowed {', '.join(_FORK_BY_NAME)}") from None


def md_max_combine(block: int) -> int:
    """``mdmaxcombine``: how many blocks a read starting at ``block`` may cover in its segment."""
    return RELSEG_SIZE - block % RELSEG_SIZE


def segment_of(block: int) -> int:
    return block // RELSEG_SIZE


class PageContent(Protocol):
    """What a relation's pages hold, asked for lazily by scans (never by the read path)."""

    def page(self, fork: ForkNumber, block: int) -> Any: ...


class Relation:
    """One relation's physical storage (``SMgrRelation`` over ``md.c`` segment files).

    ``forks`` maps a fork to its size in blocks; a fork that is absent does not exist on disk
    (``smgrexists`` false). ``persistence`` is ``'p'`` (permanent), ``'u'`` (unlogged) or ``'t'``
    (temporary); a temporary relation belongs to one backend, ``temp_owner`` (its id), whose
    local buffers hold its pages (``rd_islocaltemp``). ``is_catalog`` marks system catalogs, whose streams take ``max_ios`` from the
    GUC rather than the tablespace (``read_stream_begin_impl``).
    """

    __slots__ = (
        "name",
        "relid",
        "persistence",
        "temp_owner",
        "is_catalog",
        "content",
        "_nblocks",
        "_tag_bases",
        "tablespace_eic",
        "tablespace_mic",
        "hinted_now",
        "prune_cleared_now",
        "all_visible_now",
    )

    def __init__(
        self,
        name: str,
        relid: int,
        forks: dict[ForkNumber, int] | None = None,
        *,
        persistence: str = "p",
        is_catalog: bool = False,
        content: PageContent | None = None,
        temp_owner: int | None = None,
    ) -> None:
        if persistence not in ("p", "u", "t"):
            raise ModelUsageError(f"persistence {persistence!r} is invalid: allowed 'p', 'u', 't'")
        if (persistence == "t") != (temp_owner is not None):
            raise ModelUsageError(
                f"relation {name!r}: a temporary relation (persistence 't') names the backend it "
                f"belongs to (temp_owner = its id) and no other relation does; got persistence "
                f"{persistence!r}, temp_owner {temp_owner!r}"
            )
        if not (0 < relid < (1 << 28)):
            raise ModelUsageError(f"relid {relid} is out of range 1..{(1 << 28) - 1}")
        self.name = name
        self.relid = relid
        self.persistence = persistence
        self.temp_owner = temp_owner
        self.is_catalog = is_catalog
        self.content = content
        self._nblocks = [-1, -1, -1, -1]
        for fork, n in (forks if forks is not None else {ForkNumber.MAIN: 0}).items():
            f = fork_from_name(fork)
            self._check_size(f, n)
            self._nblocks[f] = n
        self._tag_bases = [((relid << 2) | f) << 32 for f in range(4)]
        # Per-tablespace overrides of effective/maintenance_io_concurrency (None = use the GUC).
        self.tablespace_eic: int | None = None
        self.tablespace_mic: int | None = None
        # Heap blocks whose hint bits a scan has set since the relation was built (its content
        # describes the pages as built; see scans.heapscan.HeapScan.prepare_page).
        self.hinted_now: set[int] = set()
        # Heap blocks whose prune hint (pd_prune_xid) on-access pruning has cleared, and those it
        # set all-visible in the VM (PostgreSQL 19 and later: scans.prune.OnAccessPruning).
        self.prune_cleared_now: set[int] = set()
        self.all_visible_now: set[int] = set()

    def _check_size(self, fork: ForkNumber, n: int) -> None:
        if not isinstance(n, int) or n < 0 or n > MaxBlockNumber + 1:
            raise ModelUsageError(
                f"size {n!r} of fork {FORK_NAMES[fork]} of {self.name!r} is invalid: "
                f"allowed 0..{MaxBlockNumber + 1} blocks"
            )

    # ------------------------------------------------------------------------------ sizes
    def exists(self, fork: ForkNumber = ForkNumber.MAIN) -> bool:
        """``smgrexists``."""
        return self._nblocks[fork] >= 0

    def nblocks(self, fork: ForkNumber = ForkNumber.MAIN) -> int:
        """``smgrnblocks``; a fork that does not exist has 0 blocks here."""
        n = self._nblocks[fork]
        return n if n > 0 else 0

    def set_nblocks(self, fork: ForkNumber, n: int) -> None:
        """Create the fork if needed and set its size (a back door for fixtures and tests)."""
        fork = fork_from_name(fork)
        self._check_size(fork, n)
        self._nblocks[fork] = n

    def extend(self, fork: ForkNumber = ForkNumber.MAIN, by: int = 1) -> int:
        """Grow a fork by ``by`` blocks (creating it); returns the first new block number."""
        fork = fork_from_name(fork)
        first = self.nblocks(fork)
        self.set_nblocks(fork, first + by)
        return first

    def truncate(self, fork: ForkNumber, nblocks: int) -> None:
        fork = fork_from_name(fork)
        if nblocks > self.nblocks(fork):
            raise ModelUsageError(
                f"cannot truncate fork {FORK_NAMES[fork]} of {self.name!r} to {nblocks} blocks: "
                f"it has only {self.nblocks(fork)}"
            )
        self.set_nblocks(fork, nblocks)

    def forks(self) -> list[ForkNumber]:
        """Existing forks, in fork-number order."""
        return [ForkNumber(f) for f in range(4) if self._nblocks[f] >= 0]

    # ------------------------------------------------------------------------------ tags
    def tag_base(self, fork: ForkNumber | int = ForkNumber.MAIN) -> int:
        return self._tag_bases[fork]

    def tag(self, fork: ForkNumber, block: int) -> int:
        return self._tag_bases[fork] + block

    @staticmethod
    def split_tag(tag: int) -> tuple[int, int, int]:
        """(relid, fork number, block) of an integer tag (the fork as a plain int, for speed)."""
        rf = tag >> 32
        return rf >> 2, rf & 3, tag & 0xFFFFFFFF

    def page(self, fork: ForkNumber, block: int) -> Any:
        """The content of a page (``None`` when the relation has no content model)."""
        if self.content is None:
            return None
        return self.content.page(fork, block)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{FORK_NAMES[f]}={self._nblocks[f]}" for f in self.forks())
        return f"Relation({self.name!r}, relid={self.relid}, {sizes})"
