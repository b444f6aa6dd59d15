"""weir from Python: bounded and streaming results as pyarrow and pandas, jobs, vectorized Python functions and their errors."""

import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import weir


def sequence(engine, name, rows, rate=None):
    options = f"'connector' = 'datagen', 'fields.x.kind' = 'sequence', 'fields.x.start' = '1', 'fields.x.end' = '{rows}'"
    if rate:
        options += f", 'rows-per-second' = '{rate}'"
    engine.execute_sql(f"CREATE TABLE {name} (x BIGINT) WITH ({options})")


def test_a_bounded_query_gives_a_pyarrow_table_with_every_row():
    engine = weir.Engine()
    sequence(engine, "g", 1000)
    table = engine.execute_sql("SELECT x, x * 2 AS y FROM g").to_arrow()
    assert isinstance(table, pa.Table)
    assert table.num_rows == 1000
    assert table.schema.names == ["x", "y"]
    assert pc.sum(table["y"]).as_py() == 2 * 500500


def test_an_updating_query_gives_its_final_table_and_pandas_too():
    engine = weir.Engine()
    sequence(engine, "g", 1000)
    frame = engine.execute_sql("SELECT x % 3 AS k, COUNT(*) AS c FROM g GROUP BY x % 3").to_pandas()
    assert sorted(frame["k"].tolist()) == [0, 1, 2]
    assert frame["c"].sum() == 1000


def test_a_streaming_query_is_read_batch_by_batch_and_closing_it_cancels_its_job():
    engine = weir.Engine()
    sequence(engine, "g", 100_000_000, rate=10_000)
    result = engine.execute_sql("SELECT x FROM g")
    job = result.job
    seen = 0
    with result.batches() as batches:
        for batch in batches:
            assert isinstance(batch, pa.RecordBatch)
            seen += batch.num_rows
            if seen >= 500:
                break
    assert seen >= 500
    assert job.wait(timeout=30) == "CANCELED"


def test_an_insert_runs_as_a_job_to_wait_for_with_metrics():
    engine = weir.Engine()
    sequence(engine, "g", 5000)
    out = tempfile.mkdtemp()
    engine.execute_sql(f"CREATE TABLE o (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv')")
    job = engine.execute_sql("INSERT INTO o SELECT x FROM g").job
    assert job.wait() == "FINISHED"
    metrics = job.metrics()
    assert metrics["status"] == "FINISHED"
    assert sum(t["records_written"] for t in metrics["tasks"]) == 5000
    assert any(f.startswith("part-") for f in os.listdir(out))


def test_a_job_stopped_with_a_savepoint_leaves_one_to_resume_from():
    engine = weir.Engine()
    state = tempfile.mkdtemp()
    engine.set("execution.checkpointing.interval", "200 ms")
    engine.set("execution.checkpointing.dir", f"{state}/checkpoints")
    engine.set("execution.checkpointing.savepoint-dir", f"{state}/savepoints")
    sequence(engine, "g", 100_000_000, rate=10_000)
    engine.execute_sql(f"CREATE TABLE o (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '{state}/out', 'format' = 'csv')")
    job = engine.execute_sql("INSERT INTO o SELECT x FROM g").job
    path = job.stop_with_savepoint()
    assert os.path.exists(os.path.join(path, "_metadata"))
    assert job.wait(timeout=30) == "FINISHED"


def test_a_vectorized_python_function_is_called_from_sql_on_whole_batches():
    engine = weir.Engine()
    sequence(engine, "g", 1000)
    calls = []

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def plus_one(x):
        calls.append(len(x))
        return pc.add(x, 1)

    engine.create_temporary_function("plus_one", plus_one)
    table = engine.execute_sql("SELECT plus_one(x) AS y FROM g").to_arrow()
    assert pc.sum(table["y"]).as_py() == 500500 + 1000
    assert sum(calls) == 1000
    assert len(calls) < 1000, "called per batch, not per row"


def test_a_python_functions_error_names_the_function_and_the_exception():
    engine = weir.Engine()
    sequence(engine, "g", 10)

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def boom(x):
        raise ValueError("no such luck")

    engine.create_temporary_function("boom", boom)
    with pytest.raises(weir.WeirError) as error:
        engine.execute_sql("SELECT boom(x) FROM g").to_arrow()
    assert "Python function boom" in str(error.value)
    assert "ValueError: no such luck" in str(error.value)


def test_bad_sql_raises_with_its_line_and_column():
    engine = weir.Engine()
    with pytest.raises(weir.WeirError) as error:
        engine.execute_sql("SELECT\n  nope FROM nowhere")
    assert "line 2" in str(error.value) or "2:" in str(error.value), str(error.value)
