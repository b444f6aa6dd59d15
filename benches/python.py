#!/usr/bin/env python3
"""weir from Python, measured: a vectorized Python UDF's cost per row against
the same function computed by weir itself (`x + 1` in SQL), and a collect of
10M rows into a pyarrow.Table. Medians of --runs runs, printed as a table.

    scripts/python.sh bench --runs 5     (an optimized wheel, then this)
"""

import argparse
import statistics
import time

import pyarrow as pa
import pyarrow.compute as pc

import weir


def engine_with(rows):
    engine = weir.Engine()
    engine.set("parallelism.default", "1")
    engine.execute_sql(
        "CREATE TABLE g (x BIGINT) WITH ('connector' = 'datagen', 'fields.x.kind' = 'sequence', "
        # datagen's default rate is Flink's, 10,000 rows/s: unlimited here.
        f"'fields.x.start' = '1', 'fields.x.end' = '{rows}', 'rows-per-second' = '1e12')"
    )

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def plus_one(x):
        return pc.add(x, 1)

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def plus_one_pandas(x):
        # PyFlink's pandas UDFs take and return pandas Series.
        return x.to_pandas() + 1

    engine.create_temporary_function("plus_one", plus_one)
    engine.create_temporary_function("plus_one_pandas", plus_one_pandas)
    return engine


def timed(engine, sql):
    started = time.perf_counter()
    table = engine.execute_sql(sql).to_arrow()
    return time.perf_counter() - started, table.num_rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args()
    cases = {
        "collect x": "SELECT x FROM g",
        "x + 1 (weir)": "SELECT x + 1 AS y FROM g",
        "plus_one(x) (Python UDF)": "SELECT plus_one(x) AS y FROM g",
        "SUM(x + 1) (weir)": "SELECT SUM(x + 1) AS s FROM g",
        "SUM(plus_one(x)) (Python UDF)": "SELECT SUM(plus_one(x)) AS s FROM g",
        "SUM(plus_one_pandas(x)) (pandas)": "SELECT SUM(plus_one_pandas(x)) AS s FROM g",
    }
    medians = {}
    for name, sql in cases.items():
        times = []
        timed(engine_with(args.rows), sql)  # warm-up: imports, first calls
        for _ in range(args.runs):
            seconds, rows = timed(engine_with(args.rows), sql)
            times.append(seconds)
        medians[name] = statistics.median(times)
        print(f"{name:32} {medians[name]:8.3f} s  ({args.rows / medians[name] / 1e6:6.1f}M rows/s, {rows} rows out)")
    rust = medians["SUM(x + 1) (weir)"]
    for name in ["SUM(plus_one(x)) (Python UDF)", "SUM(plus_one_pandas(x)) (pandas)"]:
        cost = medians[name] - rust
        print(f"{name}: {cost / args.rows * 1e9:.1f} ns per row over weir's own x + 1 "
              f"({medians[name] / rust:.2f}x the query's time)")


if __name__ == "__main__":
    main()
