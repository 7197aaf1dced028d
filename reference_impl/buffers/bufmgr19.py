"""The buffer manager of PostgreSQL 19 and later (``bufmgr.c``), as it differs from 18's.

:class:`Backend19` is :class:`~reference_impl.buffers.bufmgr.Backend` (PostgreSQL 18) with the
functions 19 changed on the read path; everything not named here is the same in both versions
(``PinBufferForBlock`` and ``BufferAlloc``, ``GetVictimBuffer``, the strategy ring,
``StartReadBuffersImpl``, ``GetAdditionalPinLimit``, ``LimitAdditionalPins``). 20devel's read
path is 19's (its ``bufmgr.c`` differs from 19beta1's in comments, ``LockBufferForCleanup`` and a
check in ``ExtendBufferedRelTo``).

* **Don't wait for already in-progress IO** (``AsyncReadBuffers``). 18 calls
  ``StartBufferIO(head, wait)``: an I/O in progress on the head block, this backend's own or
  another backend's, is waited for inside ``StartReadBuffers``, and the block, now valid, counts
  as a hit there. 19 calls ``StartBufferIO(head, wait, &operation->io_wref)``: it joins that I/O
  (``BUFFER_IO_IN_PROGRESS``), sets ``operation->foreign_io``, and returns true with one block,
  so the stream takes an I/O slot and moves on; ``WaitReadBuffers`` later waits for it and
  counts the block as a hit (``TrackBufferHit``) if it became valid, or reads it itself if that
  I/O failed.
* **What WaitReadBuffers returns** (19 returns ``needed_wait``; 18's returns nothing): true if
  any pass waited for an I/O not yet done (``pgaio_wref_check_done`` false), and true for every
  pass that needed another one (a partial read, a foreign I/O that failed, and under
  ``io_method=sync`` the read itself, done inside ``WaitReadBuffers``). The stream adds
  ``READ_BUFFERS_SYNCHRONOUSLY`` itself (``read_stream_next_buffer``).
* **Private reference counts** reserve the last free array entry
  (:class:`~reference_impl.buffers.refcount.PrivateRefCount19`).
* **Local buffers** (temporary relations) join their own I/O in progress the same way
  (``StartLocalBufferIO`` with a wait reference); the pin limits are 18's.
* **No buffer free list** (:class:`~reference_impl.buffers.pool.BufferPool19`, made by the
  instance).
"""

from __future__ import annotations

from ..io.handle import InflightIO
from .bufmgr import Backend, ReadBuffersOperation
from .localbuf import local_id
from .pool import BM_VALID
from .refcount import PrivateRefCount, PrivateRefCount19

__all__ = ["Backend19"]


class Backend19(Backend):
    """One backend's buffer manager in PostgreSQL 19 and later (see the module docstring)."""

    refcount_class: type[PrivateRefCount] = PrivateRefCount19

    def lock_buffer(self, buf: int) -> None:
        """``LockBuffer`` / ``ConditionalLockBuffer``: 19 keeps the content lock's mode in the
        private reference count entry, so ``BufferLockAcquire`` and ``BufferLockConditional``
        look the entry up with ``GetPrivateRefCountEntry(buffer, true)``, which moves an entry
        that had overflowed into the hash back into the array. That can change
        ``PrivateRefCountOverflowed`` and so ``GetAdditionalPinLimit``. Local buffers have no
        such entry."""
        if buf >= 0:
            refs = self.refs
            assert isinstance(refs, PrivateRefCount19)
            refs.lookup_move(buf)

    def _async_read_buffers(self, op: ReadBuffersOperation) -> tuple[bool, int]:
        """``AsyncReadBuffers`` of PostgreSQL 19: (I/O started or joined, blocks covered)."""
        pool = self.pool
        comps = pool._completions
        if comps and comps[0][0] <= self.clock.now:
            pool.poll()
        head = op.buffers[op.index + op.nblocks_done]
        op.foreign_io = False
        op.ioh = None  # pgaio_wref_clear
        # StartBufferIO(head, forInput=true, wait=true, &operation->io_wref): every I/O of the
        # model has its wait reference, so one in progress is joined, never waited for here.
        ioh = pool.buf_io[head]
        if ioh is not None:
            # BUFFER_IO_IN_PROGRESS: WaitReadBuffers waits for it.
            op.ioh = ioh
            op.foreign_io = True
            return True, 1
        if pool.flags[head] & BM_VALID:
            # BUFFER_IO_ALREADY_DONE: someone completed the block; TrackBufferHit.
            self._count_read_by_another(op)
            return False, 1
        # BUFFER_IO_READY_FOR_IO: the candidates after the head (StartBufferIO without waiting,
        # stopping at a block in progress or valid) and the I/O, as in 18.
        return self._start_read_io(op, head)

    def _async_read_local_buffers(self, op: ReadBuffersOperation) -> tuple[bool, int]:
        """``AsyncReadBuffers`` on local buffers, PostgreSQL 19: ``StartLocalBufferIO(head,
        wait=true, &operation->io_wref)`` joins an I/O in progress on the head (this backend's
        own) instead of waiting for it."""
        pool = self.pool
        comps = pool._completions
        if comps and comps[0][0] <= self.clock.now:
            pool.poll()
        local = self.local_buffers()
        head = local_id(op.buffers[op.index + op.nblocks_done])
        op.foreign_io = False
        op.ioh = None
        ioh = local.buf_io[head]
        if ioh is not None:
            op.ioh = ioh
            op.foreign_io = True
            return True, 1
        if local.flags[head] & BM_VALID:
            op.nblocks_done += 1
            self._track_local_hit(op.relstats)
            return False, 1
        return self._start_local_read_io(op, head)

    def wait_read_buffers(self, op: ReadBuffersOperation) -> bool:
        """``WaitReadBuffers`` of PostgreSQL 19: wait for (or, under ``sync``, perform) the
        operation's reads, raise a read's error, and return ``needed_wait``.

        An I/O is done without waiting when its completion time has come
        (``pgaio_wref_check_done``); the backend's wait counters move only when it really
        waits. A joined I/O (``foreign_io``) is another's: its error is not this backend's, its
        completion costs this backend nothing, and its head block counts as a hit if valid.
        """
        if self._wait_observer is not None and not self._in_observed_wait:
            return self._observed_wait_read_buffers(op)
        pool = self.pool
        clock = self.clock
        st = self.stats
        needed_wait = False
        temporary = op.rel.persistence == "t"
        while True:
            ioh: InflightIO | None = op.ioh
            if ioh is not None:
                if not ioh.done:
                    if ioh.complete_at > clock.now:
                        # Not done yet (pgaio_wref_check_done false): pgaio_wref_wait.
                        t0 = clock.now
                        pool.wait_io(ioh)
                        needed_wait = True
                        st.waits += 1
                        st.wait_us += clock.now - t0
                    else:
                        pool.wait_io(ioh)  # done by now: completed without a wait
                op.ioh = None
                if op.foreign_io:
                    head = op.buffers[op.index + op.nblocks_done]
                    if temporary:
                        if self.local_buffers().flags[local_id(head)] & BM_VALID:
                            op.nblocks_done += 1
                            self._track_local_hit(op.relstats)
                    elif pool.flags[head] & BM_VALID:
                        # Track this as a 'hit' for this backend; the backend performing the
                        # I/O tracks it as a 'read'. A failed foreign I/O leaves the block to
                        # the retry below.
                        self._count_read_by_another(op)
                else:
                    if not ioh.synchronous:
                        self.cpu(self.costs.io_complete_us)
                    # ProcessReadBuffersResult
                    if ioh.error is not None:
                        raise ioh.error
                    op.nblocks_done += ioh.ok_blocks
            if op.nblocks_done >= op.nblocks:
                return needed_wait
            self.check_for_interrupts()
            # If the I/O completed only partially, we need to perform additional work:
            # consider that a form of having had to wait.
            needed_wait = True
            if temporary:
                self._async_read_local_buffers(op)
            else:
                self._async_read_buffers(op)
