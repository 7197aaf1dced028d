"""What the pin fast-path tests compare: the whole shared pool and a backend's private counts."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from reference_impl import Instance
from reference_impl.buffers.bufmgr import Backend
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
