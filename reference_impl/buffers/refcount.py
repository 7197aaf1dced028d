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
  entry into the array;
* ``pin_new_run(bufs)`` — ``reserve()`` and ``pin_new(buf)`` for each buffer of a read's run of
  victims, in order, producing the same array, hash (with its insertion order) and clock with
  fewer dictionary operations once the array is full.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ModelUsageError

__all__ = ["PrivateRefCount", "PrivateRefCount19", "REFCOUNT_ARRAY_ENTRIES"]

REFCOUNT_ARRAY_ENTRIES = 8
# _ROTATION[s]: the array slots in the order the clock visits them from slot s.
_ROTATION = tuple(
    tuple((s + k) % REFCOUNT_ARRAY_ENTRIES for k in range(REFCOUNT_ARRAY_ENTRIES))
    for s in range(REFCOUNT_ARRAY_ENTRIES)
)
_ONE_EACH = [1] * REFCOUNT_ARRAY_ENTRIES  # the array's counts after a run of new entries


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

    def pin_new_run(self, bufs: Sequence[int]) -> None:
        """``ReservePrivateRefCountEntry`` + ``PinBuffer_Locked`` for each of ``bufs`` in order:
        buffers this backend does not pin yet (a read's victims), each taking a new entry.

        The result is that of ``reserve(); pin_new(b)`` for each ``b``: while the array has
        room the entries are taken one by one, then the rest goes through :meth:`_push_run`.
        """
        if self.reserved < 0 and len(self.pos) >= REFCOUNT_ARRAY_ENTRIES:
            # The array full and nothing reserved (a stream holding more than 8 pins).
            self._push_run(bufs)
            return
        n = len(bufs)
        k = 0
        while k < n and (self.reserved >= 0 or len(self.pos) < REFCOUNT_ARRAY_ENTRIES):
            self.reserve()
            self._take_reserved(bufs[k], 1)
            k += 1
        if k < n:
            self._push_run(bufs[k:] if k else bufs)

    def _push_run(self, bufs: Sequence[int]) -> None:
        """New entries for ``bufs`` with the array full and nothing reserved.

        Each new entry takes the slot under the clock, whose entry moves to the hash
        (``ReservePrivateRefCountEntry``). So the hash receives, in this order, the array's
        entries from slot ``clock % 8`` round (at most ``m``), then every new entry but the last
        8, with count 1; the last 8 (or all, if fewer) end in the array, the ``k``-th new entry
        under slot ``(clock + k) % 8``; ``pos`` lists them in pin order after the array's old
        entries still there. A run of ``m`` pins thus costs ``m`` insertions into the hash and
        at most 8 into ``pos``, instead of ``m`` of each and ``m`` deletions from ``pos``.
        """
        m = len(bufs)
        arr_buf = self.arr_buf
        arr_cnt = self.arr_cnt
        pos = self.pos
        ovf = self.ovf
        s = self.clock % REFCOUNT_ARRAY_ENTRIES
        self.clock += m
        if m < REFCOUNT_ARRAY_ENTRIES:
            for b, slot in zip(bufs, _ROTATION[s]):
                pushed = arr_buf[slot]
                ovf[pushed] = arr_cnt[slot]
                del pos[pushed]
                arr_buf[slot] = b
                arr_cnt[slot] = 1
                pos[b] = slot
            return
        for slot in _ROTATION[s]:
            ovf[arr_buf[slot]] = arr_cnt[slot]
        keep = m - REFCOUNT_ARRAY_ENTRIES
        for b in bufs[:keep]:
            ovf[b] = 1
        pos.clear()
        for b, slot in zip(bufs[keep:], _ROTATION[(s + keep) % REFCOUNT_ARRAY_ENTRIES]):
            arr_buf[slot] = b
            pos[b] = slot
        arr_cnt[:] = _ONE_EACH

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


class PrivateRefCount19(PrivateRefCount):
    """PostgreSQL 19's private reference counts (``bufmgr.c``).

    19 keeps the array's keys apart (``PrivateRefCountArrayKeys``), the hash is a simplehash
    keyed by the buffer (``refcount_hash``), there is a one-entry cache of the last entry found
    (``PrivateRefCountEntryLast``), and a hashed entry moved back into the array leaves the hash
    before the array slot is reserved. None of these changes which entry is where, except one:
    ``ReservePrivateRefCountEntry`` searches the whole array for a free entry instead of
    returning at the first ("iterating till the end of the array allows compiler
    autovectorization"), so the reservation is the *last* free entry. With free entries at
    several places (after unpins) a new pin takes a different slot than in 18, the clock then
    pushes a different entry into the hash, and ``GetAdditionalPinLimit``, which counts the
    hash's entries (``PrivateRefCountOverflowed``), can differ after later unpins.
    """

    __slots__ = ()

    def lookup_move(self, buf: int) -> None:
        """``GetPrivateRefCountEntry(buffer, do_move = true)`` on a pinned buffer: an entry in the
        hash moves back into the array (it leaves the hash first, then a slot is reserved, which
        may push the clock's entry into the hash when the array is full)."""
        ovf = self.ovf
        if buf in self.pos or buf not in ovf:
            return
        count = ovf.pop(buf)
        self.reserve()
        self._take_reserved(buf, count)

    def reserve(self) -> None:
        """``ReservePrivateRefCountEntry`` of PostgreSQL 19."""
        if self.reserved >= 0:
            return
        if len(self.pos) < REFCOUNT_ARRAY_ENTRIES:
            arr_buf = self.arr_buf
            for i in range(REFCOUNT_ARRAY_ENTRIES - 1, -1, -1):
                if arr_buf[i] < 0:
                    self.reserved = i
                    return
        super().reserve()  # the array is full: the clock's entry moves into the hash
