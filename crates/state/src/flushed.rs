//! The keys a spilling operator wrote to its store since its last snapshot, packed: what its next incremental snapshot reads back.
//!
//! Between two snapshots a spill can write every key in memory to the store,
//! a million keys under a 256 MB budget. A set of owned 12-byte keys takes
//! 41 to 66 bytes a key (a 16-byte allocation, a 25-byte slot, and up to as
//! much again in spare slots), outside the budget; here a key takes its
//! bytes and an 8-byte offset, and is deduplicated only when the snapshot
//! reads the keys back, in order.

/// Keys in the order they were written, duplicates included.
#[derive(Debug, Default)]
pub struct FlushedKeys {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl FlushedKeys {
    /// Notes that `key` was written to the store.
    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// Whether no key was written.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Forgets every key, giving their memory back.
    pub fn clear(&mut self) {
        *self = FlushedKeys::default();
    }

    /// Bytes it takes in memory.
    pub fn memory_size(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Calls `each` with the keys, each once and in byte order, `chunk` at a
    /// time, leaving none.
    pub fn drain_sorted(
        &mut self,
        chunk: usize,
        mut each: impl FnMut(&[&[u8]]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let keys = std::mem::take(self);
        let mut order: Vec<usize> = (0..keys.ends.len()).collect();
        order.sort_unstable_by(|a, b| keys.key(*a).cmp(keys.key(*b)));
        order.dedup_by(|a, b| keys.key(*a) == keys.key(*b));
        for indices in order.chunks(chunk.max(1)) {
            let refs: Vec<&[u8]> = indices.iter().map(|i| keys.key(*i)).collect();
            each(&refs)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_keys_come_back_once_each_in_order_a_chunk_at_a_time_and_are_gone_after() {
        let mut keys = FlushedKeys::default();
        for key in [&b"b"[..], b"a", b"ab", b"b", b"", b"a"] {
            keys.push(key);
        }
        let mut chunks = Vec::new();
        keys.drain_sorted(2, |chunk| {
            chunks.push(chunk.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
        let expected: Vec<Vec<Vec<u8>>> = vec![
            vec![b"".to_vec(), b"a".to_vec()],
            vec![b"ab".to_vec(), b"b".to_vec()],
        ];
        assert_eq!(chunks, expected);
        let mut again = 0;
        keys.drain_sorted(2, |_| {
            again += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, 0, "drained");
        assert_eq!(keys.memory_size(), 0);
    }
}
