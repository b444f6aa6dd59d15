"""Expressions of the Table API (PyFlink's ``pyflink.table.expressions``):
``col("x")``, ``lit(5)``, ``call("UPPER", col("s"))``, ``row_interval(n)``,
``and_``, ``or_``, ``not_``. Python's operators combine them (``&``, ``|``,
``~`` for AND, OR, NOT); ``lit(10).minutes`` is an interval,
``col("p").sum`` an aggregate, ``col("w").start`` a window's start."""

from ._weir import (
    CURRENT_RANGE,
    CURRENT_ROW,
    UNBOUNDED_RANGE,
    UNBOUNDED_ROW,
    Expression,
    and_,
    call,
    col,
    lit,
    not_,
    or_,
    row_interval,
)

__all__ = [
    "Expression",
    "col",
    "lit",
    "call",
    "row_interval",
    "and_",
    "or_",
    "not_",
    "UNBOUNDED_ROW",
    "UNBOUNDED_RANGE",
    "CURRENT_ROW",
    "CURRENT_RANGE",
]
