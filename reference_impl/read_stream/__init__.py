"""ReadStream: PostgreSQL's look-ahead reader (``src/backend/storage/aio/read_stream.c``), one
model per version, each written beside its own C file.

* ``pg18.py`` — PostgreSQL 18 (18.6): :class:`ReadStream`;
* ``pg19.py`` — PostgreSQL 19 (19beta1): :class:`ReadStream19` and ``IOStats``;
* ``pg20devel.py`` — the development branch (20devel): :class:`ReadStream20devel`, 19's with
  ``read_stream_clear_strategy``;
* ``_common.py`` — what every version shares unchanged (flags, ``block_range_read_stream_cb``,
  ``read_stream_get_block``, ``read_stream_unget_block``, ``read_stream_next_block``,
  ``read_stream_end``), the model's argument checks, statistics and debug checks, and the seed
  thread's proposed ``read_stream_set_strategy`` (on every version).

:func:`stream_class_for` names the class of a model version (``reference_impl.versions``);
``ReadStreamMaster`` is the newest version's class.
"""

from __future__ import annotations

from ..versions import MASTER, canonical_version
from ._common import (
    PG_INT16_MAX,
    READ_STREAM_DEFAULT,
    READ_STREAM_FULL,
    READ_STREAM_MAINTENANCE,
    READ_STREAM_SEQUENTIAL,
    READ_STREAM_USE_BATCHING,
    BlockRangeReadStreamPrivate,
    Callback,
    ReadStreamBase,
    ReadStreamStats,
    block_range_read_stream_cb,
)
from .pg18 import ReadStream
from .pg19 import IOStats, ReadStream19
from .pg20devel import ReadStream20devel

__all__ = [
    "ReadStream",
    "ReadStream19",
    "ReadStream20devel",
    "ReadStreamMaster",
    "ReadStreamBase",
    "ReadStreamStats",
    "IOStats",
    "StreamIOStats",
    "STREAM_CLASSES",
    "stream_class_for",
    "READ_STREAM_DEFAULT",
    "READ_STREAM_MAINTENANCE",
    "READ_STREAM_SEQUENTIAL",
    "READ_STREAM_FULL",
    "READ_STREAM_USE_BATCHING",
    "PG_INT16_MAX",
    "BlockRangeReadStreamPrivate",
    "block_range_read_stream_cb",
    "Callback",
]

#: ``IOStats`` under the name the model exported before it had 19 (``executor/instrument_node.h``).
StreamIOStats = IOStats

#: The stream class of each model version (``reference_impl.versions.VERSIONS``).
STREAM_CLASSES: dict[str, type[ReadStreamBase]] = {
    "18": ReadStream,
    "19": ReadStream19,
    "20devel": ReadStream20devel,
}

#: The newest version's stream class (``"master"``).
ReadStreamMaster = ReadStream20devel
assert STREAM_CLASSES[MASTER] is ReadStreamMaster


def stream_class_for(version: str) -> type[ReadStreamBase]:
    """The stream class of model ``version`` (``"18"``, ``"19"``, ``"20devel"`` or ``"master"``)."""
    return STREAM_CLASSES[canonical_version(version)]
