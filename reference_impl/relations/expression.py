"""Index key expressions: ``CREATE INDEX ... ((id % 100))`` and the values it indexes.

An index on an expression stores, for every heap tuple, the expression's value computed from the
tuple's columns (``FormIndexDatum``), and orders its entries by those values (a btree sorts equal
values by heap TID, ``nbtsort.c``) or hashes them (``_hash_doinsert``). The synthetic tables have
one integer column, ``id`` (the tuple's key), so the expressions offered are the ``int4``
operators ``int4mod``, ``int4div``, ``int4mul``, ``int4pl`` of ``id`` and a constant:

=================  ===============  ============================================
spec               SQL              values for ``id`` in 0 .. T − 1
=================  ===============  ============================================
``("mod", m)``     ``(id % m)``     ``m`` distinct values (C remainder: the sign of ``id``)
``("div", d)``     ``(id / d)``     ``d`` consecutive ids share a value (truncated toward 0)
``("mul", k)``     ``(id * k)``     one value per id (``k = -1``: the reverse order)
``("add", c)``     ``(id + c)``     one value per id
=================  ===============  ============================================

``evaluate`` follows ``int4mod``/``int4div`` (``utils/adt/int.c``: C division, which truncates
toward zero) on numpy arrays; a result outside ``int4`` is an error, as the server's
"integer out of range" is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import SettingError

__all__ = ["EXPRESSION_OPS", "check_expression", "evaluate", "expression_sql"]

#: operator name → SQL operator of ``int4``
EXPRESSION_OPS = {"mod": "%", "div": "/", "mul": "*", "add": "+"}
_INT4_MIN = -(1 << 31)
_INT4_MAX = (1 << 31) - 1
_COLUMN = "id"


def check_expression(owner: str, value: Any) -> None:
    """Raise ``SettingError`` unless ``value`` is ``(op, constant)`` with a known ``op``."""
    allowed = ", ".join(f'("{op}", n)' for op in EXPRESSION_OPS)
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or value[0] not in EXPRESSION_OPS
        or not isinstance(value[1], int)
        or isinstance(value[1], bool)
    ):
        raise SettingError(
            f"{owner}.expression = {value!r} is invalid: allowed {allowed} (an int4 operator "
            f"applied to the key column {_COLUMN}: (id % n), (id / n), (id * n), (id + n)), or None"
        )
    op, n = value
    if not _INT4_MIN <= n <= _INT4_MAX:
        raise SettingError(
            f"{owner}.expression = {value!r}: the constant must be an int4 ({_INT4_MIN}..{_INT4_MAX})"
        )
    if op in ("mod", "div") and n == 0:
        raise SettingError(f"{owner}.expression = {value!r} divides by zero: allowed a non-zero constant")


def expression_sql(value: tuple[str, int], column: str = _COLUMN) -> str:
    """The parenthesised SQL of the expression, as ``CREATE INDEX`` takes it: ``(id % 100)``."""
    op, n = value
    return f"({column} {EXPRESSION_OPS[op]} {n})"


def evaluate(value: tuple[str, int], ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The expression's value for each ``id`` (int4 arithmetic; out of range raises)."""
    op, n = value
    a = np.asarray(ids, dtype=np.int64)
    if op in ("mod", "div"):
        # C division truncates toward zero; the remainder takes the dividend's sign.
        q = np.abs(a) // abs(n) * np.sign(a) * (1 if n > 0 else -1)
        out = q if op == "div" else a - q * n
    elif op == "mul":
        out = a * n
    else:
        out = a + n
    if out.size and (int(out.min()) < _INT4_MIN or int(out.max()) > _INT4_MAX):
        raise SettingError(
            f"IndexSpec.expression {expression_sql(value)} is out of range for ids up to "
            f"{int(a.max())}: the values must fit int4, as the server's 'integer out of range' says"
        )
    return out.astype(np.int64)
