#!/usr/bin/env python3
"""weir from Python, measured: a vectorized Python UDF's cost per row against
the same function computed by weir itself (`x + 1` in SQL), and a collect of
10M rows into a pyarrow.Table. Medians of --runs runs, printed as a table.

    scripts/python.sh wheel && pip install <wheel>   (or: scripts/python.sh test)
    ~/.cache/weir/python/bin/python benches/python.py --runs 3
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
        f"'fields.x.start' = '1', 'fields.x.end' = '{rows}')"
    )

    @weir.udf(input_types=[pa.int64()], result_type=pa.int64())
    def plus_one(x):
        return pc.add(x, 1)

    engine.create_temporary_function("plus_one", plus_one)
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
    }
    medians = {}
    for name, sql in cases.items():
        times = []
        for _ in range(args.runs):
            seconds, rows = timed(engine_with(args.rows), sql)
            times.append(seconds)
        medians[name] = statistics.median(times)
        print(f"{name:32} {medians[name]:8.3f} s  ({args.rows / medians[name] / 1e6:6.1f}M rows/s, {rows} rows out)")
    udf = medians["SUM(plus_one(x)) (Python UDF)"] - medians["SUM(x + 1) (weir)"]
    print(f"Python UDF cost: {udf / args.rows * 1e9:.1f} ns per row over weir's own x + 1 "
          f"({medians['SUM(plus_one(x)) (Python UDF)'] / medians['SUM(x + 1) (weir)']:.2f}x the query's time)")


if __name__ == "__main__":
    main()
