//! Window assignment: a window TVF whose output is not aggregated.
//!
//! `SELECT * FROM TABLE(HOP(...))` returns each row once per window containing
//! it, with `window_start`, `window_end` and `window_time` appended.

use std::sync::Arc;

use arrow::array::{ArrayRef, TimestampMillisecondArray, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::{Error, Result};
use weir_common::time::to_epoch_millis;
use weir_common::time::wall_clock_millis;
use weir_plan::window::{TimeShift, WindowSpec};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};

/// Appends window columns, one output row per (row, window).
#[derive(Debug, Clone)]
pub struct WindowAssign {
    /// Windows.
    pub window: WindowSpec,
    /// Local time for `TIMESTAMP_LTZ` windows.
    pub shift: TimeShift,
    /// Input column of the time attribute.
    pub time_index: usize,
    /// Its name, for EXPLAIN.
    pub time_name: String,
    /// A processing-time attribute: rows go to the windows of the wall clock.
    pub processing_time: bool,
    /// Input columns and the three window columns.
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl OperatorFactory for WindowAssign {
    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}

impl Operator for WindowAssign {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let time = batch.column(self.time_index);
        if time.null_count() > 0 {
            return Err(Error::Execution(format!(
                "the window time attribute '{}' is NULL",
                self.time_name
            )));
        }
        let millis = to_epoch_millis(time.as_ref())?;
        let mut rows = Vec::with_capacity(batch.num_rows());
        let (mut starts, mut ends, mut times) = (Vec::new(), Vec::new(), Vec::new());
        let time_type = self
            .schema
            .field(self.schema.fields().len() - 1)
            .data_type()
            .clone();
        let now = wall_clock_millis();
        for (row, t) in millis.values().iter().enumerate() {
            let t = if self.processing_time { now } else { *t };
            let slice = self.window.slice_start(self.shift.to_local(t));
            for end in self.window.window_ends(slice) {
                rows.push(row as u32);
                starts.push(self.window.window_start(end));
                ends.push(end);
                times.push(match time_type {
                    DataType::Timestamp(_, Some(_)) => self.shift.to_utc(end) - 1,
                    _ => end - 1,
                });
            }
        }
        let indices = UInt32Array::from(rows);
        let mut columns = batch
            .columns()
            .iter()
            .map(|c| Ok(take(c.as_ref(), &indices, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let zone = match &time_type {
            DataType::Timestamp(_, zone) => zone.clone(),
            _ => None,
        };
        columns.push(Arc::new(TimestampMillisecondArray::from(starts)));
        columns.push(Arc::new(TimestampMillisecondArray::from(ends)));
        columns.push(Arc::new(
            TimestampMillisecondArray::from(times).with_timezone_opt(zone),
        ));
        out.batch(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }
}
