"""Simulated storage: relations and forks, 1 GiB segments, latency devices, page cache, faults."""

from .device import DEVICE_PROFILES, Device, DeviceProfile, device_profile
from .faults import FAULT_KINDS, CancelAt, Fault, FaultPlan, ForeignIO
from .pagecache import PageCache
from .relation import (
    BLCKSZ,
    FORK_NAMES,
    RELSEG_SIZE,
    ForkNumber,
    InvalidBlockNumber,
    PageContent,
    Relation,
    fork_from_name,
    md_max_combine,
)
from .smgr import ReadOutcome, Storage

__all__ = [
    "BLCKSZ",
    "RELSEG_SIZE",
    "InvalidBlockNumber",
    "ForkNumber",
    "FORK_NAMES",
    "fork_from_name",
    "md_max_combine",
    "Relation",
    "PageContent",
    "Device",
    "DeviceProfile",
    "DEVICE_PROFILES",
    "device_profile",
    "PageCache",
    "Fault",
    "ForeignIO",
    "CancelAt",
    "FaultPlan",
    "FAULT_KINDS",
    "Storage",
    "ReadOutcome",
]
