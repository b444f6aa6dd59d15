//! The one error type of the library, and its `Result` alias.

use std::fmt;
use std::path::PathBuf;

/// A position in SQL text: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// Line, starting at 1.
    pub line: u64,
    /// Column, starting at 1.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Everything that can go wrong in weir.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SQL text is not valid, or refers to something that does not exist.
    #[error("SQL error{}: {message}", at(.position))]
    Sql {
        /// What is wrong.
        message: String,
        /// Where in the SQL text, when known.
        position: Option<Position>,
    },
    /// The statement is valid SQL but cannot be planned as a streaming job.
    #[error("Plan error: {0}")]
    Plan(String),
    /// A running job failed.
    #[error("Execution error: {0}")]
    Execution(String),
    /// Bad input data: a row that does not parse, with where it was found.
    #[error("Data error in {file}{}: {message}", .line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Data {
        /// The file (or source) the row came from.
        file: String,
        /// The 1-based line, when the format has lines.
        line: Option<u64>,
        /// What is wrong with the row.
        message: String,
    },
    /// State could not be snapshotted or restored.
    #[error("State error: {0}")]
    State(String),
    /// A file system operation failed.
    #[error("I/O error on {}: {source}", .path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An Arrow kernel failed.
    #[error("Arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The Parquet reader or writer failed.
    #[error("Parquet error: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// DataFusion (binding, expressions, aggregates) failed.
    #[error("{}", datafusion_message(.0))]
    DataFusion(#[from] datafusion_common::DataFusionError),
    /// A bug in weir: an invariant did not hold.
    #[error("Internal error: {0}")]
    Internal(String),
}

fn at(position: &Option<Position>) -> String {
    position.map(|p| format!(" at {p}")).unwrap_or_default()
}

/// DataFusion wraps errors in context layers and backtraces; show the root message.
fn datafusion_message(e: &datafusion_common::DataFusionError) -> String {
    e.find_root().to_string()
}

/// The result type used throughout weir.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A SQL error without a known position.
    pub fn sql(message: impl Into<String>) -> Self {
        Error::Sql {
            message: message.into(),
            position: None,
        }
    }

    /// A SQL error at a position.
    pub fn sql_at(message: impl Into<String>, position: Option<Position>) -> Self {
        Error::Sql {
            message: message.into(),
            position,
        }
    }

    /// An I/O error on a path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for `Err(Error::Plan(format!(...)))`.
#[macro_export]
macro_rules! plan_err {
    ($($arg:tt)*) => { Err($crate::Error::Plan(format!($($arg)*))) };
}

/// Shorthand for `Err(Error::Sql { .. })` without a position.
#[macro_export]
macro_rules! sql_err {
    ($($arg:tt)*) => { Err($crate::Error::sql(format!($($arg)*))) };
}

/// Shorthand for `Err(Error::Internal(format!(...)))`.
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { Err($crate::Error::Internal(format!($($arg)*))) };
}
