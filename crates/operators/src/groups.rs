//! Grouping keys to dense group indices (DataFusion's `GroupValues`), shared
//! by the aggregations.

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;

use crate::Result;

/// Grouping keys → dense group indices.
pub enum Groups {
    /// Keys interned by DataFusion's group values.
    Keyed(Box<dyn GroupValues>),
    /// No keys: one group, present once a row was seen.
    Keyless(bool),
}

impl Groups {
    /// Groups of keys with `key_schema` (none: one group).
    pub fn new(key_schema: &SchemaRef) -> Result<Self> {
        Ok(if key_schema.fields().is_empty() {
            Groups::Keyless(false)
        } else {
            Groups::Keyed(new_group_values(key_schema.clone(), &GroupOrdering::None)?)
        })
    }

    /// The group of each of `rows` rows of `keys`, into `out`.
    pub fn intern(&mut self, keys: &[ArrayRef], rows: usize, out: &mut Vec<usize>) -> Result<()> {
        match self {
            Groups::Keyed(g) => g.intern(keys, out)?,
            Groups::Keyless(present) => {
                out.clear();
                out.resize(rows, 0);
                *present |= rows > 0;
            }
        }
        Ok(())
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        match self {
            Groups::Keyed(g) => g.len(),
            Groups::Keyless(present) => *present as usize,
        }
    }

    /// Bytes the groups take in memory.
    pub fn size(&self) -> usize {
        match self {
            Groups::Keyed(g) => g.size(),
            Groups::Keyless(_) => 0,
        }
    }

    /// True when there is no group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every group's keys, leaving none.
    pub fn emit(&mut self) -> Result<Vec<ArrayRef>> {
        match self {
            Groups::Keyed(g) => Ok(g.emit(EmitTo::All)?),
            Groups::Keyless(present) => {
                *present = false;
                Ok(vec![])
            }
        }
    }
}
