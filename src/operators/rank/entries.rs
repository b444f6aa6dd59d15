//! A TopN partition's kept rows in rank order: a sorted vector while few
//! (most partitions of a TopN over insert-only input hold a handful; a
//! B-tree node per partition would cost ten times the memory), a B-tree
//! once many (an updating input keeps every row).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// A kept row's place: its order key, its bytes (empty when ordered by
/// arrival), which break ties, and a unique number (its arrival, counted
/// down for the newest first), which tells equal rows apart.
pub type Place = (Box<[u8]>, Arc<[u8]>, u64);

/// Rows beyond this many move into a B-tree.
const FEW: usize = 64;

/// A partition's rows by place.
pub enum Entries {
    /// Sorted by place.
    Few(Vec<(Place, Arc<[u8]>)>),
    /// Many rows.
    Many(BTreeMap<Place, Arc<[u8]>>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Few(Vec::new())
    }
}

/// Rows in place order.
pub enum Iter<'a> {
    /// Of a vector.
    Few(std::slice::Iter<'a, (Place, Arc<[u8]>)>),
    /// Of a B-tree.
    Many(std::collections::btree_map::Range<'a, Place, Arc<[u8]>>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Place, &'a Arc<[u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Few(rows) => rows.next().map(|(p, r)| (p, r)),
            Iter::Many(rows) => rows.next(),
        }
    }
}

impl Entries {
    /// How many rows.
    pub fn len(&self) -> usize {
        match self {
            Entries::Few(rows) => rows.len(),
            Entries::Many(rows) => rows.len(),
        }
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last row's place.
    pub fn last(&self) -> Option<&Place> {
        match self {
            Entries::Few(rows) => rows.last().map(|(p, _)| p),
            Entries::Many(rows) => rows.last_key_value().map(|(p, _)| p),
        }
    }

    /// Adds a row.
    pub fn insert(&mut self, place: Place, row: Arc<[u8]>) {
        match self {
            Entries::Few(rows) => {
                let at = rows.partition_point(|(p, _)| *p < place);
                rows.insert(at, (place, row));
                if rows.len() > FEW {
                    *self = Entries::Many(std::mem::take(rows).into_iter().collect());
                }
            }
            Entries::Many(rows) => {
                rows.insert(place, row);
            }
        }
    }

    /// Takes a row away.
    pub fn remove(&mut self, place: &Place) {
        match self {
            Entries::Few(rows) => {
                if let Ok(at) = rows.binary_search_by(|(p, _)| p.cmp(place)) {
                    rows.remove(at);
                }
            }
            Entries::Many(rows) => {
                rows.remove(place);
            }
        }
    }

    /// Drops the row at `place` and every row after it.
    pub fn truncate_at(&mut self, place: &Place) {
        match self {
            Entries::Few(rows) => rows.truncate(rows.partition_point(|(p, _)| p < place)),
            Entries::Many(rows) => drop(rows.split_off(place)),
        }
    }

    /// The rows from `from` on.
    pub fn from(&self, from: Bound<&Place>) -> Iter<'_> {
        match self {
            Entries::Few(rows) => Iter::Few(
                match from {
                    Bound::Unbounded => rows,
                    Bound::Included(p) => &rows[rows.partition_point(|(q, _)| q < p)..],
                    Bound::Excluded(p) => &rows[rows.partition_point(|(q, _)| q <= p)..],
                }
                .iter(),
            ),
            Entries::Many(rows) => Iter::Many(rows.range((from, Bound::Unbounded))),
        }
    }

    /// The rows before `place`.
    pub fn before(&self, place: &Place) -> Iter<'_> {
        match self {
            Entries::Few(rows) => Iter::Few(rows[..rows.partition_point(|(q, _)| q < place)].iter()),
            Entries::Many(rows) => Iter::Many(rows.range(..place)),
        }
    }

    /// Every row, in order.
    pub fn rows(&self) -> Iter<'_> {
        self.from(Bound::Unbounded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(order: u8, n: u64) -> Place {
        (Box::from([order]), Arc::from(&[][..]), n)
    }

    #[test]
    fn rows_stay_in_order_as_they_move_from_a_vector_into_a_b_tree() {
        let mut entries = Entries::default();
        for n in (0..100u64).rev() {
            entries.insert(place((n % 7) as u8, n), Arc::from(&[n as u8][..]));
            assert_eq!(matches!(entries, Entries::Few(_)), entries.len() <= FEW);
        }
        let places: Vec<&Place> = entries.rows().map(|(p, _)| p).collect();
        assert!(places.windows(2).all(|w| w[0] < w[1]));
        entries.remove(&place(0, 0));
        assert_eq!(entries.len(), 99);
        assert_eq!(
            entries.before(&place(1, 0)).count(),
            14,
            "the other 14 of order 0"
        );
        entries.truncate_at(&place(1, 0));
        assert_eq!(entries.len(), 14);
        assert_eq!(
            entries.from(Bound::Excluded(&place(0, 7))).count(),
            13,
            "14 to 98"
        );
    }
}
