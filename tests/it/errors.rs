//! Bad input gets one clear error naming what and where, never a panic or a hang.

use std::time::Duration;

use arrow::datatypes::DataType;
use datafusion_common::Result as DFResult;
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use weir::{Engine, Error, JobStatus};

fn engine(parallelism: usize) -> Engine {
    let engine = Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine
}

#[test]
fn a_missing_input_file_names_the_path() {
    let engine = engine(1);
    engine
        .sql("CREATE TABLE t (x INT) WITH ('connector' = 'filesystem', 'path' = '/nonexistent/weir/in.csv', 'format' = 'csv')")
        .unwrap();
    let err = engine.sql("SELECT x FROM t").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/weir/in.csv") && text.contains("No such file"),
        "{text}"
    );
}

#[test]
fn an_unwritable_output_directory_fails_the_insert() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let out = blocker.join("out");
    let engine = engine(1);
    engine
        .sql(&format!(
            "CREATE TABLE o (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let err = engine.sql("INSERT INTO o VALUES (1)").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains(&out.display().to_string()), "{err}");
}

#[test]
fn a_malformed_json_row_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.json");
    std::fs::write(&file, "{\"x\": 1}\n{\"x\": 2}\n{\"x\": \"three\"}\n").unwrap();
    let engine = engine(1);
    engine
        .sql(&format!(
            "CREATE TABLE j (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json')",
            file.display()
        ))
        .unwrap();
    let err = engine.sql("SELECT x FROM j").unwrap().collect().unwrap_err();
    match err {
        Error::Data { file: f, line, .. } => {
            assert!(f.ends_with("in.json"));
            assert_eq!(line, Some(3));
        }
        other => panic!("expected a data error, got {other:?}"),
    }
}

#[test]
fn a_failing_task_stops_the_whole_job_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let good: String = (0..50_000)
        .map(|i| format!("{i},2020-01-01 00:00:{:02}\n", i % 60))
        .collect();
    for name in ["a.csv", "b.csv", "c.csv"] {
        std::fs::write(dir.path().join(name), &good).unwrap();
    }
    std::fs::write(
        dir.path().join("d.csv"),
        "1,2020-01-01 00:00:00\nbad,2020-01-01 00:00:00\n",
    )
    .unwrap();
    let engine = engine(4);
    engine
        .sql(&format!(
            "CREATE TABLE t (x BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            dir.path().display()
        ))
        .unwrap();
    let result = engine
        .sql(
            "SELECT x % 10, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
             GROUP BY x % 10, window_start, window_end",
        )
        .unwrap();
    let job = result.job().unwrap().clone();
    let err = result.collect().unwrap_err();
    assert!(err.to_string().contains("d.csv, line 2"), "{err}");
    // Every task has stopped: the result only ends once the whole job has.
    assert_eq!(job.status(), JobStatus::Failed);
    assert!(job.wait_timeout(Duration::from_secs(1)).is_err());
}

/// A scalar function that panics, to make a task panic.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Boom {
    signature: Signature,
}

impl ScalarUDFImpl for Boom {
    fn name(&self) -> &str {
        "boom"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        panic!("boom went the function");
    }
}

#[test]
fn a_panicking_task_fails_the_job_instead_of_the_process() {
    let engine = engine(2);
    engine.register_udf(ScalarUDF::from(Boom {
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
    }));
    engine
        .sql("CREATE TABLE g (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '1000', 'rows-per-second' = '1000000')")
        .unwrap();
    let err = engine
        .sql("SELECT boom(x) FROM g")
        .unwrap()
        .collect()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("panicked") && text.contains("boom went the function"),
        "{text}"
    );
}
