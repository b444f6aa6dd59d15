//! The keys of every group by group index, for operators that read the keys
//! of some groups only (incremental snapshots): DataFusion's group values
//! give their keys back only all at once, and by emptying themselves.

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::compute::{concat, interleave, take};

use crate::{Error, Result};

/// Chunks kept before they are concatenated into one.
const MAX_CHUNKS: usize = 32;

/// Keys by group index, appended as groups are interned.
#[derive(Debug, Default)]
pub struct KeyStore {
    /// Key columns of consecutive groups; chunk `i` starts at group `starts[i]`.
    chunks: Vec<Vec<ArrayRef>>,
    starts: Vec<usize>,
    len: usize,
}

impl KeyStore {
    /// Groups recorded.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes its keys take in memory.
    pub fn size(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .map(|c| c.get_array_memory_size())
            .sum()
    }

    /// True when no group is recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records the keys of the groups that `keys` (with `indices`, the group
    /// of each row) created: group indices are handed out in order of first
    /// appearance, so group `len` appears first, then `len + 1`, and so on.
    /// `groups` is the number of groups after interning, to check that.
    pub fn append_new(&mut self, keys: &[ArrayRef], indices: &[usize], groups: usize) -> Result<()> {
        let mut next = self.len;
        let mut rows = Vec::new();
        for (row, &group) in indices.iter().enumerate() {
            if group == next {
                rows.push(row as u32);
                next += 1;
            }
        }
        if next != groups {
            return Err(Error::Internal(format!(
                "key store: {} groups recorded, the group table has {groups}",
                next
            )));
        }
        if rows.is_empty() {
            return Ok(());
        }
        let rows = UInt32Array::from(rows);
        let chunk = keys
            .iter()
            .map(|k| Ok(take(k.as_ref(), &rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        self.chunks.push(chunk);
        self.starts.push(self.len);
        self.len = next;
        if self.chunks.len() > MAX_CHUNKS {
            self.concatenate()?;
        }
        Ok(())
    }

    /// Merges the chunks into one.
    fn concatenate(&mut self) -> Result<()> {
        let columns = self.chunks.first().map_or(0, Vec::len);
        let merged = (0..columns)
            .map(|c| {
                let parts: Vec<&dyn Array> = self.chunks.iter().map(|chunk| chunk[c].as_ref()).collect();
                Ok(concat(&parts)?)
            })
            .collect::<Result<Vec<_>>>()?;
        self.chunks = vec![merged];
        self.starts = vec![0];
        Ok(())
    }

    /// The keys of `groups`, in that order (no columns for keyless groups).
    pub fn keys(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let columns = self.chunks.first().map_or(0, Vec::len);
        let picks = groups
            .iter()
            .map(|&g| {
                if g >= self.len {
                    return Err(Error::Internal(format!(
                        "key store: no group {g} of {}",
                        self.len
                    )));
                }
                let chunk = self.starts.partition_point(|s| *s <= g) - 1;
                Ok((chunk, g - self.starts[chunk]))
            })
            .collect::<Result<Vec<_>>>()?;
        (0..columns)
            .map(|c| {
                let parts: Vec<&dyn Array> = self.chunks.iter().map(|chunk| chunk[c].as_ref()).collect();
                Ok(interleave(&parts, &picks)?)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::Groups;
    use arrow::array::{AsArray, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn the_keys_of_any_groups_come_back_as_they_were_interned() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
        let mut groups = Groups::new(&schema).unwrap();
        let mut store = KeyStore::default();
        let mut indices = Vec::new();
        for batch in 0..40 {
            let keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(
                ["a", "b"].iter().map(|p| format!("{p}{}", batch / 2)),
            ))];
            groups.intern(&keys, 2, &mut indices).unwrap();
            store.append_new(&keys, &indices, groups.len()).unwrap();
        }
        assert_eq!(store.len(), 40);
        assert!(store.chunks.len() <= MAX_CHUNKS, "chunks are concatenated");
        let keys = store.keys(&[39, 0, 3]).unwrap();
        let keys = keys[0].as_string::<i32>();
        assert_eq!(
            (0..3).map(|i| keys.value(i)).collect::<Vec<_>>(),
            ["b19", "a0", "b1"]
        );
        assert!(store.keys(&[40]).is_err());
    }
}
