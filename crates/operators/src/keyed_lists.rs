//! The skeleton of an operator that keeps a list of rows per key and turns
//! each input change into changes of what the key holds: `ChangelogNormalize`
//! (a list of at most one row) and `SinkMaterializer` (every row of a key, in
//! arrival order). They differ only in [`ChangeOfKey`]; reading batches,
//! spilling, snapshots (full, incremental, spilled) and restore are here.

use std::marker::PhantomData;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use crate::Result;
use weir_common::changelog::{self, RowKind};
use weir_common::ids::CheckpointId;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, Output, TaskContext};
use weir_state::incremental::DeltaKind;
use weir_state::keyed_rows::{
    KeyedRows, columns_of, decode_state_rows, row_converter, rows_snapshot, state_rows_of,
};
use weir_state::snapshot::{KEY_GROUP_COLUMN, schema_signature};
use weir_state::store::{Entry, in_chunks};

/// What one input change does to its key's rows, and what it emits.
pub trait ChangeOfKey: Send + 'static {
    /// Whether a key may hold several rows, whose order the snapshot keeps
    /// (a `_position` column after the row's).
    const POSITIONED: bool;

    /// Applies the change `kind` of `row` to `key`'s rows in `lists` (read
    /// with `get`, changed through `rows_mut`), pushing what to emit.
    fn apply(
        lists: &mut KeyedRows,
        key: &[u8],
        kind: RowKind,
        row: Box<[u8]>,
        emitted: &mut Vec<(RowKind, Box<[u8]>)>,
    );
}

/// The state's schema: `_key_group`, the row's columns (of `schema`, which
/// has the op column), and with `positioned` a `_position`.
pub fn state_schema(schema: &SchemaRef, positioned: bool) -> SchemaRef {
    let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
    fields.extend(
        changelog::without_op(schema)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone()),
    );
    if positioned {
        fields.push(Field::new("_position", DataType::Int64, false));
    }
    Arc::new(Schema::new(fields))
}

/// An operator keeping rows per key, with its change `C`.
pub struct KeyedListsOperator<C> {
    name: String,
    /// The key's columns.
    key: Vec<usize>,
    /// Input and output schema (with the op column).
    schema: SchemaRef,
    state_schema: SchemaRef,
    /// Whole rows as comparable bytes.
    rows_of: RowConverter,
    /// Keys as bytes.
    keys_of: RowConverter,
    lists: KeyedRows,
    max_parallelism: usize,
    change: PhantomData<C>,
}

impl<C: ChangeOfKey> KeyedListsOperator<C> {
    /// The operator named `name` keeping the rows of `schema` (with the op
    /// column) by the columns `key`.
    pub fn new(name: &str, key: &[usize], schema: &SchemaRef, ctx: &TaskContext) -> Result<Self> {
        let data = changelog::without_op(schema);
        let key_types: Vec<DataType> = key.iter().map(|k| data.field(*k).data_type().clone()).collect();
        Ok(KeyedListsOperator {
            name: name.to_string(),
            key: key.to_vec(),
            schema: schema.clone(),
            state_schema: state_schema(schema, C::POSITIONED),
            rows_of: row_converter(&data)?,
            keys_of: RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect())?,
            lists: KeyedRows::new(
                &key_types,
                ctx.max_parallelism,
                ctx.spill.clone(),
                ctx.incremental,
            )?,
            max_parallelism: ctx.max_parallelism,
            change: PhantomData,
        })
    }

    fn key_columns(&self, columns: &[ArrayRef]) -> Vec<ArrayRef> {
        self.key.iter().map(|k| columns[*k].clone()).collect()
    }

    /// The rows of spilled state as a snapshot, read by its writer.
    fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        let schema = self.state_schema.clone();
        let rows_of = row_converter(&changelog::without_op(&self.schema))?;
        let decode = move |entries: &[Entry]| -> Result<Option<RecordBatch>> {
            Ok(decode_state_rows(&schema, &rows_of, entries, C::POSITIONED)?.map(|(rows, _)| rows))
        };
        Ok(OperatorSnapshot {
            runs: Vec::new(),
            deferred: self.lists.spilled_snapshot(decode)?,
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: None,
        })
    }

    /// Rows in order of key group and (positioned) position: a key's rows
    /// in their order.
    fn in_restore_order(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        if !C::POSITIONED {
            return Ok(rows.clone());
        }
        let sort = |i: usize| arrow::compute::SortColumn {
            values: rows.column(i).clone(),
            options: None,
        };
        let order = arrow::compute::lexsort_to_indices(&[sort(0), sort(rows.num_columns() - 1)], None)?;
        Ok(arrow::compute::take_record_batch(rows, &order)?)
    }
}

impl<C: ChangeOfKey> Operator for KeyedListsOperator<C> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(&batch)?;
        let data = changelog::data(&batch);
        let keys = self.keys_of.convert_columns(&self.key_columns(data.columns()))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        if self.lists.has_spilled() {
            let list: Vec<&[u8]> = (0..data.num_rows()).map(|i| keys.row(i).data()).collect();
            self.lists.load(&list)?;
        }
        let mut emitted = Vec::new();
        for (i, kind) in kinds.into_iter().enumerate() {
            let key = keys.row(i).data();
            C::apply(
                &mut self.lists,
                key,
                kind,
                rows.row(i).data().into(),
                &mut emitted,
            );
            self.lists.settle(key);
        }
        if !emitted.is_empty() {
            let columns = columns_of(&self.rows_of, emitted.iter().map(|(_, r)| &r[..]))?;
            let kinds: Vec<RowKind> = emitted.iter().map(|(k, _)| *k).collect();
            out.batch(changelog::with_kinds(&self.schema, columns, &kinds)?);
        }
        self.lists.spill_if_full(data.num_rows())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.lists.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let stored: Vec<(usize, &[u8])> = (self.lists.iter())
            .flat_map(|(_, list)| list.iter().map(|r| &r[..]).enumerate())
            .collect();
        let of = (&self.rows_of, &self.key[..]);
        let rows = state_rows_of(
            &self.state_schema,
            of,
            &stored,
            self.max_parallelism,
            C::POSITIONED,
        )?;
        let rows = rows.map(weir_state::snapshot::sorted_by_key_group).transpose()?;
        Ok(rows.map(|rows| rows_snapshot(Some(rows))))
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.lists.is_incremental().then_some(DeltaKind::Replace)
    }

    /// Every key's rows (`full`), or those of the keys changed since the
    /// last snapshot and a deleting row for each that has none now.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if !self.lists.is_incremental() {
            return self.snapshot(checkpoint);
        }
        let of = (&self.rows_of, &self.key[..]);
        let snapshot = (self.lists).snapshot_delta(full, &self.state_schema, of, C::POSITIONED)?;
        Ok(Some(snapshot))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.state_schema, &self.name)?;
        let rows = self.in_restore_order(rows)?;
        let width = self.state_schema.fields().len() - C::POSITIONED as usize;
        // A chunk at a time; the rows of a key before a chunk may be in the store.
        for chunk in in_chunks(&rows) {
            let data = &chunk.columns()[1..width];
            let keys = self.keys_of.convert_columns(&self.key_columns(data))?;
            let stored = self.rows_of.convert_columns(data)?;
            let list: Vec<&[u8]> = (0..chunk.num_rows()).map(|i| keys.row(i).data()).collect();
            if C::POSITIONED {
                // Unpositioned, a key holds one row: none is in the store yet.
                self.lists.load(&list)?;
            }
            for (i, key) in list.iter().enumerate() {
                self.lists.rows_mut(key).push(stored.row(i).data().into());
            }
            self.lists.spill_if_over()?;
        }
        Ok(())
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.state_schema)))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}
