"""weir, a streaming SQL engine, from Python.

    import weir, pyarrow as pa
    engine = weir.Engine()
    engine.execute_sql("CREATE TABLE g (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10')")
    table = engine.execute_sql("SELECT x FROM g").to_arrow()      # pyarrow.Table

Queries return a result whose rows arrive as the query's job runs: all of
them at once (``to_arrow()``, ``to_pandas()``) for a bounded query, or an
iterator of ``pyarrow.RecordBatch`` (``batches()``) that cancels the job
when closed. An INSERT's result has its ``job``: ``wait()``,
``stop_with_savepoint()``, ``metrics()``. Scalar Python functions are
vectorized (as PyFlink's pandas UDFs): they take and return pyarrow arrays.
"""

from ._weir import Batches, Job, TableResult, WeirError
from ._weir import Engine as _Engine

__all__ = ["Engine", "Job", "TableResult", "Batches", "WeirError", "udf", "UserDefinedFunction"]


class UserDefinedFunction:
    """A vectorized scalar function: ``func`` takes one ``pyarrow.Array`` per
    argument and returns an array (or anything ``pyarrow.array`` takes, such
    as a pandas Series) of ``result_type``, as long as its inputs."""

    def __init__(self, func, input_types, result_type, deterministic=True):
        self.func = func
        self.input_types = list(input_types)
        self.result_type = result_type
        self.deterministic = deterministic

    def __call__(self, *arrays):
        return self.func(*arrays)


def udf(f=None, *, input_types, result_type, deterministic=True):
    """Makes ``f`` a vectorized scalar function (PyFlink's ``@udf(...,
    func_type="pandas")``); register it with
    ``Engine.create_temporary_function``."""

    def wrap(func):
        return UserDefinedFunction(func, input_types, result_type, deterministic)

    return wrap if f is None else wrap(f)


class Engine:
    """A SQL session: its tables, settings, functions and jobs."""

    def __init__(self):
        self._engine = _Engine()

    def set(self, key, value):
        """Sets a configuration option, as ``SET 'key' = 'value'``."""
        self._engine.set(key, str(value))

    def execute_sql(self, statement):
        """Runs one statement; a ``TableResult`` (PyFlink's name)."""
        return self._engine.sql(statement)

    sql = execute_sql

    def create_temporary_function(self, name, function):
        """Registers a function made by ``udf`` as SQL function ``name``."""
        if not isinstance(function, UserDefinedFunction):
            raise TypeError(f"{name}: expected a function made by weir.udf, got {type(function).__name__}")
        self._engine.register_function(
            name, function.func, function.input_types, function.result_type, function.deterministic
        )

    def jobs(self):
        """The jobs this engine started, oldest first."""
        return self._engine.jobs()
