//! The watermark assigner: `WATERMARK FOR ts AS expr` at the source.
//!
//! The watermark is the largest value of `expr` seen so far in this subtask; it
//! is emitted after each batch in which it advanced. A NULL rowtime is an error,
//! as in Flink.

use std::sync::Arc;

use arrow::array::Array;
use arrow::compute::kernels::aggregate::max;
use arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;

use crate::split_watermarks::SplitWatermarks;
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::MIN_WATERMARK;
use weir_common::time::Timestamp;
use weir_common::time::to_epoch_millis;
use weir_common::time::wall_clock_millis;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, SplitId, TaskContext};

/// Spec of a watermark assigner.
#[derive(Debug, Clone)]
pub struct WatermarkAssigner {
    /// The rowtime column, for errors.
    pub rowtime: String,
    /// Index of the rowtime column in the input.
    pub rowtime_index: usize,
    /// The watermark expression.
    pub expr: Arc<dyn PhysicalExpr>,
    /// Its SQL text.
    pub text: String,
    /// When the expression is `rowtime - INTERVAL 'd'` (or the rowtime itself),
    /// the delay `d` in milliseconds: the watermark is then `max(rowtime) - d`,
    /// computed without evaluating the expression on every row.
    pub fixed_delay: Option<i64>,
    /// Split idle timeout in ms (`scan.watermark.idle-timeout`, else
    /// `table.exec.source.idle-timeout`): when the source reads splits, one
    /// without data this long stops holding the watermark back.
    pub idle_timeout: Option<i64>,
}

impl OperatorFactory for WatermarkAssigner {
    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WatermarkAssignerOperator {
            spec: self.clone(),
            current: MIN_WATERMARK,
            splits: None,
            now: wall_clock_millis(),
        }))
    }
}

struct WatermarkAssignerOperator {
    spec: WatermarkAssigner,
    current: Timestamp,
    /// Per-split watermarks, once the source says it reads splits.
    splits: Option<SplitWatermarks>,
    /// The wall clock at the last tick (when a split last had data).
    now: Timestamp,
}

impl WatermarkAssignerOperator {
    /// The watermark the rows of `batch` give: the largest value of the
    /// watermark expression.
    fn candidate(&self, batch: &RecordBatch) -> Result<Option<Timestamp>> {
        if batch.column(self.spec.rowtime_index).null_count() > 0 {
            return Err(Error::Execution(format!(
                "the rowtime column '{}' must not be NULL; filter or convert NULLs before using it as a time attribute",
                self.spec.rowtime
            )));
        }
        Ok(match self.spec.fixed_delay {
            Some(delay) => max(&to_epoch_millis(batch.column(self.spec.rowtime_index).as_ref())?)
                .map(|m| m.saturating_sub(delay)),
            None => {
                let values = self.spec.expr.evaluate(batch)?.into_array(batch.num_rows())?;
                max(&to_epoch_millis(values.as_ref())?)
            }
        })
    }

    /// Emits the splits' combined watermark when it is ahead.
    fn emit_combined(&mut self, out: &mut Output) {
        if let Some(combined) = self.splits.as_ref().and_then(SplitWatermarks::combined)
            && combined > self.current
        {
            self.current = combined;
            out.watermark(combined);
        }
    }
}

impl Operator for WatermarkAssignerOperator {
    fn name(&self) -> String {
        "WatermarkAssigner".into()
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        Ok(Some(OperatorSnapshot::with_watermark(self.current, None)))
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, "WatermarkAssigner")? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.current = snapshot.watermark("WatermarkAssigner")?;
        Ok(())
    }

    fn process_split_batch(&mut self, split: SplitId, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let candidate = self.candidate(&batch)?;
        out.batch(batch);
        let (now, timeout) = (self.now, self.spec.idle_timeout);
        self.splits
            .get_or_insert_with(|| SplitWatermarks::new(timeout))
            .on_data(split, candidate, now);
        self.emit_combined(out);
        Ok(())
    }

    fn set_splits(&mut self, splits: &[SplitId], out: &mut Output) -> Result<()> {
        let (now, timeout) = (self.now, self.spec.idle_timeout);
        self.splits
            .get_or_insert_with(|| SplitWatermarks::new(timeout))
            .set_splits(splits, now);
        self.emit_combined(out);
        Ok(())
    }

    fn uses_processing_time(&self) -> bool {
        self.spec.idle_timeout.is_some()
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        self.now = now;
        if let Some(highest) = self.splits.as_mut().and_then(|s| s.on_time(now))
            && highest > self.current
        {
            self.current = highest;
            out.watermark(highest);
        }
        Ok(())
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let candidate = self.candidate(&batch)?;
        out.batch(batch);
        if let Some(candidate) = candidate
            && candidate > self.current
        {
            self.current = candidate;
            out.watermark(candidate);
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        // Only the end of input reaches here (+infinity): forward it.
        if watermark > self.current {
            self.current = watermark;
            out.watermark(watermark);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::harness::Harness;

    fn assigner(set: &str) -> Harness {
        Harness::of(
            &[
                set,
                "CREATE TABLE t (v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
                 WITH ('connector' = 'datagen')",
                "CREATE TABLE s (v BIGINT) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO s SELECT v FROM t",
            "WatermarkAssigner",
            0,
        )
        .unwrap()
    }

    #[test]
    fn split_watermarks_advance_with_the_slowest_split() {
        let mut h = assigner("SET 'table.exec.source.idle-timeout' = '0'");
        assert_eq!(h.set_splits(&[0, 1]).unwrap(), Vec::<String>::new());
        let out = h.push_split(0, "1 1970-01-01T00:00:10").unwrap();
        assert_eq!(
            out,
            vec!["+I 1 1970-01-01T00:00:10"],
            "split 1 holds the watermark back"
        );
        let out = h.push_split(1, "2 1970-01-01T00:00:05").unwrap();
        assert_eq!(out, vec!["+I 2 1970-01-01T00:00:05", "wm 4000"]);
        let out = h.push_split(1, "3 1970-01-01T00:00:20").unwrap();
        assert_eq!(out, vec!["+I 3 1970-01-01T00:00:20", "wm 9000"]);
        // A restored assigner keeps its watermark; splits start over.
        h.restart().unwrap();
        h.set_splits(&[0, 1]).unwrap();
        let out = h.push_split(0, "4 1970-01-01T00:00:30").unwrap();
        assert_eq!(out, vec!["+I 4 1970-01-01T00:00:30"]);
        let out = h.push_split(1, "5 1970-01-01T00:00:08").unwrap();
        assert_eq!(
            out,
            vec!["+I 5 1970-01-01T00:00:08"],
            "never behind the restored watermark"
        );
    }

    #[test]
    fn an_idle_split_lets_the_watermark_advance_after_the_idle_timeout() {
        let mut h = assigner("SET 'table.exec.source.idle-timeout' = '1 s'");
        h.processing_time(0).unwrap();
        h.set_splits(&[0, 1]).unwrap();
        h.processing_time(900).unwrap();
        h.push_split(0, "1 1970-01-01T00:00:10").unwrap();
        assert_eq!(h.processing_time(999).unwrap(), Vec::<String>::new());
        assert_eq!(h.processing_time(1_000).unwrap(), vec!["wm 9000"]);
    }
}
