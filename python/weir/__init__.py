"""weir, a streaming SQL engine, from Python.

    import weir, pyarrow as pa
    from weir.expressions import col, lit
    engine = weir.Engine()
    engine.execute_sql("CREATE TABLE g (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10')")
    table = engine.execute_sql("SELECT x FROM g").to_arrow()      # pyarrow.Table
    same = engine.from_path("g").select(col("x")).execute().to_arrow()

Queries are SQL or the Table API (PyFlink's names: ``from_path``,
``select``, ``filter``, ``group_by``, ``window(Tumble.over(...))``, joins,
``order_by(...).fetch(n)``; expressions in ``weir.expressions``, windows in
``weir.window``). Queries return a result whose rows arrive as the query's job runs: all of
them at once (``to_arrow()``, ``to_pandas()``) for a bounded query, or an
iterator of ``pyarrow.RecordBatch`` (``batches()``) that cancels the job
when closed. An INSERT's result has its ``job``: ``wait()``,
``stop_with_savepoint()``, ``metrics()``. Scalar Python functions are
vectorized (as PyFlink's pandas UDFs): they take and return pyarrow arrays.
"""

from . import _weir
from ._weir import Batches, Expression, GroupedTable, Job, Table, TableResult, WeirError
from ._weir import Engine as _Engine

__all__ = [
    "Engine",
    "Table",
    "GroupedTable",
    "Expression",
    "Job",
    "TableResult",
    "Batches",
    "WeirError",
    "udf",
    "UserDefinedFunction",
]


class UserDefinedFunction:
    """A vectorized scalar function: ``func`` takes one ``pyarrow.Array`` per
    argument and returns an array (or anything ``pyarrow.array`` takes, such
    as a pandas Series) of ``result_type``, as long as its inputs."""

    def __init__(self, func, input_types, result_type, deterministic=True, name=None):
        self.func = func
        self.input_types = list(input_types)
        self.result_type = result_type
        self.deterministic = deterministic
        self.name = name or getattr(func, "__name__", "udf")

    def __call__(self, *args):
        """Called with expressions (``f(col("x"))``), a call for the Table
        API; called with arrays, the function itself."""
        if any(isinstance(a, Expression) for a in args):
            return _weir.python_call(
                self.name, self.func, self.input_types, self.result_type, self.deterministic, args
            )
        return self.func(*args)


def udf(f=None, *, input_types, result_type, deterministic=True, name=None):
    """Makes ``f`` a vectorized scalar function (PyFlink's ``@udf(...,
    func_type="pandas")``): call it on expressions in the Table API, or
    register it for SQL with ``Engine.create_temporary_function``."""

    def wrap(func):
        return UserDefinedFunction(func, input_types, result_type, deterministic, name)

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

    def from_path(self, path):
        """A catalog table or view as a ``Table``."""
        return self._engine.from_path(path)

    def sql_query(self, query):
        """A SQL query as a ``Table``, to go on with in the Table API."""
        return self._engine.sql_query(query)

    def from_arrow(self, data):
        """The rows of a ``pyarrow.Table`` or ``RecordBatch`` as a bounded
        ``Table``."""
        return self._engine.from_arrow(data)

    def from_pandas(self, frame):
        """The rows of a pandas DataFrame as a bounded ``Table`` (its index
        is not a column)."""
        import pyarrow

        return self.from_arrow(pyarrow.Table.from_pandas(frame, preserve_index=False))

    def create_temporary_view(self, name, table):
        """Registers ``table`` as a view that SQL and ``from_path`` read."""
        self._engine.create_temporary_view(name, table)
