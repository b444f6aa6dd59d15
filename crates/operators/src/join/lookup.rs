//! Lookup joins: `JOIN t FOR SYSTEM_TIME AS OF s.proctime` against a
//! bounded table, as Nexmark q13 uses it. Every subtask holds the whole
//! table (its input is broadcast) and joins each stream row with it as it
//! comes (`INNER` or `LEFT`); stream rows that arrive before the table is
//! complete wait until it is. Insert-only.
//!
//! The table is not checkpointed: it is the same on every subtask, and its
//! source reads it again from the start after a restore
//! ([`weir_runtime::source::Replayed`]). Stream rows still waiting for it
//! are the operator's (per-subtask) state.
//!
//! ```text
//!  stream ──FORWARD──►┐
//!                     LookupJoin ──► +I joined (or padded, LEFT)
//!  table ──BROADCAST─►┘  (input 1 ends: the table is complete)
//! ```
//!
//! The same operator runs a regular join whose one side is small and
//! bounded ([`LookupJoin::broadcast`]; the planner decides by
//! `table.optimizer.join.broadcast-threshold`): the small side is the table,
//! on either side of the SQL join, and the other side is neither hashed nor
//! kept once the table is complete. Its kinds are those whose outer side, if
//! any, is the stream: `INNER`, `LEFT`/`RIGHT` with the stream outer, `SEMI`
//! and `ANTI` with the table on the right. Its rows are final, so they are
//! all `+I`, with an op column where the regular join's changelog mode has
//! one (the mode does not depend on the plan's shape).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array, UInt32Builder, new_null_array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::join::{key_rows, pair_matches};
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_plan::join::JoinKind;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::snapshot::KEY_GROUP_COLUMN;

/// A lookup join of a stream (input 0) with a bounded table (input 1).
#[derive(Debug, Clone)]
pub struct LookupJoin {
    /// `Inner` or `Left` (a lookup join); also `Right`, `Semi`, `Anti`
    /// (a broadcast join), the outer side being the stream.
    pub kind: JoinKind,
    /// The stream's key expressions, then the table's.
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    /// The rest of the condition, over the SQL join's left then right columns.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// The stream's columns and the table's.
    pub inputs: [SchemaRef; 2],
    /// The SQL join's left columns then its right ones (the left only for
    /// a semi or anti join), with an op column where its mode has one.
    pub schema: SchemaRef,
    /// Which side of the SQL join the table is (1 for a lookup join).
    pub table_side: usize,
    /// A regular join planned with its small bounded side broadcast, not a
    /// `FOR SYSTEM_TIME AS OF` lookup join.
    pub broadcast: bool,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl LookupJoin {
    /// The SQL join's inputs in its order (left, right).
    fn sql_inputs(&self) -> [SchemaRef; 2] {
        match self.table_side {
            0 => [self.inputs[1].clone(), self.inputs[0].clone()],
            _ => self.inputs.clone(),
        }
    }

    /// Whether stream rows without a match come out padded with NULLs.
    fn stream_outer(&self) -> bool {
        matches!(
            (self.kind, self.table_side),
            (JoinKind::Left, 1) | (JoinKind::Right, 0)
        )
    }

    fn key_types(&self) -> Result<Vec<DataType>> {
        super::key_types(&self.keys, &self.inputs[0])
    }

    /// Waiting stream rows: `_key_group` (0: not keyed), then its columns.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.inputs[0].fields().iter().map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for LookupJoin {
    fn replayed_inputs(&self) -> Vec<usize> {
        vec![1]
    }

    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let fields = |s: &SchemaRef| {
            s.fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect()
        };
        Ok(Box::new(LookupJoinOperator {
            table_rows: RowConverter::new(fields(&self.inputs[1]))?,
            keys_of: RowConverter::new(self.key_types()?.into_iter().map(SortField::new).collect())?,
            table: HashMap::new(),
            complete: false,
            waiting: Vec::new(),
            spec: Arc::new(self.clone()),
        }))
    }
}

struct LookupJoinOperator {
    spec: Arc<LookupJoin>,
    table_rows: RowConverter,
    keys_of: RowConverter,
    /// The table's rows by key.
    table: HashMap<Box<[u8]>, Vec<Box<[u8]>>>,
    /// Whether the table input has ended.
    complete: bool,
    /// Stream batches that came before the table was complete.
    waiting: Vec<RecordBatch>,
}

impl LookupJoinOperator {
    fn load(&mut self, batch: &RecordBatch) -> Result<()> {
        let (keys, nulls) = key_rows(
            &self.spec.keys[1],
            &self.spec.key_types()?,
            &self.keys_of,
            batch,
            false,
        )?;
        let rows = self.table_rows.convert_columns(batch.columns())?;
        for i in 0..batch.num_rows() {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                continue;
            }
            self.table
                .entry(keys.row(i).as_ref().into())
                .or_default()
                .push(rows.row(i).as_ref().into());
        }
        Ok(())
    }

    /// Joins stream rows with the table.
    fn probe(&self, batch: &RecordBatch, out: &mut Output) -> Result<()> {
        let (keys, nulls) = key_rows(
            &self.spec.keys[0],
            &self.spec.key_types()?,
            &self.keys_of,
            batch,
            false,
        )?;
        let parser = self.table_rows.parser();
        let (mut rows, mut found) = (Vec::new(), Vec::new());
        for i in 0..batch.num_rows() {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                continue;
            }
            for row in self.table.get(keys.row(i).as_ref()).into_iter().flatten() {
                rows.push(i as u32);
                found.push(parser.parse(row));
            }
        }
        let table_columns = match found.is_empty() {
            true => self.spec.inputs[1]
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 0))
                .collect(),
            false => self.table_rows.convert_rows(found)?,
        };
        let pairs = UInt32Array::from(rows.clone());
        let matched = pair_matches(
            self.spec.filter.as_ref(),
            &self.spec.sql_inputs(),
            1 - self.spec.table_side,
            batch,
            &pairs,
            &table_columns,
        )?;
        let (stream_side, table_side) = self.pick(batch.num_rows(), &rows, &matched);
        if stream_side.is_empty() {
            return Ok(());
        }
        let stream_columns = batch
            .columns()
            .iter()
            .map(|c| Ok(take(c, &stream_side, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let mut columns = match self.spec.kind.is_semi_or_anti() {
            true => stream_columns,
            false => {
                let table_columns = table_columns
                    .iter()
                    .map(|c| match c.is_empty() {
                        true => Ok(new_null_array(c.data_type(), stream_side.len())),
                        false => Ok(take(c, &table_side, None)?),
                    })
                    .collect::<Result<Vec<ArrayRef>>>()?;
                match self.spec.table_side {
                    0 => table_columns.into_iter().chain(stream_columns).collect(),
                    _ => stream_columns.into_iter().chain(table_columns).collect(),
                }
            }
        };
        if weir_common::changelog::has_op(&self.spec.schema) {
            columns.push(Arc::new(arrow::array::Int8Array::from(vec![
                weir_common::changelog::RowKind::Insert
                    as i8;
                stream_side.len()
            ])));
        }
        out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?);
        Ok(())
    }

    /// The output pairs, by stream row and table row (NULL: padded) from the
    /// candidate pairs (stream row `rows[p]`, table row `p`) that `matched`.
    fn pick(&self, n: usize, rows: &[u32], matched: &[bool]) -> (UInt32Array, UInt32Array) {
        let (mut stream_side, mut table_side) = (UInt32Builder::new(), UInt32Builder::new());
        let mut joined = vec![false; n];
        for (p, ok) in matched.iter().enumerate() {
            if *ok {
                let first = !joined[rows[p] as usize];
                joined[rows[p] as usize] = true;
                if self.spec.kind == JoinKind::Semi && first {
                    stream_side.append_value(rows[p]);
                    table_side.append_null();
                } else if !self.spec.kind.is_semi_or_anti() {
                    stream_side.append_value(rows[p]);
                    table_side.append_value(p as u32);
                }
            }
        }
        if self.spec.stream_outer() || self.spec.kind == JoinKind::Anti {
            for (i, hit) in joined.iter().enumerate() {
                if !hit {
                    stream_side.append_value(i as u32);
                    table_side.append_null();
                }
            }
        }
        (stream_side.finish(), table_side.finish())
    }

    fn flush(&mut self, out: &mut Output) -> Result<()> {
        for batch in std::mem::take(&mut self.waiting) {
            self.probe(&batch, out)?;
        }
        Ok(())
    }
}

impl Operator for LookupJoinOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        match (input, self.complete) {
            (0, true) => self.probe(&batch, out),
            (0, false) => {
                self.waiting.push(batch);
                Ok(())
            }
            _ => self.load(&batch),
        }
    }

    fn end_input(&mut self, input: usize, out: &mut Output) -> Result<()> {
        if input == 1 {
            self.complete = true;
            self.flush(out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.complete = true;
        self.flush(out)
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.waiting.is_empty() {
            return Ok(None);
        }
        let waiting = arrow::compute::concat_batches(&self.spec.inputs[0], &self.waiting)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(vec![0; waiting.num_rows()]))];
        columns.extend(waiting.columns().iter().cloned());
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: Some(RecordBatch::try_new(self.spec.state_schema(), columns)?),
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(&rows, &self.spec.state_schema(), &self.spec.name)?;
        let columns = rows.columns()[1..].to_vec();
        let batch = RecordBatch::try_new(self.spec.inputs[0].clone(), columns)
            .map_err(|e| Error::State(format!("{}: waiting rows: {e}", self.spec.name.clone())))?;
        self.waiting.push(batch);
        Ok(())
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(weir_state::snapshot::schema_signature(
            &self.spec.state_schema(),
        )))
    }
}
