"""Another backend's read in progress on a server table: a second session's read, held.

The model's ``Instance.start_foreign_io`` (``ForeignIO``) marks buffers ``BM_IO_IN_PROGRESS`` for a
backend other than the stream's, completing (or failing) later; a stream that meets them waits
for that I/O instead of starting its own, and reads a block itself only if the other backend's
read failed (PostgreSQL's ``004_read_stream.pl``; ``StartBufferIO``/``WaitIO`` in ``bufmgr.c``).

On a server the harness stages it for real, for a stream test (``remote_stream``) and for a
``ScanRequest``'s ``ForeignIO`` (``implementation``: in progress when the measured statement
begins). A session of its own (the *foreign* backend) begins
a probe stream over the blocks with ``READ_STREAM_FULL``, ``io_combine_limit`` = the number of
blocks and ``effective_io_concurrency`` = 0, and asks for its first buffer: ``StartReadBuffers``
pins the blocks, marks them ``BM_IO_IN_PROGRESS`` and issues one read of all of them, which
``READ_BUFFERS_SYNCHRONOUSLY`` (what ``effective_io_concurrency`` 0 sets) makes that backend
perform itself, so no I/O worker the stream under test needs is taken. The read interposer holds
that ``pg_preadv`` (a ``hang`` rule, or ``hang_eio`` for a read that fails) until the harness lets
it go. The stream is begun only once the rule has fired: the read is then in progress.

The model completes the foreign read at a virtual time; a server has none. The harness releases
it when the stream (or scan) under test is seen waiting for it (its backend waits on an I/O,
``AioIoCompletion`` or ``BufferIo`` in ``pg_stat_activity``, while it pins one of the blocks
beyond the pins held when the read was staged: it pinned the block in ``StartReadBuffers`` and
waits in ``StartBufferIO``), which is what the model's ``004_read_stream.pl`` cases do: their
foreign read outlasts the stream's reads before it. A foreign read the stream never waited for
is let go when the stream's test ends. Everything is polled; nothing sleeps for a set time.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from ..errors import PgHarnessError

__all__ = ["ForeignRead", "ForeignReads"]

T = TypeVar("T")

_READ_STREAM_FULL = 0x04  # read_stream.h
#: Wait events of a backend waiting for an I/O another process performs (wait_event_names.txt:
#: AIO_IO_COMPLETION in pgaio_io_wait, BUFFER_IO in WaitIO), compared in lower case.
_IO_WAITS = ("aioiocompletion", "bufferio")
#: How often the watcher looks (a poll of a condition, not a wait for a set time).
_POLL_S = 0.002
#: Only guards a broken run: a stream call that neither returns nor is seen waiting for the held
#: read within this long gets the read released, and the call then fails with what was seen.
_GUARD_S = 120.0


@dataclass
class ForeignRead:
    """One read of blocks ``first .. first + nblocks - 1`` of ``table`` by the foreign backend,
    held by interposer rule ``rule`` until released (then it succeeds, or fails with ``fails``)."""

    table: str
    oid: int
    first: int
    nblocks: int
    fails: bool
    rule: int
    conn: Any = None
    pid: int = 0  # the foreign backend
    thread: threading.Thread | None = None
    error: BaseException | None = None
    released: bool = False
    baseline: int = 0  # pins on its blocks once staged (the foreign backend's own, others')
    seen_waiting: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class ForeignReads:
    """The foreign backends' held reads for the stream of one test (see the module docstring)."""

    def __init__(self, streams: Any) -> None:
        self._streams = streams
        self._idle: list[Any] = []  # foreign sessions to reuse
        self._monitor: Any = None
        self._generation = -1  # the postmaster they belong to
        self.reads: list[ForeignRead] = []
        self.last: list[ForeignRead] = []  # the reads the last finish() let go (what they saw)

    @property
    def pending(self) -> bool:
        return any(not r.released for r in self.reads)

    # -- staging --------------------------------------------------------------------------
    def stage(self, reads: list[ForeignRead]) -> None:
        """Start each read in its own session and return once every one is held in ``pg_preadv``."""
        impl = self._streams.impl
        injector = impl.server.faults
        self._forget_dead_sessions()
        for read in reads:
            conn = self._idle.pop() if self._idle else self._streams._connect()
            read.conn = conn
            blocks = list(range(read.first, read.first + read.nblocks))
            with impl.server._guard("staging another backend's read"):
                pid_row = conn.execute("SELECT pg_backend_pid()").fetchone()
                read.pid = int(pid_row[0]) if pid_row is not None else 0
                conn.execute("ROLLBACK")
                conn.execute("BEGIN")
                conn.execute("SELECT set_config('io_combine_limit', %s, true)", (str(read.nblocks),))
                conn.execute("SELECT set_config('effective_io_concurrency', '0', true)")
                row = conn.execute(
                    "SELECT rsp_begin(%s, 0, %s, NULL, NULL, false, %s)",
                    (read.oid, _READ_STREAM_FULL, blocks),
                ).fetchone()
            assert row is not None
            stream_id = int(json.loads(row[0])["id"])
            read.thread = threading.Thread(
                target=self._run, args=(read, stream_id), name=f"foreign-read-{read.first}", daemon=True
            )
            self.reads.append(read)
            read.thread.start()
            deadline = time.monotonic() + _GUARD_S
            while injector.fired(read.rule) < 1:
                impl.server.ensure_alive("waiting for another backend's read to start")
                if read.done.is_set():
                    raise PgHarnessError(
                        f"the foreign backend's read of blocks {read.first}..{read.first + read.nblocks - 1} "
                        f"of {read.table} finished without reaching the interposer: {read.error}"
                    )
                if time.monotonic() > deadline:
                    raise PgHarnessError(
                        f"the foreign backend's read of {read.table} did not reach pg_preadv within {_GUARD_S:.0f} s"
                    )
                time.sleep(_POLL_S)
            read.baseline = self._pins(read)

    @staticmethod
    def _run(read: ForeignRead, stream_id: int) -> None:
        try:
            read.conn.execute("SELECT rsp_next(%s, '{}')", (stream_id,)).fetchone()
        except psycopg.Error as err:  # the read that fails: its ERROR aborts that session only
            read.error = err
        except BaseException as err:
            read.error = err
        finally:
            read.done.set()

    # -- the stream's calls -----------------------------------------------------------------
    def watch(self, pid: int, call: Callable[[], T]) -> tuple[T, list[ForeignRead]]:
        """Run ``call`` (a probe call of the stream under test, backend ``pid``) while a watcher
        releases each held read the stream is seen waiting for; returns the call's result and
        the reads released meanwhile, settled (their sessions' calls returned, their pins gone)."""
        if not self.pending:
            return call(), []
        before = [r for r in self.reads if not r.released]
        stop = threading.Event()
        guard_hit: list[ForeignRead] = []
        watcher = threading.Thread(target=self._watch, args=(pid, stop, guard_hit), daemon=True)
        watcher.start()
        try:
            result = call()
        finally:
            stop.set()
            watcher.join()
            if guard_hit:
                r = guard_hit[0]
                raise PgHarnessError(
                    f"the stream's call ran {_GUARD_S:.0f} s without being seen waiting for the foreign "
                    f"read of blocks {r.first}..{r.first + r.nblocks - 1}; the harness released it"
                )
        released = [r for r in before if r.released]
        for read in released:
            self._settle(read)
        return result, released

    def _watch(self, pid: int, stop: threading.Event, guard_hit: list[ForeignRead]) -> None:
        deadline = time.monotonic() + _GUARD_S
        while not stop.is_set():
            held = [r for r in self.reads if not r.released]
            if not held:
                return
            waiting = self._io_wait(pid)
            for read in held:
                if waiting and self._pins(read) > read.baseline:
                    read.seen_waiting = True
                    self._release(read)
            if time.monotonic() > deadline:
                guard_hit.extend(r for r in self.reads if not r.released)
                for read in list(guard_hit):
                    self._release(read)
                return
            stop.wait(_POLL_S)

    def _forget_dead_sessions(self) -> None:
        """Sessions of a postmaster that has since restarted are gone: open new ones."""
        generation = self._streams.impl.server.generation
        if generation == self._generation:
            return
        for conn in [*self._idle, self._monitor]:
            if conn is not None and not conn.closed:
                conn.close()
        self._idle, self._monitor, self._generation = [], None, generation

    def _monitor_conn(self) -> Any:
        if self._monitor is None or self._monitor.closed:
            self._monitor = self._streams._connect()
        return self._monitor

    def _io_wait(self, pid: int) -> bool:
        row = (
            self._monitor_conn()
            .execute("SELECT lower(wait_event) FROM pg_stat_activity WHERE pid = %s", (pid,))
            .fetchone()
        )
        return row is not None and row[0] in _IO_WAITS

    def _pins(self, read: ForeignRead) -> int:
        # The probe reads the shared descriptors: pg_buffercache shows no page that is being read.
        row = (
            self._monitor_conn()
            .execute("SELECT rsp_pins(%s, %s, %s)", (read.oid, read.first, read.first + read.nblocks - 1))
            .fetchone()
        )
        return int(row[0]) if row is not None else 0

    def _release(self, read: ForeignRead) -> None:
        if not read.released:
            # IndexError: the rules were cleared, which let every held request go.
            with contextlib.suppress(IndexError):
                self._streams.impl.server.faults.release(read.rule)
            read.released = True

    # -- the end of the test's stream ----------------------------------------------------------
    def _settle(self, read: ForeignRead) -> None:
        """Wait for a released read's session call to return, and end its transaction (its pins)."""
        server = self._streams.impl.server
        if read.thread is not None:
            while not read.done.wait(_POLL_S):
                server.ensure_alive("waiting for another backend's read to finish")
            read.thread.join()
            read.thread = None
        conn, read.conn = read.conn, None
        if conn is not None and not conn.closed:
            try:
                conn.execute("ROLLBACK")
                self._idle.append(conn)
            except psycopg.Error:
                conn.close()

    def finish(self) -> None:
        """Let every held read go, wait for its session's call to return, and end its transaction."""
        reads, self.reads = self.reads, []
        for read in reads:
            self._release(read)
            self._settle(read)
        if reads:
            self.last = reads

    @property
    def pids(self) -> set[int]:
        """The foreign backends of the reads staged for the current stream."""
        return {r.pid for r in self.reads}

    def close(self) -> None:
        """Close every session (after :meth:`finish`)."""
        self.finish()
        for conn in [*self._idle, self._monitor]:
            if conn is not None and not conn.closed:
                conn.close()
        self._idle, self._monitor = [], None
