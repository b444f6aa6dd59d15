"""Group windows of the Table API (PyFlink's ``pyflink.table.window``):
``Tumble.over(lit(10).minutes).on(col("ts")).alias("w")``, ``Slide.over(...)
.every(...)``, ``Session.with_gap(...)``, and weir's ``Cumulate.over(...)
.every(...)``; row-count windows take ``row_interval(n)``. OVER windows:
``Over.partition_by(col("k")).order_by(col("ts")).preceding(lit(1).hours)
.alias("w")``, for ``table.over_window(w).select(col("v").sum.over(col("w")))``."""

from ._weir import Cumulate, OverWindowBuilder, Session, Slide, Tumble

__all__ = ["Tumble", "Slide", "Session", "Cumulate", "Over"]


class Over:
    """OVER windows (PyFlink's ``Over``): ``partition_by(...)`` (optional),
    ``order_by(time attribute)``, ``preceding(...)`` (``UNBOUNDED_RANGE`` by
    default, ``UNBOUNDED_ROW``, ``lit(n).hours``, ``row_interval(n)``),
    ``following(CURRENT_ROW or CURRENT_RANGE)``, then ``alias("w")``."""

    @staticmethod
    def partition_by(*fields):
        return OverWindowBuilder.partition_by(*fields)

    @staticmethod
    def order_by(field):
        return OverWindowBuilder.partition_by().order_by(field)
