"""Every scan type, streamed and unstreamed, registered by name.

Each module of this package registers its scans with ``base.register_scan`` when imported; this
package imports them all, so ``SCANS`` lists every scan and ``run_scan(name, ...)`` runs any of
them. New scan modules need no registration anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import (
    SCANS,
    VARIANTS,
    ScanContext,
    ScanParam,
    ScanResult,
    ScanSpec,
    native_variant,
    register_scan,
    run_scan,
    scan_names,
)

__all__ = [
    "SCANS",
    "VARIANTS",
    "ScanContext",
    "ScanParam",
    "ScanResult",
    "ScanSpec",
    "native_variant",
    "register_scan",
    "run_scan",
    "scan_names",
]

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_") and _mod != "base":
        importlib.import_module(f"{__name__}.{_mod}")
