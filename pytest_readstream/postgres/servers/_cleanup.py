"""Last-resort cleanup: stop servers and drop scratch databases when the interpreter exits.

Objects the harness creates register a ``close`` callable here. Normal use closes them explicitly
(context managers, pytest fixture finalizers); this registry covers the rest:

* interpreter exit (``atexit``), including after ``KeyboardInterrupt``;
* ``SIGTERM`` and ``SIGHUP`` when nobody else handles them: the handler closes everything, then
  re-delivers the signal with its default action so the exit status still says "killed by signal";
* ``SIGKILL`` cannot be caught: servers the harness starts carry ``PR_SET_PDEATHSIG`` instead
  (see ``_process``), and their remains live under the caller's working directory.

Closing is idempotent and each callable is run at most once, newest first.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__: list[str] = []

_lock = threading.RLock()
_closers: dict[int, Callable[[], None]] = {}
_next_key = 0
_installed = False


def register(closer: Callable[[], None]) -> int:
    """Remember ``closer``; returns a key for :func:`unregister`."""
    global _next_key
    with _lock:
        _install()
        _next_key += 1
        _closers[_next_key] = closer
        return _next_key


def unregister(key: int) -> None:
    with _lock:
        _closers.pop(key, None)


def run_all() -> None:
    """Run every registered closer once, newest first; errors are swallowed (exit path)."""
    with _lock:
        pending = sorted(_closers.items(), reverse=True)
        _closers.clear()
    for _key, closer in pending:
        # The exit path must try every closer, whatever the previous one raised.
        with contextlib.suppress(Exception):
            closer()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    run_all()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(run_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, _on_signal)
        except (ValueError, OSError):
            continue
