"""A backend's local buffers: the pages of its temporary relations (``localbuf.c``).

A temporary relation is read through the local buffers of the backend it belongs to, never
through shared buffers: ``temp_buffers`` (``num_temp_buffers``) slots made on first use
(``InitLocalBuffers``), a hash table from tag to slot (``LocalBufHash``), and a clock sweep of
its own (``GetLocalVictimBuffer``: the hand ``nextFreeLocalBufId``, usage counts, no free list,
no strategy ring). Pins are counted per slot (``LocalRefCount``) and in total
(``NLocalPinnedBuffers``), which gives the pin limits a read stream on a temporary relation uses:
``GetLocalPinLimit`` (a quarter of ``temp_buffers``) and ``GetAdditionalLocalPinLimit`` (that
minus the pins held). These functions are the same in PostgreSQL 18, 19 and 20devel.

Buffer numbers: PostgreSQL numbers local buffers ``-(id + 1)`` (shared ones ``id + 1``, 0 is
invalid). The model numbers shared buffers ``id`` with ``INVALID_BUFFER`` = -1, so a local
buffer is ``-(id + 2)``: -2, -3, ... (:func:`local_buffer`, :func:`local_id`); ``buf < -1`` is
``BufferIsLocal``. An I/O on local buffers (:class:`~reference_impl.io.handle.InflightIO` with
``local`` set) lists local ids in ``bufs``.

The read functions that use these buffers (``StartReadBuffers``, ``AsyncReadBuffers``,
``WaitReadBuffers`` on a temporary relation) are the backend's (``bufmgr.Backend``), as in C.
"""

from __future__ import annotations

from ..errors import ChecksumFailure, ModelUsageError, NoEmptyLocalBuffer
from ..io.handle import InflightIO, finish_io
from ..storage.relation import FORK_NAMES
from .pool import BM_DIRTY, BM_IO_ERROR, BM_MAX_USAGE_COUNT, BM_VALID, BM_ZEROED

__all__ = ["LocalBuffers", "local_buffer", "local_id", "buffer_is_local"]


def local_buffer(bufid: int) -> int:
    """The buffer number of local buffer ``bufid`` (``BufferDescriptorGetBuffer``)."""
    return -bufid - 2


def local_id(buffer: int) -> int:
    """The local buffer id of a local buffer number (``-buffer - 1`` in C)."""
    return -buffer - 2


def buffer_is_local(buffer: int) -> bool:
    """``BufferIsLocal``."""
    return buffer < -1


class LocalBuffers:
    """``LocalBufferDescriptors``, ``LocalBufHash``, ``LocalRefCount`` of one backend."""

    def __init__(self, nbuffers: int) -> None:
        # InitLocalBuffers: NLocBuffer = num_temp_buffers.
        self.nbuffers = nbuffers
        self.tag: list[int] = [-1] * nbuffers
        self.flags = bytearray(nbuffers)
        self.usage: list[int] = [0] * nbuffers
        # BUF_STATE_GET_REFCOUNT: one for this backend's pins, one per I/O in progress.
        self.refcount: list[int] = [0] * nbuffers
        self.local_refcount: list[int] = [0] * nbuffers  # LocalRefCount
        self.buf_io: list[InflightIO | None] = [None] * nbuffers
        self.mapping: dict[int, int] = {}
        self.next_free = 0  # nextFreeLocalBufId
        self.n_pinned = 0  # NLocalPinnedBuffers

    # ------------------------------------------------------------------------------ pins
    def pin(self, bufid: int, adjust_usagecount: bool) -> bool:
        """``PinLocalBuffer``: True if the buffer is valid."""
        if self.local_refcount[bufid] == 0:
            self.n_pinned += 1
            self.refcount[bufid] += 1
            if adjust_usagecount and self.usage[bufid] < BM_MAX_USAGE_COUNT:
                self.usage[bufid] += 1
        self.local_refcount[bufid] += 1
        return bool(self.flags[bufid] & BM_VALID)

    def unpin(self, bufid: int) -> None:
        """``UnpinLocalBufferNoOwner``."""
        if self.local_refcount[bufid] <= 0:
            raise ModelUsageError(f"ReleaseBuffer on local buffer {local_buffer(bufid)} which is not pinned")
        self.local_refcount[bufid] -= 1
        if self.local_refcount[bufid] == 0:
            self.n_pinned -= 1
            self.refcount[bufid] -= 1

    def pinned(self) -> dict[int, int]:
        """Every pinned local buffer (by buffer number) with its pin count."""
        return {local_buffer(i): c for i, c in enumerate(self.local_refcount) if c}

    # ------------------------------------------------------------------------------ victims
    def get_victim(self) -> int:
        """``GetLocalVictimBuffer``'s clock sweep: a slot nobody pins, pinned now (the caller
        writes it if dirty and invalidates it)."""
        trycounter = self.nbuffers
        while True:
            victim = self.next_free
            self.next_free += 1
            if self.next_free >= self.nbuffers:
                self.next_free = 0
            if self.local_refcount[victim] == 0:
                if self.usage[victim] > 0:
                    self.usage[victim] -= 1
                    trycounter = self.nbuffers
                elif self.refcount[victim] > 0:
                    # An I/O this backend started still holds the buffer.
                    pass
                else:
                    self.pin(victim, False)
                    return victim
            else:
                trycounter -= 1
                if trycounter == 0:
                    raise NoEmptyLocalBuffer()

    def invalidate(self, bufid: int) -> None:
        """``InvalidateLocalBuffer`` (the caller waited for any I/O on it)."""
        t = self.tag[bufid]
        if t >= 0:
            del self.mapping[t]
        self.tag[bufid] = -1
        self.flags[bufid] = 0
        self.usage[bufid] = 0

    # ------------------------------------------------------------------------------ pin limits
    @staticmethod
    def get_local_pin_limit(temp_buffers: int) -> int:
        """``GetLocalPinLimit``: every backend has its own temporary buffers, but leave headroom
        for concurrent pin-holders such as several scans in one query."""
        return temp_buffers // 4

    def get_additional_local_pin_limit(self, temp_buffers: int) -> int:
        """``GetAdditionalLocalPinLimit``."""
        total = self.get_local_pin_limit(temp_buffers)
        if self.n_pinned >= total:
            return 0
        return total - self.n_pinned

    def limit_additional_local_pins(self, n: int, temp_buffers: int) -> int:
        """``LimitAdditionalLocalPins``: up to ``NLocBuffer`` pins in all."""
        if n <= 1:
            return n
        return min(n, temp_buffers - self.n_pinned)

    # ------------------------------------------------------------------------------ I/O
    def start_io_nowait(self, bufid: int) -> bool:
        """``StartLocalBufferIO(buf, forInput=true, nowait)`` for a candidate after the head:
        True if I/O can start on it (no I/O in progress, not valid)."""
        return self.buf_io[bufid] is None and not self.flags[bufid] & BM_VALID

    def register_io(self, ioh: InflightIO) -> None:
        """``buffer_stage_common`` for local buffers: I/O in progress, and the I/O's pin."""
        for b in ioh.bufs:
            self.buf_io[b] = ioh
            self.refcount[b] += 1

    def complete_io(self, ioh: InflightIO) -> None:
        """``buffer_readv_complete_one`` for local buffers (``TerminateLocalBufferIO``): valid,
        zeroed or in error, and the I/O's pin dropped."""
        out = ioh.outcome
        if out is None:
            raise ModelUsageError(f"{ioh!r} completed before it was issued")
        ok = out.ok_blocks
        corrupt = out.corrupt
        error = out.error
        flags = self.flags
        for i, b in enumerate(ioh.bufs):
            self.buf_io[b] = None
            self.refcount[b] -= 1
            if i < ok:
                if corrupt and (ioh.start + i) in corrupt:
                    if ioh.zero_on_error:
                        flags[b] = (flags[b] | BM_VALID | BM_ZEROED) & ~BM_IO_ERROR
                    elif ioh.ignore_checksum:
                        flags[b] = (flags[b] | BM_VALID) & ~BM_IO_ERROR
                    else:
                        flags[b] = (flags[b] & ~BM_VALID) | BM_IO_ERROR
                        if error is None:
                            error = ChecksumFailure(ioh.rel.name, FORK_NAMES[ioh.fork], ioh.start + i)
                else:
                    flags[b] = (flags[b] | BM_VALID) & ~BM_IO_ERROR
            elif error is not None:
                flags[b] = (flags[b] & ~BM_VALID) | BM_IO_ERROR
        finish_io(ioh, ok, error)

    def is_dirty(self, bufid: int) -> bool:
        return bool(self.flags[bufid] & BM_DIRTY)

    def resident_blocks(self, base: int) -> set[int]:
        """Valid pages of one relation fork (tag base ``base``)."""
        return {
            t - base
            for t, b in self.mapping.items()
            if base <= t < base + (1 << 32) and self.flags[b] & BM_VALID
        }

    def __repr__(self) -> str:
        return f"LocalBuffers({self.nbuffers}, mapped={len(self.mapping)}, pinned={self.n_pinned})"
