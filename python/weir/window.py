"""Group windows of the Table API (PyFlink's ``pyflink.table.window``):
``Tumble.over(lit(10).minutes).on(col("ts")).alias("w")``, ``Slide.over(...)
.every(...)``, ``Session.with_gap(...)``, and weir's ``Cumulate.over(...)
.every(...)``; row-count windows take ``row_interval(n)``."""

from ._weir import Cumulate, Session, Slide, Tumble

__all__ = ["Tumble", "Slide", "Session", "Cumulate"]
