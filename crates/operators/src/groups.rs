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

/// Groups changed since they were last taken, each once (what an
/// incremental checkpoint writes).
#[derive(Default)]
pub struct ChangedGroups {
    flags: Vec<bool>,
    groups: Vec<usize>,
}

impl ChangedGroups {
    /// Marks `group` changed.
    pub fn mark(&mut self, group: usize) {
        if self.flags.len() <= group {
            self.flags.resize(group + 1, false);
        }
        if !std::mem::replace(&mut self.flags[group], true) {
            self.groups.push(group);
        }
    }

    /// Marks each of `groups` changed.
    pub fn mark_all(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.mark(*g));
    }

    /// The groups marked since the last call, in the order first marked.
    pub fn take(&mut self) -> Vec<usize> {
        let groups = std::mem::take(&mut self.groups);
        groups.iter().for_each(|g| self.flags[*g] = false);
        groups
    }

    /// Whether `group` is marked.
    pub fn has(&self, group: usize) -> bool {
        self.flags.get(group).copied().unwrap_or(false)
    }

    /// Whether no group is marked.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::ChangedGroups;

    #[test]
    fn changed_groups_are_taken_once_each_in_the_order_first_marked() {
        let mut changed = ChangedGroups::default();
        changed.mark_all(&[5, 2, 5, 9, 2]);
        assert!(changed.has(9) && !changed.has(3));
        assert_eq!(changed.take(), vec![5, 2, 9]);
        assert!(changed.is_empty() && !changed.has(5));
        changed.mark(2);
        assert_eq!(changed.take(), vec![2]);
    }
}
