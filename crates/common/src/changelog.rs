//! Row kinds on batches: how an updating stream carries Flink's `+I`, `-U`,
//! `+U` and `-D`.
//!
//! An insert-only batch is a plain batch: no extra column, no cost. A batch
//! of an updating stream has one more column at the end, [`OP_COLUMN`]
//! (`Int8`, never null), holding each row's [`RowKind`] code. Operators find
//! data columns by position, so the trailing column changes no index; the
//! exchange splits it with the rows, and channel-state and result files keep
//! it like any column. Whether a stream updates is decided when the query is
//! planned (the plan crate's `changelog` module) and shows in its schema.
//!
//! ```text
//!   k | cnt | __op          applied to an empty table:   k | cnt
//!   a |   1 |  0  (+I)                                     a |   2
//!   a |   1 |  1  (-U)                                     b |   1
//!   a |   2 |  2  (+U)
//!   b |   1 |  0  (+I)
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};

use crate::{Error, Result};

/// The name of the row-kind column of an updating batch.
pub const OP_COLUMN: &str = "__op";

/// The row kinds of a stream (Flink's `RowKind`), as the values the op
/// column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert = 0,
    /// `-U`: the old row of an update.
    UpdateBefore = 1,
    /// `+U`: the new row of an update.
    UpdateAfter = 2,
    /// `-D`: a row removed.
    Delete = 3,
}

impl RowKind {
    /// Every kind, in code order.
    pub const ALL: [RowKind; 4] = [
        RowKind::Insert,
        RowKind::UpdateBefore,
        RowKind::UpdateAfter,
        RowKind::Delete,
    ];

    /// The kind of op-column value `code`.
    pub fn from_code(code: i8) -> Option<RowKind> {
        RowKind::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// `+I`, `-U`, `+U` or `-D`, as Flink prints it.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// The kind written as [`RowKind::short`] shows it.
    pub fn parse(text: &str) -> Option<RowKind> {
        RowKind::ALL.into_iter().find(|k| k.short() == text)
    }

    /// Whether the row is taken away (`-U`, `-D`) rather than added.
    pub fn is_retraction(self) -> bool {
        matches!(self, RowKind::UpdateBefore | RowKind::Delete)
    }
}

/// The op column's field.
pub fn op_field() -> Field {
    Field::new(OP_COLUMN, DataType::Int8, false)
}

/// Whether batches of `schema` carry row kinds.
pub fn has_op(schema: &Schema) -> bool {
    schema
        .fields()
        .last()
        .is_some_and(|f| f.name() == OP_COLUMN && f.data_type() == &DataType::Int8)
}

/// `schema` with the op column added (unchanged when it has one).
pub fn with_op(schema: &SchemaRef) -> SchemaRef {
    if has_op(schema) {
        return schema.clone();
    }
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(op_field()));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `schema` without its op column.
pub fn without_op(schema: &SchemaRef) -> SchemaRef {
    if !has_op(schema) {
        return schema.clone();
    }
    let fields: Vec<Arc<Field>> = schema.fields()[..schema.fields().len() - 1].to_vec();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The op column of a batch, when it has one.
pub fn ops(batch: &RecordBatch) -> Option<&Int8Array> {
    if !has_op(&batch.schema()) {
        return None;
    }
    batch.columns().last()?.as_any().downcast_ref::<Int8Array>()
}

/// The kind of each row of `batch` (all `+I` for an insert-only batch).
pub fn row_kinds(batch: &RecordBatch) -> Result<Vec<RowKind>> {
    match ops(batch) {
        None => Ok(vec![RowKind::Insert; batch.num_rows()]),
        Some(ops) => ops
            .values()
            .iter()
            .map(|&code| {
                RowKind::from_code(code)
                    .ok_or_else(|| Error::Execution(format!("a row of an updating stream has kind {code}")))
            })
            .collect(),
    }
}

/// The batch's data columns, without the op column.
pub fn data(batch: &RecordBatch) -> RecordBatch {
    if !has_op(&batch.schema()) {
        return batch.clone();
    }
    let mut data = batch.clone();
    data.remove_column(batch.num_columns() - 1);
    data
}

/// For display: the batch with its kinds as a first text column `op` (as
/// Flink's tableau shows a changelog); an insert-only batch unchanged.
pub fn with_kind_column(batch: &RecordBatch) -> Result<RecordBatch> {
    if ops(batch).is_none() {
        return Ok(batch.clone());
    }
    let kinds = row_kinds(batch)?;
    let data = data(batch);
    let mut fields = vec![Arc::new(Field::new("op", DataType::Utf8, false))];
    fields.extend(data.schema().fields().iter().cloned());
    let mut columns: Vec<ArrayRef> = vec![Arc::new(arrow::array::StringArray::from_iter_values(
        kinds.iter().map(|k| k.short()),
    ))];
    columns.extend(data.columns().iter().cloned());
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// `columns` (the data of `schema` without its op column) with the kinds
/// `kinds` added as the op column.
pub fn with_kinds(schema: &SchemaRef, mut columns: Vec<ArrayRef>, kinds: &[RowKind]) -> Result<RecordBatch> {
    columns.push(Arc::new(Int8Array::from_iter_values(
        kinds.iter().map(|k| *k as i8),
    )));
    Ok(RecordBatch::try_new(with_op(schema), columns)?)
}

/// A batch of `schema` (which has an op column) from a batch that may lack
/// one: its rows become inserts.
pub fn as_updating(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if has_op(&batch.schema()) {
        return Ok(batch);
    }
    let rows = batch.num_rows();
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(Int8Array::from_value(RowKind::Insert as i8, rows)));
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// A changelog applied to an empty table: the table it describes.
///
/// Rows are counted by value (a bag, as SQL tables are): `+I`/`+U` add one,
/// `-U`/`-D` take one away. Taking away a row that is not there is an error:
/// a correct changelog never does.
pub struct Materialized {
    schema: SchemaRef,
    converter: RowConverter,
    rows: HashMap<OwnedRow, i64>,
    /// Rows in the order they first appeared, so output is stable.
    order: Vec<OwnedRow>,
}

impl Materialized {
    /// An empty table with the data columns of `schema`.
    pub fn new(schema: &SchemaRef) -> Result<Self> {
        let schema = without_op(schema);
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Materialized {
            converter: RowConverter::new(fields)?,
            schema,
            rows: HashMap::new(),
            order: Vec::new(),
        })
    }

    /// Applies every row of `batch`.
    pub fn apply(&mut self, batch: &RecordBatch) -> Result<()> {
        let kinds = row_kinds(batch)?;
        let rows = self.converter.convert_columns(data(batch).columns())?;
        for (row, kind) in rows.iter().zip(kinds) {
            let delta = if kind.is_retraction() { -1 } else { 1 };
            let owned = row.owned();
            let count = self.rows.entry(owned.clone()).or_insert_with(|| {
                self.order.push(owned);
                0
            });
            *count += delta;
            if *count < 0 {
                return Err(Error::Execution(format!(
                    "the changelog retracts a row it never added ({})",
                    kind.short()
                )));
            }
        }
        Ok(())
    }

    /// The table now, in the order rows first appeared (a row added twice
    /// appears twice).
    pub fn table(&self) -> Result<RecordBatch> {
        let mut picked = Vec::new();
        for row in &self.order {
            for _ in 0..self.rows[row] {
                picked.push(row.row());
            }
        }
        if picked.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let columns = self.converter.convert_rows(picked)?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::Int64Type;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("cnt", DataType::Int64, false),
        ]))
    }

    fn changes(rows: &[(&str, i64, RowKind)]) -> RecordBatch {
        let keys: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0)));
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
        let kinds: Vec<RowKind> = rows.iter().map(|r| r.2).collect();
        with_kinds(&schema(), vec![keys, counts], &kinds).unwrap()
    }

    #[test]
    fn row_kinds_have_flinks_codes_and_names() {
        for (code, kind) in RowKind::ALL.iter().enumerate() {
            assert_eq!(RowKind::from_code(code as i8), Some(*kind));
            assert_eq!(RowKind::parse(kind.short()), Some(*kind));
        }
        assert_eq!(RowKind::from_code(4), None);
        assert_eq!(RowKind::from_code(-1), None);
        let names: Vec<&str> = RowKind::ALL.iter().map(|k| k.short()).collect();
        assert_eq!(names, ["+I", "-U", "+U", "-D"]);
    }

    #[test]
    fn an_insert_only_batch_has_no_op_column_and_all_its_rows_insert() {
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(Int64Array::from(vec![1])),
            ],
        )
        .unwrap();
        assert!(ops(&batch).is_none());
        assert_eq!(row_kinds(&batch).unwrap(), vec![RowKind::Insert]);
        let updating = as_updating(batch, &with_op(&schema())).unwrap();
        assert_eq!(updating.num_columns(), 3);
        assert_eq!(data(&updating).num_columns(), 2);
    }

    #[test]
    fn a_changelog_applied_to_an_empty_table_gives_its_rows() {
        let batch = changes(&[
            ("a", 1, RowKind::Insert),
            ("b", 1, RowKind::Insert),
            ("a", 1, RowKind::UpdateBefore),
            ("a", 2, RowKind::UpdateAfter),
            ("b", 1, RowKind::Delete),
        ]);
        let mut table = Materialized::new(&batch.schema()).unwrap();
        table.apply(&batch).unwrap();
        let result = table.table().unwrap();
        assert_eq!(result.num_columns(), 2);
        assert_eq!(result.column(0).as_string::<i32>().value(0), "a");
        assert_eq!(
            result.column(1).as_primitive::<Int64Type>().values().to_vec(),
            vec![2]
        );
    }

    #[test]
    fn retracting_a_row_never_added_is_an_error() {
        let mut table = Materialized::new(&with_op(&schema())).unwrap();
        let error = table.apply(&changes(&[("a", 1, RowKind::Delete)])).unwrap_err();
        assert!(error.to_string().contains("never added"), "{error}");
    }
}
