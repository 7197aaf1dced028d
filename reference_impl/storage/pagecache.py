"""The operating system's page cache, with Linux-like sequential read-ahead.

Buffered I/O (``debug_io_direct`` without ``data``) goes through the kernel's page cache, and
that matters for what streaming buys: a one-block-at-a-time reader of a sequential file still
gets large, early device reads because the kernel notices the pattern and reads ahead, and
``posix_fadvise(WILLNEED)`` (the advice ``read_stream.c`` issues under ``io_method=sync``) starts
device reads without blocking. With direct I/O none of that exists, which is why the seed
threads benchmark with ``debug_io_direct=data``.

The model keeps, per cached 8 kB page, the time at which its data is (or will be) in memory,
in an LRU of bounded size. A read:

* waits for pages that are in the cache or already on their way;
* reads the missing ones synchronously from the device as one request;
* when it continues where the previous read of the same file ended (sequential), keeps an
  asynchronous read-ahead window in front of it, starting at ``4 ×`` the request and doubling
  up to ``readahead_kb`` (Linux's ``read_ahead_kb``, 128 kB by default), as the kernel's
  on-demand read-ahead does (``mm/readahead.c``, simplified: one window, no marker page).

``advise`` models ``posix_fadvise(POSIX_FADV_WILLNEED)``: an asynchronous device read of the
pages not already cached.
"""

from __future__ import annotations

from collections import OrderedDict

from ..errors import SettingError
from .device import Device

__all__ = ["PageCache"]


class PageCache:
    """Models the kernel page cache in front of a ``Device`` (Linux ``mm/filemap.c``)."""

    def __init__(self, device: Device, *, capacity_blocks: int = 262144, readahead_kb: int = 128) -> None:
        if not isinstance(capacity_blocks, int) or capacity_blocks < 1:
            raise SettingError(f"page cache capacity_blocks = {capacity_blocks!r} is invalid: allowed >= 1")
        if not isinstance(readahead_kb, int) or not (0 <= readahead_kb <= 1 << 20):
            raise SettingError(
                f"page cache readahead_kb = {readahead_kb!r} is out of range: allowed 0..1048576"
            )
        self.device = device
        self.capacity = capacity_blocks
        self.max_ra = readahead_kb // 8
        self._pages: OrderedDict[int, int] = OrderedDict()  # page key -> ready time
        self._prev_end: dict[int, int] = {}
        self._ra_size: dict[int, int] = {}
        self._ra_end: dict[int, int] = {}
        self.hits = 0
        self.misses = 0
        self.readahead_blocks = 0

    @staticmethod
    def _key(file_key: int, block: int) -> int:
        return (file_key << 32) | block

    def _insert(self, key: int, ready: int) -> None:
        pages = self._pages
        pages[key] = ready
        pages.move_to_end(key)
        if len(pages) > self.capacity:
            pages.popitem(last=False)

    def _fetch_async(self, at_us: int, file_key: int, start: int, n: int, limit: int) -> None:
        """Device-read the uncached pages of [start, start+n) below ``limit`` (read-ahead)."""
        end = min(start + n, limit)
        pages = self._pages
        run_start = -1
        for b in range(start, end + 1):
            cached = b < end and self._key(file_key, b) in pages
            if b < end and not cached:
                if run_start < 0:
                    run_start = b
                continue
            if run_start >= 0:
                count = b - run_start
                done = self.device.read(at_us, file_key, run_start, count)
                for blk in range(run_start, b):
                    self._insert(self._key(file_key, blk), done)
                self.readahead_blocks += count
                run_start = -1

    def read(self, at_us: int, file_key: int, start: int, n: int, file_nblocks: int) -> int:
        """A buffered ``preadv`` of [start, start+n); returns when its data is in memory."""
        pages = self._pages
        ready = at_us
        missing_first = -1
        missing_last = -1
        for b in range(start, start + n):
            key = self._key(file_key, b)
            t = pages.get(key)
            if t is None:
                if missing_first < 0:
                    missing_first = b
                missing_last = b
            else:
                pages.move_to_end(key)
                if t > ready:
                    ready = t
        if missing_first >= 0:
            self.misses += missing_last - missing_first + 1
            done = self.device.read(at_us, file_key, missing_first, missing_last - missing_first + 1)
            for b in range(missing_first, missing_last + 1):
                self._insert(self._key(file_key, b), done)
            if done > ready:
                ready = done
        else:
            self.hits += n
        # On-demand read-ahead for sequential access.
        if self.max_ra > 0:
            end = start + n
            prev = self._prev_end.get(file_key)
            if prev is None or prev == start:
                ra = self._ra_size.get(file_key, 0)
                ra = min(self.max_ra, max(4 * n, 2 * ra) if ra else 4 * n)
                self._ra_size[file_key] = ra
                ra_end = self._ra_end.get(file_key, end)
                if ra_end < end:
                    ra_end = end
                if end + ra > ra_end:
                    self._fetch_async(at_us, file_key, ra_end, end + ra - ra_end, file_nblocks)
                    self._ra_end[file_key] = end + ra
            else:
                self._ra_size[file_key] = 0
                self._ra_end[file_key] = end
            self._prev_end[file_key] = end
        return ready

    def advise(self, at_us: int, file_key: int, start: int, n: int, file_nblocks: int) -> None:
        """``posix_fadvise(WILLNEED)``: start reading the uncached pages, do not wait."""
        self._fetch_async(at_us, file_key, start, n, file_nblocks)

    def write(self, at_us: int, file_key: int, block: int) -> int:
        """A buffered write: the page is in memory at once (write-back is not modelled)."""
        self._insert(self._key(file_key, block), at_us)
        return at_us

    def drop(self, file_key: int) -> None:
        """Forget a file's pages (e.g. ``echo 3 > drop_caches`` for one relation)."""
        lo = file_key << 32
        hi = (file_key + 1) << 32
        for key in [k for k in self._pages if lo <= k < hi]:
            del self._pages[key]
        self._prev_end.pop(file_key, None)
        self._ra_size.pop(file_key, None)
        self._ra_end.pop(file_key, None)

    def clear(self) -> None:
        self._pages.clear()
        self._prev_end.clear()
        self._ra_size.clear()
        self._ra_end.clear()

    def __len__(self) -> int:
        return len(self._pages)
