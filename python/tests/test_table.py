"""The Table API from Python: each query gives the rows of the same query in SQL, windows, joins, TopN, Python functions on expressions, and errors that name the operation."""

import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import weir
from weir.expressions import CURRENT_ROW, UNBOUNDED_RANGE, and_, call, col, lit, row_interval
from weir.window import Cumulate, Over, Session, Slide, Tumble

SEQ = """CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 100, 3),
    auction AS id % 7, price AS id * 13 % 101, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence',
        'fields.id.start' = '0', 'fields.id.end' = '999')"""

AUCTIONS = """CREATE TABLE auctions (aid BIGINT, name AS CONCAT('item-', CAST(aid AS STRING)))
  WITH ('connector' = 'datagen', 'fields.aid.kind' = 'sequence',
        'fields.aid.start' = '0', 'fields.aid.end' = '4')"""


def engine():
    e = weir.Engine()
    e.execute_sql(SEQ)
    e.execute_sql(AUCTIONS)
    return e


def rows(table):
    """A pyarrow table's rows as sorted tuples (the order of a parallel job is not fixed)."""
    return sorted(zip(*(c.to_pylist() for c in table.columns)))


def same(table_api, sql):
    got, want = table_api.execute().to_arrow(), sql.to_arrow()
    assert got.schema.names == want.schema.names
    assert rows(got) == rows(want)
    assert len(got) > 0
    return got


def test_select_and_filter_give_the_rows_of_the_same_sql_query():
    e = engine()
    table = (
        e.from_path("seq")
        .filter((col("price") > 50) & ~(col("auction") == 3))
        .select(col("id"), (col("price") * 2 + 1).alias("p"), col("auction") % 2)
    )
    assert table.schema.names == ["id", "p", "EXPR$2"]
    same(table, e.execute_sql("SELECT id, price * 2 + 1 AS p, auction % 2 FROM seq WHERE price > 50 AND NOT auction = 3"))


def test_a_grouped_aggregate_gives_the_final_rows_of_sql_group_by():
    e = engine()
    table = e.from_path("seq").group_by(col("auction")).select(
        col("auction"), col("price").sum.alias("total"), col("price").max, col("id").count.alias("n")
    )
    got = same(
        table,
        e.execute_sql("SELECT auction, SUM(price) AS total, MAX(price), COUNT(id) AS n FROM seq GROUP BY auction"),
    )
    assert pc.sum(got["n"]).as_py() == 1000


def test_a_tumbling_window_groups_rows_as_sql_tumble_does():
    e = engine()
    table = (
        e.from_path("seq")
        .window(Tumble.over(lit(10).seconds).on(col("ts")).alias("w"))
        .group_by(col("w"), col("auction"))
        .select(col("auction"), col("w").start.alias("ws"), col("w").end.alias("we"), col("price").sum.alias("s"))
    )
    got = same(
        table,
        e.execute_sql(
            "SELECT auction, window_start AS ws, window_end AS we, SUM(price) AS s "
            "FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
            "GROUP BY auction, window_start, window_end"
        ),
    )
    # 1000 rows 100 ms apart: ten windows of 10 s, each with all 7 auctions.
    assert len(got) == 70


def test_sliding_session_and_cumulating_windows_plan_and_count_every_row():
    e = engine()
    windows = {
        "slide": Slide.over(lit(10).seconds).every(lit(5).seconds),
        "session": Session.with_gap(lit(1).seconds),
        "cumulate": Cumulate.over(lit(10).seconds).every(lit(5).seconds),
    }
    counts = {}
    for kind, window in windows.items():
        table = (
            e.from_path("seq")
            .window(window.on(col("ts")).alias("w"))
            .group_by(col("w"), col("auction"))
            .select(col("auction"), col("w").end.alias("we"), col("id").count.alias("n"))
        )
        counts[kind] = pc.sum(table.execute().to_arrow()["n"]).as_py()
    # A sliding window of twice its slide holds each row twice; sessions
    # hold each row once; a cumulating window of two steps holds the rows
    # of its first step twice ([0, 5) and [0, 10)) and the others once.
    assert counts == {"slide": 2000, "session": 1000, "cumulate": 1500}


def test_a_row_count_window_is_on_processing_time_and_a_wrong_time_attribute_is_named():
    e = engine()
    e.execute_sql(
        "CREATE TABLE clicks (id BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen', "
        "'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '499')"
    )
    table = (
        e.from_path("clicks")
        .add_columns((col("id") % 5).alias("k"))
        .window(Tumble.over(row_interval(10)).on(col("pt")).alias("w"))
        .group_by(col("w"), col("k"))
        .select(col("k"), col("id").count.alias("n"))
    )
    got = table.execute().to_arrow()
    # 100 rows per key: ten full windows of ten rows each.
    assert len(got) == 50 and set(got["n"].to_pylist()) == {10}
    with pytest.raises(weir.WeirError, match="event-time attribute"):
        e.from_path("seq").window(Tumble.over(row_interval(10)).on(col("ts")).alias("w")).group_by(col("w")).select(
            col("id").count
        )


def test_over_windows_give_the_rows_of_sql_over():
    e = engine()
    seq = e.from_path("seq")
    cases = [
        (
            Over.partition_by(col("auction")).order_by(col("ts")).preceding(lit(1).seconds).alias("w"),
            "PARTITION BY auction ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW",
        ),
        (
            Over.partition_by(col("auction")).order_by(col("ts")).preceding(row_interval(2)).following(CURRENT_ROW).alias("w"),
            "PARTITION BY auction ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
        ),
        (
            Over.order_by(col("ts")).preceding(UNBOUNDED_RANGE).alias("w"),
            "ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        ),
    ]
    for window, sql in cases:
        table = seq.over_window(window).select(
            col("id"), col("price").sum.over(col("w")).alias("s"), (col("price").max.over(col("w")) + 1).alias("m")
        )
        same(table, e.execute_sql(f"SELECT id, SUM(price) OVER ({sql}) AS s, MAX(price) OVER ({sql}) + 1 AS m FROM seq"))
    with pytest.raises(TypeError, match="no over window named 'v'"):
        seq.over_window(cases[0][0]).select(col("price").sum.over(col("v")))
    with pytest.raises(ValueError, match="order_by"):
        Over.partition_by(col("auction")).alias("w")


def test_joins_give_the_rows_of_sql_joins():
    e = engine()
    bids = e.from_path("seq").filter(col("auction") < 6)
    auctions = e.from_path("auctions")
    inner = bids.join(auctions, col("auction") == col("aid")).select(col("id"), col("name"))
    same(inner, e.execute_sql("SELECT id, name FROM seq JOIN auctions ON auction = aid WHERE auction < 6"))
    left = bids.left_outer_join(auctions, col("auction") == col("aid")).select(col("id"), col("name"))
    got = left.execute().to_arrow()
    assert len(got) == len(bids.execute().to_arrow())
    assert got["name"].null_count > 0, "auction 5 has no row in auctions"


def test_order_by_and_fetch_are_a_top_n():
    e = engine()
    top = e.from_path("seq").order_by(col("price").desc, col("id")).fetch(3).select(col("id"), col("price"))
    got = top.execute().to_arrow()
    want = e.execute_sql(
        "SELECT id, price FROM (SELECT id, price, ROW_NUMBER() OVER (ORDER BY price DESC, id) AS r FROM seq) WHERE r <= 3"
    ).to_arrow()
    assert rows(got) == rows(want) and len(got) == 3
    skipped = e.from_path("seq").order_by(col("price").desc, col("id")).offset(1).fetch(2).select(col("id"))
    assert sorted(skipped.execute().to_arrow()["id"].to_pylist()) == sorted(got["id"].to_pylist()[1:])
    with pytest.raises(ValueError, match="fetch"):
        e.from_path("seq").order_by(col("id")).offset(1).execute()


def test_columns_are_added_replaced_renamed_and_dropped():
    e = engine()
    table = (
        e.from_path("auctions")
        .add_columns((col("aid") * 10).alias("big"))
        .add_or_replace_columns(call("UPPER", col("name")).alias("name"))
        .rename_columns(col("big").alias("tens"))
        .drop_columns(col("aid"))
    )
    assert table.schema.names == ["name", "tens"]
    got = table.execute().to_arrow()
    assert sorted(got["name"].to_pylist()) == [f"ITEM-{i}" for i in range(5)]
    assert sorted(got["tens"].to_pylist()) == [0, 10, 20, 30, 40]
    assert e.from_path("auctions").alias("a", "n").schema.names == ["a", "n"]


def test_a_pandas_frame_becomes_a_table_and_a_view_sql_reads():
    pandas = pytest.importorskip("pandas")
    e = weir.Engine()
    frame = pandas.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    table = e.from_pandas(frame).group_by(col("k")).select(col("k"), col("v").sum.alias("s"))
    e.create_temporary_view("sums", table)
    got = e.execute_sql("SELECT k, s FROM sums").to_pandas().sort_values("k")
    assert got["k"].tolist() == ["a", "b"] and got["s"].tolist() == [4, 2]
    assert rows(e.from_arrow(pa.table({"x": [1, 2]})).execute().to_arrow()) == [(1,), (2,)]


def test_a_python_function_is_called_on_expressions_without_registering_it():
    e = engine()

    @weir.udf(input_types=[pa.int64(), pa.int64()], result_type=pa.int64())
    def weighted(price, auction):
        return pc.add(pc.multiply(price, 10), auction)

    table = e.from_path("seq").select(weighted(col("price"), col("auction")).alias("w"))
    got = table.execute().to_arrow()
    want = e.execute_sql("SELECT price * 10 + auction AS w FROM seq").to_arrow()
    assert rows(got) == rows(want)

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def fails(x):
        raise RuntimeError("bad row")

    with pytest.raises(weir.WeirError, match="Python function fails: it raised RuntimeError: bad row"):
        e.from_path("seq").select(fails(col("id"))).execute().to_arrow()


def test_a_table_is_inserted_into_a_sink_as_a_job():
    e = engine()
    out = tempfile.mkdtemp()
    e.execute_sql(f"CREATE TABLE o (id BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv')")
    job = e.from_path("seq").filter(col("price").between(10, 20)).select(col("id"), col("price")).execute_insert("o")
    assert job.wait() == "FINISHED"
    written = sum(t["records_written"] for t in job.metrics()["tasks"])
    assert written == len(e.execute_sql("SELECT id FROM seq WHERE price BETWEEN 10 AND 20").to_arrow())
    assert any(f.startswith("part-") for f in os.listdir(out))
    assert "Filter" in e.from_path("seq").filter(col("price") > 1).explain()


def test_mistakes_are_named_with_the_operation_and_the_closest_column():
    e = engine()
    with pytest.raises(weir.WeirError, match=r"select.*'prize'.*price"):
        e.from_path("seq").select(col("prize"))
    with pytest.raises(weir.WeirError, match="no table or view named 'sek'"):
        e.from_path("sek")
    with pytest.raises(TypeError, match="no truth value"):
        e.from_path("seq").filter(col("price") > 1 and col("id") < 5)
    with pytest.raises(TypeError, match="interval"):
        Tumble.over(lit(10))
    with pytest.raises(TypeError, match="sort key"):
        e.from_path("seq").select(col("id").desc)
    with pytest.raises(weir.WeirError, match="neither grouped nor aggregated"):
        e.from_path("seq").group_by(col("auction")).select(col("id"))
    assert repr(and_(col("a") > 1, col("b") < 2)) == "a > Int64(1) AND b < Int64(2)"
