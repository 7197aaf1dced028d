"""The reference model as an implementation under test (``--readstream-impl=reference``).

Kept apart from :mod:`pytest_readstream.implementations` (the loader) so that the mutants, which
subclass it, and the loader, which finds the mutants, do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .protocol import ScanOutcome, ScanRequest

__all__ = ["ReferenceImplementation"]

_CAPABILITIES = frozenset(
    {
        "stream-api",
        "set-strategy",
        "per-buffer-data",
        "introspection",
        "scans",
        "fault-injection",
        "virtual-time",
    }
)


class ReferenceImplementation:
    """The reference model as an implementation: ``read_stream.c`` via ``reference_impl.begin_stream``.

    Streams are the model's ``ReadStream`` (PostgreSQL 18), ``ReadStream19`` or
    ``ReadStream20devel`` depending on the settings' ``version``; only 19 and later have
    ``pause``/``resume``, so ``pause-resume`` is a capability of those settings alone
    (:meth:`capabilities_for`). Scans run through the model's scan registry
    (``reference_impl.scans``).
    """

    name = "reference"
    capabilities: frozenset[str] = _CAPABILITIES

    def capabilities_for(self, settings: Any) -> frozenset[str]:
        """The capabilities under ``settings``: ``pause-resume`` from version 19 on."""
        if settings is not None and getattr(settings, "version", "18") != "18":
            return self.capabilities | {"pause-resume"}
        return self.capabilities

    def begin_stream(
        self,
        backend: Any,
        rel: Any,
        callback: Callable[[Any, Any], Any],
        private: Any = None,
        *,
        fork: Any = None,
        flags: int = 0,
        strategy: Any = None,
        per_buffer_data: bool = False,
    ) -> Any:
        """``read_stream_begin_relation`` over the harness's buffer manager ``backend``."""
        import reference_impl

        return reference_impl.begin_stream(
            backend,
            rel,
            callback,
            private,
            fork=reference_impl.ForkNumber.MAIN if fork is None else fork,
            flags=flags,
            strategy=strategy,
            per_buffer_data=per_buffer_data,
        )

    def scan_variants(self, scan: str) -> tuple[str, ...]:
        """The variants the model has of ``scan`` (``streamed``, ``unstreamed``)."""
        from ._reference_scans import scan_variants

        return scan_variants(scan)

    def run_scan(self, request: ScanRequest) -> ScanOutcome:
        """Run one scan on a fresh simulated instance built from ``request``."""
        from ._reference_scans import run_scan

        return run_scan(request)

    def __repr__(self) -> str:
        return "ReferenceImplementation()"
