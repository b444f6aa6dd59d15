//! weir from Python (`import weir`): an engine that runs SQL and the Table API, results as pyarrow (zero copy, through Arrow's C data interface) bounded or streaming, jobs to wait for, stop with a savepoint or read metrics of, and vectorized Python scalar functions usable from SQL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{ArrayRef, make_array};
use arrow::datatypes::DataType;
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use datafusion_common::{DataFusionError, Result as DFResult};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

mod expressions;
mod over;
mod table;

use expressions::Expression;

pyo3::create_exception!(
    _weir,
    WeirError,
    pyo3::exceptions::PyException,
    "An error of weir: bad SQL (with its line and column), a failed job, bad input."
);

fn error(e: weir::Error) -> PyErr {
    WeirError::new_err(e.to_string())
}

/// A SQL session: tables, settings, functions, and the jobs it started.
#[pyclass(module = "weir._weir")]
struct Engine {
    engine: weir::Engine,
}

#[pymethods]
impl Engine {
    #[new]
    fn new() -> Self {
        Engine {
            engine: weir::Engine::new(),
        }
    }

    /// Sets a configuration option, as `SET 'key' = 'value'`.
    fn set(&self, key: &str, value: &str) -> PyResult<()> {
        self.engine.set(key, value).map_err(error)
    }

    /// Runs one statement. DDL and SET return an empty result; a query a
    /// result whose rows arrive as its job runs; an INSERT a result with
    /// its job.
    fn sql(&self, py: Python<'_>, statement: &str) -> PyResult<TableResult> {
        let engine = &self.engine;
        let result = py.detach(|| engine.sql(statement)).map_err(error)?;
        Ok(TableResult::new(result))
    }

    /// The jobs this engine started, oldest first.
    fn jobs(&self) -> Vec<Job> {
        self.engine.jobs().into_iter().map(|job| Job { job }).collect()
    }

    /// Registers `function`, called with one `pyarrow.Array` per argument
    /// and returning a `pyarrow.Array` of `result_type` of the same length
    /// (vectorized, as PyFlink's pandas UDFs), as SQL function `name`.
    #[pyo3(signature = (name, function, input_types, result_type, deterministic = true))]
    fn register_function(
        &self,
        name: &str,
        function: Py<PyAny>,
        input_types: &Bound<'_, PyList>,
        result_type: &Bound<'_, PyAny>,
        deterministic: bool,
    ) -> PyResult<()> {
        let udf = python_function(name, function, input_types, result_type, deterministic)?;
        self.engine.register_udf(ScalarUDF::from(udf));
        Ok(())
    }

    /// A catalog table or view as a Table (PyFlink's `from_path`).
    #[allow(clippy::wrong_self_convention)] // PyFlink's name
    fn from_path(&self, path: &str) -> PyResult<table::Table> {
        self.engine.from(path).map(table::Table::new).map_err(error)
    }

    /// A SQL query as a Table (PyFlink's `sql_query`).
    fn sql_query(&self, query: &str) -> PyResult<table::Table> {
        self.engine.sql_query(query).map(table::Table::new).map_err(error)
    }

    /// The rows of a `pyarrow.Table` or `pyarrow.RecordBatch` as a bounded
    /// Table.
    #[allow(clippy::wrong_self_convention)] // PyFlink's `from_pandas`, for Arrow
    fn from_arrow(&self, data: &Bound<'_, PyAny>) -> PyResult<table::Table> {
        table::from_arrow(&self.engine, data)
    }

    /// Registers `table` as a view SQL and `from_path` read by `name`.
    fn create_temporary_view(&self, name: &str, table: &table::Table) -> PyResult<()> {
        let table = table.table("create_temporary_view")?;
        self.engine.create_temporary_view(name, table).map_err(error)
    }
}

/// A Python function over Arrow arrays as a scalar function `name`.
fn python_function(
    name: &str,
    function: Py<PyAny>,
    input_types: &Bound<'_, PyList>,
    result_type: &Bound<'_, PyAny>,
    deterministic: bool,
) -> PyResult<PythonFunction> {
    let inputs = (input_types.iter())
        .map(|t| DataType::from_pyarrow_bound(&t))
        .collect::<PyResult<Vec<_>>>()?;
    let volatility = match deterministic {
        true => Volatility::Immutable,
        false => Volatility::Volatile,
    };
    Ok(PythonFunction {
        name: name.to_ascii_lowercase(),
        signature: Signature::exact(inputs, volatility),
        result: DataType::from_pyarrow_bound(result_type)?,
        function: Arc::new(function),
    })
}

/// A call of a Python function on `args` (a `weir.udf` called with
/// expressions); the table using it registers it with its engine.
#[pyfunction]
#[pyo3(signature = (name, function, input_types, result_type, deterministic, args))]
fn python_call(
    name: &str,
    function: Py<PyAny>,
    input_types: &Bound<'_, PyList>,
    result_type: &Bound<'_, PyAny>,
    deterministic: bool,
    args: &Bound<'_, PyTuple>,
) -> PyResult<Expression> {
    let udf = python_function(name, function, input_types, result_type, deterministic)?;
    let args = expressions::to_exprs(args, name)?;
    Ok(Expression::value(ScalarUDF::from(udf).call(args)))
}

/// What a statement returned.
#[pyclass(module = "weir._weir")]
struct TableResult {
    result: Mutex<Option<weir::TableResult>>,
}

impl TableResult {
    fn new(result: weir::TableResult) -> Self {
        TableResult {
            result: Mutex::new(Some(result)),
        }
    }

    fn take(&self) -> PyResult<weir::TableResult> {
        let mut result = self.result.lock().unwrap_or_else(|e| e.into_inner());
        result
            .take()
            .ok_or_else(|| PyValueError::new_err("this result's rows were read already"))
    }
}

#[pymethods]
impl TableResult {
    /// The job of a query or an INSERT, if any.
    #[getter]
    fn job(&self) -> Option<Job> {
        let result = self.result.lock().unwrap_or_else(|e| e.into_inner());
        result.as_ref()?.job().map(|job| Job { job: job.clone() })
    }

    /// Whether the rows are a changelog (an updating query): each batch
    /// then has its row kinds.
    #[getter]
    fn is_updating(&self) -> PyResult<bool> {
        let result = self.result.lock().unwrap_or_else(|e| e.into_inner());
        Ok(result.as_ref().is_some_and(|r| r.is_updating()))
    }

    /// Every row, once the query has ended (a bounded query), as a
    /// `pyarrow.Table`; an updating query's final table.
    fn to_arrow<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let result = self.take()?;
        let schema = result.schema();
        let batches = match result.is_updating() {
            true => vec![py.detach(|| result.materialize()).map_err(error)?],
            false => py.detach(|| result.collect()).map_err(error)?,
        };
        let table = arrow_pyarrow::Table::try_new(batches, schema)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        arrow_pyarrow::IntoPyArrow::into_pyarrow(table, py)
    }

    /// [`TableResult::to_arrow`] as a `pandas.DataFrame`.
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_arrow(py)?.call_method0("to_pandas")
    }

    /// The rows as they arrive, an iterator of `pyarrow.RecordBatch`; an
    /// unbounded query goes on until the iterator is closed (`close()`,
    /// or a `with` block), which cancels its job.
    fn batches(&self) -> PyResult<Batches> {
        let result = self.take()?;
        let job = result.job().cloned();
        Ok(Batches {
            stream: Mutex::new(Some(result.stream())),
            job,
        })
    }
}

/// A query's rows as they arrive.
#[pyclass(module = "weir._weir")]
struct Batches {
    stream: Mutex<Option<weir::ResultStream>>,
    job: Option<weir::JobHandle>,
}

#[pymethods]
impl Batches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        loop {
            let next = {
                let mut stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
                let Some(stream) = stream.as_mut() else {
                    return Err(PyStopIteration::new_err(()));
                };
                py.detach(|| stream.next_timeout(Duration::from_millis(100)))
            };
            match next {
                Some(Ok(Some(batch))) => return batch.to_pyarrow(py),
                // Ctrl-C and other signals reach Python between waits.
                Some(Ok(None)) => py.check_signals()?,
                Some(Err(e)) => return Err(error(e)),
                None => {
                    self.close();
                    return Err(PyStopIteration::new_err(()));
                }
            }
        }
    }

    /// Stops reading; the query's job is cancelled if it still runs.
    fn close(&self) {
        let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner()).take();
        if stream.is_some()
            && let Some(job) = &self.job
            && job.status() == weir::JobStatus::Running
        {
            job.cancel();
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(&self, _kind: Py<PyAny>, _value: Py<PyAny>, _traceback: Py<PyAny>) -> bool {
        self.close();
        false
    }
}

/// A running (or ended) job.
#[pyclass(module = "weir._weir")]
struct Job {
    job: weir::JobHandle,
}

#[pymethods]
impl Job {
    /// The job's id (Flink's job id).
    #[getter]
    fn id(&self) -> String {
        self.job.job_id().to_string()
    }

    /// The job's name.
    #[getter]
    fn name(&self) -> String {
        self.job.name().to_string()
    }

    /// Its state: `RUNNING`, `FINISHED`, `FAILED`, `CANCELED`.
    #[getter]
    fn status(&self) -> &'static str {
        status_name(self.job.status())
    }

    /// Waits until the job ends (at most `timeout` seconds); its final
    /// state. A failed job raises its error.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<&'static str> {
        let job = &self.job;
        let status = py
            .detach(|| match timeout {
                Some(seconds) => job.wait_timeout(Duration::from_secs_f64(seconds)),
                None => job.wait(),
            })
            .map_err(error)?;
        Ok(status_name(status))
    }

    /// Cancels the job.
    fn cancel(&self) {
        self.job.cancel();
    }

    /// Takes a savepoint and stops the job (Flink's stop-with-savepoint);
    /// the savepoint's directory.
    fn stop_with_savepoint(&self, py: Python<'_>) -> PyResult<String> {
        let job = &self.job;
        let path = py.detach(|| job.stop_with_savepoint()).map_err(error)?;
        Ok(path.display().to_string())
    }

    /// The job's figures now: records, backpressure and watermark per
    /// subtask, restarts, the completed checkpoints and those restored.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let metrics = self.job.metrics();
        let out = PyDict::new(py);
        out.set_item("name", &metrics.name)?;
        out.set_item("status", status_name(metrics.status))?;
        out.set_item("restarts", metrics.restarts)?;
        out.set_item("uptime_ms", metrics.uptime.as_millis() as u64)?;
        out.set_item("failed_checkpoints", metrics.failed_checkpoints)?;
        let tasks = PyList::empty(py);
        for task in &metrics.tasks {
            let t = PyDict::new(py);
            t.set_item("name", &task.name)?;
            t.set_item("records_in", task.records_in)?;
            t.set_item("records_out", task.records_out)?;
            t.set_item("records_written", task.records_written)?;
            t.set_item("backpressure", task.backpressure)?;
            t.set_item("watermark", task.watermark)?;
            tasks.append(t)?;
        }
        out.set_item("tasks", tasks)?;
        let checkpoints = PyList::empty(py);
        for checkpoint in &metrics.checkpoints {
            let c = PyDict::new(py);
            c.set_item("id", checkpoint.id)?;
            c.set_item("duration_ms", checkpoint.duration.as_millis() as u64)?;
            c.set_item("state_bytes", checkpoint.state_bytes)?;
            c.set_item("path", checkpoint.dir.display().to_string())?;
            checkpoints.append(c)?;
        }
        out.set_item("checkpoints", checkpoints)?;
        let restores = PyList::empty(py);
        for restore in &metrics.restores {
            let r = PyDict::new(py);
            r.set_item("id", restore.id)?;
            r.set_item("path", restore.dir.display().to_string())?;
            r.set_item("restore_time_ms", restore.restore_time)?;
            restores.append(r)?;
        }
        out.set_item("restores", restores)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("Job({}, {}, {})", self.id(), self.name(), self.status())
    }
}

fn status_name(status: weir::JobStatus) -> &'static str {
    match status {
        weir::JobStatus::Running => "RUNNING",
        weir::JobStatus::Finished => "FINISHED",
        weir::JobStatus::Failed => "FAILED",
        weir::JobStatus::Cancelled => "CANCELED",
    }
}

/// A Python function over Arrow arrays, called once per batch.
#[derive(Debug)]
struct PythonFunction {
    name: String,
    signature: Signature,
    result: DataType,
    function: Arc<Py<PyAny>>,
}

impl PartialEq for PythonFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.function, &other.function)
    }
}

impl Eq for PythonFunction {}

impl std::hash::Hash for PythonFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl PythonFunction {
    /// Calls the function on `args`; its error names the function.
    fn call(&self, args: Vec<ArrayRef>, rows: usize) -> Result<ArrayRef, String> {
        Python::attach(|py| {
            let arrays = (args.iter())
                .map(|a| a.to_data().to_pyarrow(py))
                .collect::<PyResult<Vec<_>>>()
                .map_err(|e| e.to_string())?;
            let returned = self
                .function
                .call1(
                    py,
                    pyo3::types::PyTuple::new(py, arrays).map_err(|e| e.to_string())?,
                )
                .map_err(|e| format!("it raised {}", describe(py, &e)))?;
            let returned = returned.bind(py);
            // A pandas Series or a list is turned into an array first.
            let array = match returned.hasattr("__arrow_c_array__").unwrap_or(false) {
                true => returned.clone(),
                false => py
                    .import("pyarrow")
                    .and_then(|pa| pa.call_method1("array", (returned,)))
                    .map_err(|e| {
                        format!("it returned something that is not an array: {}", describe(py, &e))
                    })?,
            };
            let data = arrow::array::ArrayData::from_pyarrow_bound(&array).map_err(|e| e.to_string())?;
            let array = make_array(data);
            if array.len() != rows {
                return Err(format!("it returned {} values for {rows} rows", array.len()));
            }
            if array.data_type() != &self.result {
                return Err(format!(
                    "it returned {} values, declared {}",
                    array.data_type(),
                    self.result
                ));
            }
            Ok(array)
        })
    }
}

/// A Python exception as `Type: message`.
fn describe(py: Python<'_>, e: &PyErr) -> String {
    let kind = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_default();
    format!("{kind}: {}", e.value(py))
}

impl ScalarUDFImpl for PythonFunction {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(self.result.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        self.call(arrays, rows)
            .map(ColumnarValue::Array)
            .map_err(|why| DataFusionError::Execution(format!("Python function {}: {why}", self.name)))
    }
}

/// The native module under `weir`.
#[pymodule]
fn _weir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<TableResult>()?;
    m.add_class::<Batches>()?;
    m.add_class::<Job>()?;
    m.add_class::<Expression>()?;
    m.add_class::<table::Table>()?;
    m.add_class::<table::GroupedTable>()?;
    m.add_class::<table::WindowedTable>()?;
    m.add_class::<table::WindowGroupedTable>()?;
    m.add_class::<table::WindowBuilder>()?;
    m.add_class::<table::GroupWindow>()?;
    m.add_class::<table::Tumble>()?;
    m.add_class::<table::Slide>()?;
    m.add_class::<table::Session>()?;
    m.add_class::<table::Cumulate>()?;
    m.add_class::<over::OverWindowBuilder>()?;
    m.add_class::<over::OverWindow>()?;
    m.add_class::<over::OverWindowedTable>()?;
    for (name, bound) in expressions::bounds() {
        m.add(name, bound)?;
    }
    m.add_function(wrap_pyfunction!(expressions::col, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::lit, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::call, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::row_interval, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::and_, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::or_, m)?)?;
    m.add_function(wrap_pyfunction!(expressions::not_, m)?)?;
    m.add_function(wrap_pyfunction!(python_call, m)?)?;
    m.add("WeirError", m.py().get_type::<WeirError>())?;
    Ok(())
}
