"""``read_stream.c`` of the development branch (20devel, checked against master at f20c4278).

Its ``read_stream.c`` is 19's with one function more, ``read_stream_clear_strategy`` (which
18.6 also has and 19beta1 lacks; VACUUM's failsafe calls it), placed before
``read_stream_reset``. So the model is :class:`~reference_impl.read_stream.pg19.ReadStream19`
with that function.
"""

from __future__ import annotations

from .pg19 import ReadStream19

__all__ = ["ReadStream20devel"]


class ReadStream20devel(ReadStream19):
    """The development branch's ``ReadStream`` (20devel): 19's, with ``read_stream_clear_strategy``."""

    version = "20devel"

    def clear_strategy(self) -> None:
        """``read_stream_clear_strategy``: stop using a buffer access strategy for reads from
        this stream, for all of its ReadBuffersOperations including those with I/Os in progress
        (VACUUM's failsafe). The pin cap is unchanged; the caller frees the strategy."""
        self._check_not_ended("clear_strategy")
        for op in self.ios:
            op.set_strategy(None)
        self.strategy = None  # model: what set_strategy and next_block read
