"""Helpers of the pin fast-path tests (``test_pin_slices``, ``test_ring_runs``): pools set up in a
given state, random ones, their whole state to compare, a run with planted bugs patched in (a
method compiled from its source with one slip)."""

from __future__ import annotations
import __future__

import inspect
import textwrap
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st

from reference_impl import ForkNumber, Instance, Settings
from reference_impl.buffers.bufmgr import Backend
from reference_impl.buffers.pool import BM_DIRTY, BM_IO_ERROR, BM_VALID, BM_ZEROED
from reference_impl.buffers.refcount import PrivateRefCount


def refcount_state(refs: PrivateRefCount) -> tuple[object, ...]:
    """Everything observable of the private counts, dict insertion orders included."""
    return (
        list(refs.arr_buf),
        list(refs.arr_cnt),
        list(refs.pos.items()),
        list(refs.ovf.items()),
        refs.clock,
        refs.reserved,
    )


def pool_state(inst: Instance, be: Backend) -> dict[str, Any]:
    """The pool's per-buffer arrays, mapping (in order), free list, clock, ``be``'s private
    counts and statistics, and the time."""
    pool = inst.pool
    return {
        "tag": list(pool.tag),
        "flags": bytes(pool.flags),
        "usage": list(pool.usage),
        "refcount": list(pool.refcount),
        "mapping": list(pool.mapping.items()),
        "freelist": list(pool.freelist),
        "in_freelist": bytes(pool.in_freelist),
        "clock": (pool.next_victim, pool.complete_passes, pool.num_allocs),
        "refs": refcount_state(be.refs),
        "stats": asdict(be.stats),
        "now": (inst.clock.now, be._cpu_debt),
    }


# A buffer: (block it holds or None, usage, pinned by another backend, flags).
_Buf = tuple[int | None, int, bool, int]


def _setup_pool(
    nbuffers: int,
    bufs: list[_Buf],
    order: list[int],
    freelist: list[int],
    hand: int,
    run_start: int,
) -> tuple[Instance, Backend, int]:
    """An instance whose pool is in the given state; returns it, a backend and the run's tag.

    ``order`` lists the buffers holding blocks in the mapping table's order; a block held twice
    is kept by its first buffer only, and the run's first block is never in the pool (the
    caller of _alloc_unmapped_run has checked that).
    """
    inst = Instance(Settings(shared_buffers=nbuffers))
    pool = inst.pool
    rel = inst.create_relation("t", 1000)
    be = inst.backend()
    base = rel.tag(ForkNumber.MAIN, 0)
    seen: set[int] = set()
    for b in order:
        block = bufs[b][0]
        if block is None or block in seen or block == run_start:
            continue
        seen.add(block)
        pool.mapping[base + block] = b
        pool.tag[b] = base + block
    for b, (_, usage, pinned, flags) in enumerate(bufs):
        pool.usage[b] = usage
        pool.refcount[b] = int(pinned)
        # A buffer holding no block has no page: no flags (as invalidate_buffer leaves it).
        pool.flags[b] = flags if pool.tag[b] >= 0 else 0
    pool.freelist = deque(freelist)
    pool.in_freelist = bytearray(nbuffers)
    for b in freelist:
        pool.in_freelist[b] = 1
    pool.next_victim = hand
    return inst, be, base + run_start


def _buf(block: int | None, usage: int = 0, pinned: bool = False, flags: int = BM_VALID) -> _Buf:
    return (block, usage, pinned, flags)


def _clean_pool(nbuffers: int, first_block: int = 500) -> list[_Buf]:
    """Every buffer holds a valid page (blocks from ``first_block``), unpinned, unused, clean."""
    return [_buf(first_block + b) for b in range(nbuffers)]


def _with(bufs: list[_Buf], **changes: _Buf) -> list[_Buf]:
    out = list(bufs)
    for key, value in changes.items():
        out[int(key.lstrip("b"))] = value
    return out


_flag_values = st.sampled_from(
    [BM_VALID] * 6 + [0, 0, BM_VALID | BM_DIRTY, BM_DIRTY, BM_VALID | BM_ZEROED, BM_IO_ERROR]
)


@st.composite
def _pools(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(16, 64))
    # Mostly the usual victim (unpinned, unused, valid), so that runs of them occur.
    usual = st.tuples(st.integers(0, 300), st.just(0), st.just(False), st.just(BM_VALID))
    other = st.tuples(
        st.one_of(st.none(), st.integers(0, 300)),
        st.sampled_from([0, 0, 1, 2, 5]),
        st.sampled_from([False, False, False, True]),
        _flag_values,
    )
    bufs = draw(st.lists(st.one_of(usual, usual, usual, other), min_size=n, max_size=n))
    # A stretch of usual victims (a scan's wake), often where the hand or the free list is.
    lo = draw(st.integers(0, n - 1))
    for b in range(lo, min(n, lo + draw(st.integers(0, 40)))):
        bufs[b] = (bufs[b][0] if bufs[b][0] is not None else 301 + b, 0, False, BM_VALID)
    order = draw(st.permutations(range(n)))
    kind = draw(st.sampled_from(["empty", "empty", "consecutive", "any"]))
    if kind == "empty":
        freelist: list[int] = []
    elif kind == "consecutive":
        head = draw(st.one_of(st.just(lo), st.integers(0, n - 1)))
        freelist = list(range(head, draw(st.integers(head + 1, n))))
        extra = draw(st.lists(st.integers(0, n - 1), max_size=5, unique=True))
        freelist += [b for b in extra if b not in freelist]
    else:
        freelist = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20, unique=True))
    return {
        "nbuffers": n,
        "bufs": bufs,
        "order": order,
        "freelist": freelist,
        "hand": draw(st.one_of(st.just(lo), st.integers(0, n - 1), st.integers(max(0, n - 20), n - 1))),
        "start": draw(st.integers(0, 300)),
        "n": draw(st.integers(1, 40)),
    }


@contextmanager
def switched_off(method: str, result: tuple[int, ...]) -> Iterator[None]:
    """``Backend.<method>`` (a fast path) replaced by one that always declines with ``result``:
    the general loop then does every block."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Backend, method, lambda *args: result)
        yield


class MethodSpy:
    """Adds ``count(result)`` to :attr:`taken` at each call of ``Backend.<method>`` (wrapped in
    place by ``mp``)."""

    def __init__(self, mp: pytest.MonkeyPatch, method: str, count: Callable[[Any], int]) -> None:
        self.taken = 0
        real = getattr(Backend, method)

        def spy(*args: Any) -> Any:
            result = real(*args)
            self.taken += count(result)
            return result

        mp.setattr(Backend, method, spy)


_T = TypeVar("_T")
_S = TypeVar("_S")


def run_patched(
    run: Callable[[], _T], patches: dict[str, Callable[..., Any]], spy: Callable[[pytest.MonkeyPatch], _S]
) -> tuple[_T | Exception, _S]:
    """``run()`` with ``patches`` set on ``Backend`` and ``spy(mp)`` watching the fast path:
    (its result, or the exception a planted bug raised; the spy)."""
    with pytest.MonkeyPatch.context() as mp:
        for attr, value in patches.items():
            mp.setattr(Backend, attr, value)
        watcher = spy(mp)
        try:
            return run(), watcher
        except Exception as exc:  # a planted bug may crash
            return exc, watcher


def _mutant(cls: type, name: str, old: str, new: str) -> Callable[..., Any]:
    """``cls.name`` compiled from its source with ``old`` replaced by ``new`` (once)."""
    src = textwrap.dedent(inspect.getsource(getattr(cls, name)))
    assert src.count(old) >= 1, f"planted bug {old!r} no longer applies to {name}: update the test"
    module = inspect.getmodule(cls)
    code = compile(
        src.replace(old, new, 1),
        f"<mutant of {name}>",
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    namespace: dict[str, Any] = dict(vars(module))
    exec(code, namespace)
    return namespace[name]  # type: ignore[no-any-return]
