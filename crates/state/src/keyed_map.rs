//! A map from key bytes to keyed state that a TTL sweep walks a slice at a time: a hash table whose entries keep their buckets, so the sweep resumes where the last slice stopped.
//!
//! A `std` map can only be walked whole (`retain`), so a state TTL swept
//! the whole state at once: a pause as long as the state is large. Here a
//! sweep visits the next `n` buckets from a cursor and goes round the table;
//! entries never move when others are removed, and a table that grows only
//! shifts which entries the rest of the round visits (one may wait a round
//! longer to expire).

use std::borrow::Borrow;
use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Keyed state by its key's bytes (`K` is any owned form of them).
pub struct KeyedMap<K, V> {
    table: HashTable<(K, V)>,
    hasher: foldhash::fast::FixedState,
}

impl<K, V> Default for KeyedMap<K, V> {
    fn default() -> Self {
        KeyedMap {
            table: HashTable::new(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }
}

impl<K, V> std::fmt::Debug for KeyedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyedMap({} keys)", self.table.len())
    }
}

/// How many buckets of `total` a sweep visits when `elapsed` ms passed
/// since the last, to go round the table once every `period` ms (at least
/// `least`): the whole-table sweep it replaces, spread over the period.
pub fn sweep_slice(total: usize, elapsed: i64, period: i64, least: usize) -> usize {
    let share = (total as u128 * elapsed.max(0) as u128).div_ceil(period.max(1) as u128);
    (share.min(total as u128) as usize).max(least)
}

impl<K: Borrow<[u8]>, V> KeyedMap<K, V> {
    /// How many buckets the table has (what a sweep goes round).
    pub fn buckets(&self) -> usize {
        self.table.num_buckets()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The state of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let hash = self.hash(key);
        self.table.find(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v)
    }

    /// The state of `key`, to change.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let hash = self.hash(key);
        self.table
            .find_mut(hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| v)
    }

    /// Whether `key` has state.
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Sets the state of `key`; returns the state it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hash = self.hash(key.borrow());
        let hasher = &self.hasher;
        match self.table.entry(
            hash,
            |(k, _)| k.borrow() == key.borrow(),
            |(k, _)| hasher.hash_one(k.borrow()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut entry) => {
                Some(std::mem::replace(&mut entry.get_mut().1, value))
            }
            hashbrown::hash_table::Entry::Vacant(entry) => {
                entry.insert((key, value));
                None
            }
        }
    }

    /// The state of `key`, made by `make` (with its owned key) when absent.
    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> (K, V)) -> &mut V {
        let hash = self.hash(key);
        let hasher = &self.hasher;
        let entry = self.table.entry(
            hash,
            |(k, _)| k.borrow() == key,
            |(k, _)| hasher.hash_one(k.borrow()),
        );
        &mut entry.or_insert_with(make).into_mut().1
    }

    /// Takes the state of `key` away.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let hash = self.hash(key);
        match self.table.find_entry(hash, |(k, _)| k.borrow() == key) {
            Ok(entry) => Some(entry.remove().0.1),
            Err(_) => None,
        }
    }

    /// How many keys have state.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// How many entries fit before the table grows (its slots).
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Every key and its state, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.table.iter().map(|(k, v)| (k, v))
    }

    /// Every key, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.table.iter().map(|(k, _)| k)
    }

    /// Every key's state, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter().map(|(_, v)| v)
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.table.retain(|(k, v)| keep(k, v));
    }

    /// Calls `keep` on the entries of the next `buckets` buckets from
    /// `cursor` (going round the table), removes those it says no to, and
    /// moves the cursor on.
    pub fn sweep(&mut self, cursor: &mut usize, buckets: usize, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let total = self.table.num_buckets();
        if total == 0 {
            return;
        }
        let start = *cursor % total;
        let end = (start + buckets).min(total);
        for index in start..end {
            if let Ok(mut entry) = self.table.get_bucket_entry(index) {
                let (k, v) = entry.get_mut();
                if !keep(k, v) {
                    entry.remove();
                }
            }
        }
        *cursor = if end == total { 0 } else { end };
    }
}

impl<K: Borrow<[u8]>, V> std::ops::Index<&[u8]> for KeyedMap<K, V> {
    type Output = V;

    fn index(&self, key: &[u8]) -> &V {
        self.get(key).expect("a key of the map")
    }
}

impl<K, V> IntoIterator for KeyedMap<K, V> {
    type Item = (K, V);
    type IntoIter = hashbrown::hash_table::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.table.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(keys: u32) -> KeyedMap<Box<[u8]>, u32> {
        let mut map = KeyedMap::default();
        for k in 0..keys {
            map.insert(Box::from(&k.to_be_bytes()[..]), k);
        }
        map
    }

    #[test]
    fn a_sweep_slice_spreads_a_round_over_the_period_and_visits_at_least_a_floor() {
        assert_eq!(sweep_slice(1_000_000, 100, 1000, 4096), 100_000);
        assert_eq!(
            sweep_slice(1_000_000, 5000, 1000, 4096),
            1_000_000,
            "never more than a round"
        );
        assert_eq!(sweep_slice(10_000, 1, 1000, 4096), 4096);
        assert_eq!(sweep_slice(0, 100, 1000, 0), 0);
        assert_eq!(
            sweep_slice(100, -5, 0, 0),
            0,
            "a clock going back visits the floor"
        );
    }

    #[test]
    fn keys_are_found_replaced_and_removed_by_their_bytes() {
        let mut map = map(1000);
        assert_eq!(map.len(), 1000);
        assert_eq!(map.get(&7u32.to_be_bytes()), Some(&7));
        assert_eq!(map.insert(Box::from(&7u32.to_be_bytes()[..]), 70), Some(7));
        assert_eq!(map[&7u32.to_be_bytes()[..]], 70);
        *map.get_or_insert_with(b"new", || (Box::from(&b"new"[..]), 1)) += 1;
        assert_eq!(map.get(b"new"), Some(&2));
        assert_eq!(map.remove(&7u32.to_be_bytes()), Some(70));
        assert!(!map.contains_key(&7u32.to_be_bytes()));
        assert_eq!(map.len(), 1000);
    }

    #[test]
    fn a_sweep_visits_every_entry_once_a_round_a_slice_at_a_time() {
        let mut map = map(1000);
        let buckets = map.table.num_buckets();
        let (mut cursor, mut seen, mut calls) = (0, Vec::new(), 0);
        loop {
            map.sweep(&mut cursor, 100, |_, v| {
                seen.push(*v);
                *v % 2 == 0
            });
            calls += 1;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(calls, buckets.div_ceil(100), "slices of 100 buckets");
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>(), "each entry once");
        assert_eq!(map.len(), 500, "the odd ones removed");
        assert!(map.values().all(|v| v % 2 == 0));
        let mut empty: KeyedMap<Box<[u8]>, u32> = KeyedMap::default();
        empty.sweep(&mut cursor, 100, |_, _| false);
        assert_eq!(cursor, 0);
    }
}
