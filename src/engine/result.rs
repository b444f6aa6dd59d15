//! What a statement returns: nothing, rows computed at once, a query's rows
//! as they arrive ([`ResultStream`]), or an `INSERT`'s job.

use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use crossbeam_channel::Receiver;

use crate::{Error, Result};
use weir_job::settings::JobStatus;
use weir_job::supervisor::JobHandle;

/// What a statement returns.
pub struct TableResult {
    pub(crate) schema: SchemaRef,
    pub(crate) body: ResultBody,
    /// The rows are a changelog: batches carry row kinds (see [`weir_common::changelog`]).
    pub(crate) updating: bool,
}

pub(crate) enum ResultBody {
    /// DDL and settings: nothing to show.
    Done,
    /// Rows computed at once (SET, EXPLAIN).
    Rows(Vec<RecordBatch>),
    /// A query's rows, arriving as its job runs.
    Stream {
        receiver: Receiver<RecordBatch>,
        job: JobHandle,
    },
    /// An `INSERT` job.
    Job(JobHandle),
}

impl std::fmt::Debug for TableResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.body {
            ResultBody::Done => "done",
            ResultBody::Rows(_) => "rows",
            ResultBody::Stream { .. } => "stream",
            ResultBody::Job(_) => "job",
        };
        write!(f, "TableResult({kind}, {:?})", self.schema)
    }
}

impl TableResult {
    pub(crate) fn done() -> Self {
        TableResult {
            schema: Arc::new(Schema::empty()),
            body: ResultBody::Done,
            updating: false,
        }
    }

    /// A table of text columns.
    pub(crate) fn table(columns: &[&str], rows: Vec<Vec<Option<String>>>) -> Result<Self> {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(*c, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let arrays = (0..columns.len())
            .map(|i| {
                Arc::new(rows.iter().map(|r| r[i].clone()).collect::<StringArray>()) as arrow::array::ArrayRef
            })
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), arrays)?;
        Ok(TableResult {
            schema,
            body: ResultBody::Rows(vec![batch]),
            updating: false,
        })
    }

    pub(crate) fn text(column: &str, lines: Vec<String>) -> Result<Self> {
        let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(lines))])?;
        Ok(TableResult {
            schema,
            body: ResultBody::Rows(vec![batch]),
            updating: false,
        })
    }

    /// The schema of the rows (their data columns: an updating result's
    /// batches have the op column besides).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Whether the rows are a changelog: each batch then ends with the op
    /// column, read by [`weir_common::changelog::row_kinds`].
    pub fn is_updating(&self) -> bool {
        self.updating
    }

    /// All rows of a bounded query as a table: its changelog applied to an
    /// empty table (for an insert-only query, every row).
    pub fn materialize(self) -> Result<RecordBatch> {
        let mut table = weir_common::changelog::Materialized::new(&self.schema)?;
        for batch in self.collect()? {
            table.apply(&batch)?;
        }
        table.table()
    }

    /// The job the statement started (a query or an `INSERT`).
    pub fn job(&self) -> Option<&JobHandle> {
        match &self.body {
            ResultBody::Stream { job, .. } | ResultBody::Job(job) => Some(job),
            _ => None,
        }
    }

    /// All rows: for a query, waits for its (bounded) job to finish; for an
    /// `INSERT`, waits for the job and returns no rows.
    pub fn collect(self) -> Result<Vec<RecordBatch>> {
        match self.body {
            ResultBody::Done => Ok(vec![]),
            ResultBody::Rows(batches) => Ok(batches),
            ResultBody::Job(job) => job.wait().map(|_| vec![]),
            ResultBody::Stream { .. } => self.stream().collect(),
        }
    }

    /// The rows as they arrive. Dropping the stream cancels the query's job.
    pub fn stream(self) -> ResultStream {
        match self.body {
            ResultBody::Stream { receiver, job } => ResultStream {
                receiver: Some(receiver),
                rows: vec![].into_iter(),
                job: Some(job),
                done: false,
            },
            ResultBody::Rows(batches) => ResultStream {
                receiver: None,
                rows: batches.into_iter(),
                job: None,
                done: false,
            },
            ResultBody::Job(job) => {
                let result = job.wait().map(drop);
                ResultStream {
                    receiver: None,
                    rows: vec![].into_iter(),
                    job: None,
                    done: result.is_ok(),
                }
            }
            ResultBody::Done => ResultStream {
                receiver: None,
                rows: vec![].into_iter(),
                job: None,
                done: true,
            },
        }
    }

    /// Waits for the statement's job, if any, to end.
    pub fn wait(&self) -> Result<()> {
        match self.job() {
            Some(job) => job.wait().map(drop),
            None => Ok(()),
        }
    }
}

/// Rows of a query, batch by batch, as windows fire.
pub struct ResultStream {
    receiver: Option<Receiver<RecordBatch>>,
    rows: std::vec::IntoIter<RecordBatch>,
    job: Option<JobHandle>,
    done: bool,
}

impl ResultStream {
    /// The query's job.
    pub fn job(&self) -> Option<&JobHandle> {
        self.job.as_ref()
    }
}

impl ResultStream {
    /// Like `next`, but waits at most `timeout`: `Some(Ok(None))` when no
    /// batch arrived in time, `None` when the query has ended.
    pub fn next_timeout(&mut self, timeout: std::time::Duration) -> Option<Result<Option<RecordBatch>>> {
        if let Some(batch) = self.rows.next() {
            return Some(Ok(Some(batch)));
        }
        if self.done {
            return None;
        }
        let receiver = self.receiver.as_ref()?;
        match receiver.recv_timeout(timeout) {
            Ok(batch) => Some(Ok(Some(batch))),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Some(Ok(None)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => self.ended().map(|r| r.map(Some)),
        }
    }

    /// The sink is gone: the job ended. How.
    fn ended(&mut self) -> Option<Result<RecordBatch>> {
        self.done = true;
        let job = self.job.as_ref()?;
        match job.wait() {
            Ok(JobStatus::Finished) => None,
            Ok(JobStatus::Cancelled) => Some(Err(Error::Execution("the query was cancelled".into()))),
            Ok(status) => Some(Err(Error::Execution(format!("the query ended as {status:?}")))),
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for ResultStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(batch) = self.rows.next() {
            return Some(Ok(batch));
        }
        if self.done {
            return None;
        }
        let receiver = self.receiver.as_ref()?;
        match receiver.recv() {
            Ok(batch) => Some(Ok(batch)),
            Err(_) => self.ended(),
        }
    }
}

impl Drop for ResultStream {
    fn drop(&mut self) {
        if !self.done
            && let Some(job) = &self.job
        {
            job.cancel();
        }
    }
}
