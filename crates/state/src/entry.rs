//! How a spilled operator lays out a key's store entry: its key group and key as the store key, an index of times after every key group, and values of length-prefixed parts.
//!
//! ```text
//!  key group | key                   ->  the key's state (the operator's parts)
//!  FF FF FF FF | time | key group | key  ->  (nothing): an index by time, read by a watermark
//! ```
//!
//! Session windows index a key's sessions by their ends, an OVER
//! aggregation a partition by the time of its first row waiting for the
//! watermark.

use crate::store::{ordered, time_of};
use crate::{Error, Result};

fn cut_short() -> Error {
    Error::State("a spilled state entry is cut short".into())
}

/// The first four bytes of an index entry's key, after every key group.
pub const INDEX: [u8; 4] = [0xFF; 4];

/// The store key of a key's state: key group (big-endian, so the store is
/// in key-group order), then the key's bytes.
pub fn entry_key(group: u32, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + key.len());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.extend_from_slice(key);
    bytes
}

/// The index key of time `time` of the key stored under `entry`.
pub fn index_key(time: i64, entry: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(12 + entry.len());
    bytes.extend_from_slice(&INDEX);
    bytes.extend_from_slice(&ordered(time));
    bytes.extend_from_slice(entry);
    bytes
}

/// The index keys from `from` to `to` (both included), for a range scan.
pub fn index_range(from: i64, to: i64) -> (Vec<u8>, Vec<u8>) {
    (index_key(from, &[]), index_key(to, &[0xFF; 5]))
}

/// The time and the entry key an index key names.
pub fn split_index_key(bytes: &[u8]) -> Result<(i64, &[u8])> {
    let time = time_of(bytes.get(4..).ok_or_else(cut_short)?).ok_or_else(cut_short)?;
    Ok((time, bytes.get(12..).ok_or_else(cut_short)?))
}

/// Whether a store key is an index entry's (not a key's state).
pub fn is_index(key: &[u8]) -> bool {
    key.starts_with(&INDEX)
}

/// The key group and key bytes of an entry key.
pub fn split_entry_key(key: &[u8]) -> Result<(u32, &[u8])> {
    let head: [u8; 4] = key.get(..4).ok_or_else(cut_short)?.try_into().expect("4");
    Ok((u32::from_be_bytes(head), &key[4..]))
}

/// A key read back from the store: its bytes, its entry key and value.
pub type ReadBack<'k> = (&'k [u8], Vec<u8>, fjall::Slice);

/// The store's entries of those of `keys` memory lacks (`in_memory` says
/// which it has), each key once, a chunk at a time; `key_groups` gives a
/// chunk's key groups. Keys the store lacks are left out.
pub fn read_back<'k>(
    store: &crate::store::Store,
    keys: &[&'k [u8]],
    in_memory: impl Fn(&[u8]) -> bool,
    key_groups: impl Fn(&[&[u8]]) -> Result<Vec<u32>>,
) -> Result<Vec<ReadBack<'k>>> {
    let mut seen = std::collections::HashSet::new();
    let wanted: Vec<&[u8]> = (keys.iter().copied())
        .filter(|k| !in_memory(k) && seen.insert(*k))
        .collect();
    let mut found = Vec::new();
    for chunk in wanted.chunks(crate::store::WRITE_CHUNK) {
        for (key, group) in chunk.iter().zip(key_groups(chunk)?) {
            let entry = entry_key(group, key);
            if let Some(value) = store.get(&entry)? {
                found.push((*key, entry, value));
            }
        }
    }
    Ok(found)
}

/// A store value being written: its parts one after another.
#[derive(Default)]
pub struct ValueWriter(pub Vec<u8>);

impl ValueWriter {
    /// A count (of the parts that follow).
    pub fn count(&mut self, n: usize) -> &mut Self {
        self.0.extend_from_slice(&(n as u32).to_be_bytes());
        self
    }

    /// A time.
    pub fn time(&mut self, t: i64) -> &mut Self {
        self.0.extend_from_slice(&t.to_be_bytes());
        self
    }

    /// Bytes, after their length.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.count(bytes.len());
        self.0.extend_from_slice(bytes);
        self
    }
}

/// A store value being read: the parts of a [`ValueWriter`], in its order;
/// an error when the value is cut short.
pub struct ValueReader<'a>(pub &'a [u8]);

impl<'a> ValueReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let (head, rest) = (self.0.get(..n).ok_or_else(cut_short)?, &self.0[n..]);
        self.0 = rest;
        Ok(head)
    }

    /// A count.
    pub fn count(&mut self) -> Result<usize> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")) as usize)
    }

    /// A time.
    pub fn time(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }

    /// Bytes written after their length.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.count()?;
        self.take(n)
    }

    /// Whether every part was read.
    pub fn is_done(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_entry_comes_before_the_index_which_is_in_order_of_time() {
        let (a, b) = (entry_key(3, b"a"), entry_key(u32::from(u16::MAX), b"b"));
        let index = [index_key(-5, &b), index_key(-5, &a), index_key(7, &a)];
        assert!(
            a < b && b < index[0],
            "entries by key group, the index after them"
        );
        assert!(index[0] > index[1] && index[1] < index[2], "by time, then entry");
        assert_eq!(split_index_key(&index[2]).unwrap(), (7, &a[..]));
        assert!(split_index_key(&index[2][..9]).is_err());
        let (from, to) = index_range(i64::MIN, 7);
        assert!(index.iter().all(|k| (&from..=&to).contains(&k)));
        assert!(index_key(8, &[]) > to);
        assert!(is_index(&index[0]) && !is_index(&b));
        assert_eq!(split_entry_key(&b).unwrap(), (u32::from(u16::MAX), &b"b"[..]));
    }

    #[test]
    fn a_values_parts_come_back_in_their_order_and_a_cut_value_is_an_error() {
        let mut w = ValueWriter::default();
        w.time(-3).count(2).bytes(b"one").bytes(b"");
        let mut r = ValueReader(&w.0);
        assert_eq!(r.time().unwrap(), -3);
        assert_eq!(r.count().unwrap(), 2);
        assert_eq!(r.bytes().unwrap(), b"one");
        assert_eq!(r.bytes().unwrap(), b"");
        assert!(r.is_done());
        let mut cut = ValueReader(&w.0[..w.0.len() - 2]);
        cut.time().unwrap();
        cut.count().unwrap();
        assert_eq!(cut.bytes().unwrap(), b"one");
        assert!(cut.bytes().is_err(), "the last length is cut");
    }
}
