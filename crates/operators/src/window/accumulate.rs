//! Accumulators of windows that are not sliced (sessions, row-count windows): a batch's aggregate arguments evaluated once, each window's rows taken (or sliced, once grouped) for its accumulators or grouped into vectorized ones, and accumulators rebuilt from state rows.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{prep_null_mask_filter, take};
use datafusion_common::ScalarValue;
use datafusion_expr::{Accumulator, GroupsAccumulator};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::GroupsAccumulatorAdapter;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::Result;

/// A batch's aggregate arguments and `FILTER (WHERE ...)` values.
pub struct Arguments {
    values: Vec<Vec<ArrayRef>>,
    filters: Vec<Option<BooleanArray>>,
}

impl Arguments {
    /// The arguments of `aggregates` (with their `filters`) over `batch`.
    pub fn of(
        aggregates: &[Arc<AggregateFunctionExpr>],
        filters: &[Option<Arc<dyn PhysicalExpr>>],
        batch: &RecordBatch,
    ) -> Result<Self> {
        let rows = batch.num_rows();
        let values = (aggregates.iter())
            .map(|a| {
                (a.expressions().iter())
                    .map(|e| e.evaluate(batch)?.into_array(rows))
                    .collect::<datafusion_common::Result<Vec<_>>>()
            })
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let filters = (filters.iter())
            .map(|f| match f {
                Some(f) => Ok(Some(f.evaluate(batch)?.into_array(rows)?.as_boolean().clone())),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arguments { values, filters })
    }

    /// The arguments of the batch's rows `indices`, in that order.
    pub fn taken(self, indices: &UInt32Array) -> Result<Self> {
        let values = (self.values.iter())
            .map(|values| {
                (values.iter())
                    .map(|v| Ok(take(v.as_ref(), indices, None)?))
                    .collect::<Result<Vec<ArrayRef>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let filters = (self.filters.iter())
            .map(|f| match f {
                Some(f) => Ok(Some(take(f, indices, None)?.as_boolean().clone())),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arguments { values, filters })
    }

    /// Adds the `len` rows from `offset` to `accumulators`, each the rows
    /// its filter passes (a null filter value does not).
    pub fn accumulate_range(
        &self,
        accumulators: &mut [Box<dyn Accumulator>],
        offset: usize,
        len: usize,
    ) -> Result<()> {
        for (i, (values, filter)) in self.values.iter().zip(&self.filters).enumerate() {
            let mut sliced: Vec<ArrayRef> = values.iter().map(|v| v.slice(offset, len)).collect();
            if let Some(filter) = filter {
                let passed = filter.slice(offset, len);
                let passed = match passed.null_count() {
                    0 => passed,
                    _ => prep_null_mask_filter(&passed),
                };
                if passed.true_count() == 0 {
                    continue;
                }
                if passed.true_count() < len {
                    sliced = (sliced.iter())
                        .map(|v| Ok(arrow::compute::filter(v.as_ref(), &passed)?))
                        .collect::<Result<Vec<ArrayRef>>>()?;
                }
            }
            accumulators[i].update_batch(&sliced)?;
        }
        Ok(())
    }

    /// Adds every row to the group `groups[row]` of `accumulators` (of
    /// `total` groups), each the rows its filter passes.
    pub fn update_groups(
        &self,
        accumulators: &mut [Box<dyn GroupsAccumulator>],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        for ((accumulator, values), filter) in accumulators.iter_mut().zip(&self.values).zip(&self.filters) {
            accumulator.update_batch(values, groups, filter.as_ref(), total)?;
        }
        Ok(())
    }

    /// Adds `rows` of the batch (in their order) to `accumulators`, each
    /// the rows its filter passes.
    pub fn accumulate(&self, accumulators: &mut [Box<dyn Accumulator>], rows: &[u32]) -> Result<()> {
        for (i, (values, filter)) in self.values.iter().zip(&self.filters).enumerate() {
            let indices: Vec<u32> = match filter {
                Some(f) => (rows.iter().copied())
                    .filter(|r| f.is_valid(*r as usize) && f.value(*r as usize))
                    .collect(),
                None => rows.to_vec(),
            };
            if indices.is_empty() {
                continue;
            }
            let indices = UInt32Array::from(indices);
            let taken = (values.iter())
                .map(|v| Ok(take(v.as_ref(), &indices, None)?))
                .collect::<Result<Vec<ArrayRef>>>()?;
            accumulators[i].update_batch(&taken)?;
        }
        Ok(())
    }
}

/// A `GroupsAccumulator` for each of `aggregates`: its own where it has
/// one, else its row accumulators behind DataFusion's adapter.
pub fn groups_accumulators(
    aggregates: &[Arc<AggregateFunctionExpr>],
) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
    aggregates
        .iter()
        .map(|a| -> Result<Box<dyn GroupsAccumulator>> {
            if a.groups_accumulator_supported() {
                Ok(a.create_groups_accumulator()?)
            } else {
                let a = a.clone();
                Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                    a.create_accumulator()
                })))
            }
        })
        .collect()
}

/// Accumulators' states as columns: a column of values per state field
/// (each aggregate's fields one after another), a row per `push`.
#[derive(Default)]
pub struct StateColumns(Vec<Vec<ScalarValue>>);

impl StateColumns {
    /// Appends the states of `accumulators` as a row. Reading a state may
    /// consume an accumulator, so with `rebuild` (their aggregates) each is
    /// rebuilt from the state read.
    pub fn push(
        &mut self,
        accumulators: &mut Vec<Box<dyn Accumulator>>,
        rebuild: Option<&[Arc<AggregateFunctionExpr>]>,
    ) -> Result<()> {
        let mut column = 0;
        let mut rebuilt = Vec::new();
        for (i, accumulator) in accumulators.iter_mut().enumerate() {
            let state = accumulator.state()?;
            if let Some(aggregates) = rebuild {
                let arrays = (state.iter())
                    .map(|v| v.to_array())
                    .collect::<datafusion_common::Result<Vec<ArrayRef>>>()?;
                let mut fresh = aggregates[i].create_accumulator()?;
                fresh.merge_batch(&arrays)?;
                rebuilt.push(fresh);
            }
            for value in state {
                if self.0.len() <= column {
                    self.0.push(Vec::new());
                }
                self.0[column].push(value);
                column += 1;
            }
        }
        if rebuild.is_some() {
            *accumulators = rebuilt;
        }
        Ok(())
    }

    /// The columns, as arrays.
    pub fn into_arrays(self) -> Result<Vec<ArrayRef>> {
        (self.0.into_iter())
            .map(|values| Ok(ScalarValue::iter_to_array(values)?))
            .collect()
    }
}

/// Accumulators of `aggregates` holding the states of row `row` of state
/// columns `columns` (each aggregate's state fields one after another).
pub fn restored_accumulators(
    aggregates: &[Arc<AggregateFunctionExpr>],
    columns: &[ArrayRef],
    row: usize,
) -> Result<Vec<Box<dyn Accumulator>>> {
    let mut offset = 0;
    let mut accumulators = Vec::with_capacity(aggregates.len());
    for aggregate in aggregates {
        let mut accumulator = aggregate.create_accumulator()?;
        let width = aggregate.state_fields()?.len();
        let state: Vec<ArrayRef> = (columns[offset..offset + width].iter())
            .map(|c| c.slice(row, 1))
            .collect();
        accumulator.merge_batch(&state)?;
        offset += width;
        accumulators.push(accumulator);
    }
    Ok(accumulators)
}
