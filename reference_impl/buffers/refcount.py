"""A backend's private buffer reference counts, exactly as ``bufmgr.c`` keeps them.

Each backend counts its own pins per buffer, so that the shared pin count changes only on the
first and the last private pin. PostgreSQL keeps these counts in an 8-entry array
(``PrivateRefCountArray``) with an overflow hash table (``PrivateRefCountHash``), and this
detail is observable: ``GetAdditionalPinLimit()`` does not count pins, it *estimates* them as
``PrivateRefCountOverflowed + 8``. The estimate is what caps a stream's reads (a backend holding
no pins at all still gets only ``MaxProportionalPins - 8`` more), and it can exceed the true
count when array entries are freed while others sit in the hash. A faithful model therefore
simulates the array, the hash, the clock that picks which array entry to push out, and the one
reserved entry, as this class does:

* ``reserve()`` — ``ReservePrivateRefCountEntry``: keep a free array slot ready, pushing the
  entry at ``clock % 8`` into the hash when the array is full;
* ``pin(buf)`` — ``PinBuffer``'s bookkeeping: an entry found in the hash is moved back into the
  array (``GetPrivateRefCountEntry(do_move=true)``), a new buffer takes the reserved slot;
* ``unpin(buf)`` — ``UnpinBufferNoOwner``: the last pin frees the entry; a freed array slot
  becomes the reservation (``ForgetPrivateRefCountEntry``);
* ``incr(buf)`` — ``IncrBufferRefCount`` (a tuple slot's extra pin), which also moves a hashed
  entry into the array.
"""

from __future__ import annotations

from ..errors import ModelUsageError

__all__ = ["PrivateRefCount", "REFCOUNT_ARRAY_ENTRIES"]

REFCOUNT_ARRAY_ENTRIES = 8


class PrivateRefCount:
    """``PrivateRefCountArray`` + ``PrivateRefCountHash`` of one backend (``bufmgr.c``)."""

    __slots__ = ("arr_buf", "arr_cnt", "pos", "ovf", "clock", "reserved")

    def __init__(self) -> None:
        self.arr_buf: list[int] = [-1] * REFCOUNT_ARRAY_ENTRIES
        self.arr_cnt: list[int] = [0] * REFCOUNT_ARRAY_ENTRIES
        self.pos: dict[int, int] = {}  # buffer -> array slot
        self.ovf: dict[int, int] = {}  # buffer -> count, for entries in the hash table
        self.clock = 0
        self.reserved = -1  # reserved array slot, or -1

    # --------------------------------------------------------------------------- reservation
    def reserve(self) -> None:
        """``ReservePrivateRefCountEntry``."""
        if self.reserved >= 0:
            return
        arr_buf = self.arr_buf
        if len(self.pos) < REFCOUNT_ARRAY_ENTRIES:
            for i in range(REFCOUNT_ARRAY_ENTRIES):
                if arr_buf[i] < 0:
                    self.reserved = i
                    return
        i = self.clock % REFCOUNT_ARRAY_ENTRIES
        self.clock += 1
        victim = arr_buf[i]
        self.ovf[victim] = self.arr_cnt[i]
        del self.pos[victim]
        arr_buf[i] = -1
        self.arr_cnt[i] = 0
        self.reserved = i

    def _take_reserved(self, buf: int, count: int) -> None:
        i = self.reserved
        if i < 0:
            raise ModelUsageError("private refcount entry used without a reservation")
        self.reserved = -1
        self.arr_buf[i] = buf
        self.arr_cnt[i] = count
        self.pos[buf] = i

    # --------------------------------------------------------------------------- pins
    def pin(self, buf: int) -> bool:
        """Count one more pin of ``buf``; True if it is this backend's first pin of it.

        The caller must have called :meth:`reserve` (``PinBuffer`` asserts the same).
        """
        i = self.pos.get(buf)
        if i is not None:
            self.arr_cnt[i] += 1
            return False
        ovf = self.ovf
        if buf in ovf:
            count = ovf.pop(buf)
            self.reserve()
            self._take_reserved(buf, count + 1)
            return False
        self._take_reserved(buf, 1)
        return True

    def pin_new(self, buf: int) -> None:
        """``PinBuffer_Locked``: a buffer this backend certainly does not pin yet."""
        self._take_reserved(buf, 1)

    def incr(self, buf: int) -> None:
        """``IncrBufferRefCount``: one more pin on a buffer already pinned by this backend."""
        i = self.pos.get(buf)
        if i is not None:
            self.arr_cnt[i] += 1
            return
        ovf = self.ovf
        if buf not in ovf:
            raise ModelUsageError(f"IncrBufferRefCount on buffer {buf} which this backend does not pin")
        count = ovf.pop(buf)
        self.reserve()
        self._take_reserved(buf, count + 1)

    def unpin(self, buf: int) -> bool:
        """Drop one pin of ``buf``; True if that was the last one (shared count must drop)."""
        i = self.pos.get(buf)
        if i is not None:
            c = self.arr_cnt[i] - 1
            self.arr_cnt[i] = c
            if c:
                return False
            self.arr_buf[i] = -1
            del self.pos[buf]
            self.reserved = i
            return True
        ovf = self.ovf
        count = ovf.get(buf)
        if count is None:
            raise ModelUsageError(f"ReleaseBuffer on buffer {buf} which this backend does not pin")
        if count > 1:
            ovf[buf] = count - 1
            return False
        del ovf[buf]
        return True

    # --------------------------------------------------------------------------- queries
    def count(self, buf: int) -> int:
        """``GetPrivateRefCount``."""
        i = self.pos.get(buf)
        if i is not None:
            return self.arr_cnt[i]
        return self.ovf.get(buf, 0)

    @property
    def overflowed(self) -> int:
        """``PrivateRefCountOverflowed``."""
        return len(self.ovf)

    @property
    def estimated_pins(self) -> int:
        """What ``GetAdditionalPinLimit`` assumes this backend holds."""
        return len(self.ovf) + REFCOUNT_ARRAY_ENTRIES

    def distinct(self) -> int:
        """The true number of distinct buffers pinned."""
        return len(self.pos) + len(self.ovf)

    def pinned(self) -> dict[int, int]:
        """Every pinned buffer with its private count (for leak checks and observers)."""
        out = {b: self.arr_cnt[i] for b, i in self.pos.items()}
        out.update(self.ovf)
        return out

    def __repr__(self) -> str:
        return f"PrivateRefCount(array={len(self.pos)}, overflowed={len(self.ovf)}, reserved={self.reserved})"
