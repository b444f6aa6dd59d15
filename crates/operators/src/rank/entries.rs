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

    /// Bytes the rows take in memory (their places, keys and bytes), for
    /// the spilling backend's budget.
    pub fn memory_size(&self) -> usize {
        let slots = match self {
            Entries::Few(rows) => rows.capacity() * std::mem::size_of::<(Place, Arc<[u8]>)>(),
            // A B-tree's nodes hold between half and all of their 11 slots.
            Entries::Many(rows) => rows.len() * 3 / 2 * std::mem::size_of::<(Place, Arc<[u8]>)>(),
        };
        // A shared tie is the row's own bytes; an Arc's counts take 16.
        let heap: usize = self.rows().map(|(p, r)| p.0.len() + 16 + r.len()).sum();
        std::mem::size_of::<Entries>() + slots + heap
    }

    /// The rows as bytes, in order: each row's number, order key and bytes
    /// (a tie is the row itself or, ordered by arrival, nothing; see
    /// [`Entries::decode`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (place, row) in self.rows() {
            encode_row(place.2, &place.0, row, out);
        }
    }

    /// The rows [`Entries::encode`] wrote; ties are `no_tie` when given
    /// (ordered by arrival), else the rows' bytes. `None` when cut short.
    pub fn decode(mut bytes: &[u8], no_tie: Option<&Arc<[u8]>>) -> Option<Entries> {
        let mut rows = Vec::new();
        while !bytes.is_empty() {
            let number = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
            bytes = &bytes[8..];
            let mut field = || -> Option<&[u8]> {
                let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
                let field = bytes.get(4..4 + len)?;
                bytes = &bytes[4 + len..];
                Some(field)
            };
            let order: Box<[u8]> = field()?.into();
            let row: Arc<[u8]> = field()?.into();
            let tie = no_tie.cloned().unwrap_or_else(|| row.clone());
            rows.push(((order, tie, number), row));
        }
        Some(match rows.len() > FEW {
            true => Entries::Many(rows.into_iter().collect()),
            false => Entries::Few(rows),
        })
    }
}

/// One row of [`Entries::encode`]: its number, order key and bytes.
pub fn encode_row(number: u64, order: &[u8], row: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&number.to_le_bytes());
    for field in [order, row] {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
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

    #[test]
    fn rows_written_as_bytes_read_back_in_order_with_their_ties() {
        let no_tie: Arc<[u8]> = Arc::from(&[][..]);
        for count in [0u64, 3, 100] {
            let mut entries = Entries::default();
            for n in 0..count {
                let row: Arc<[u8]> = Arc::from(&[n as u8, 1, 2][..]);
                entries.insert((Box::from([(n % 5) as u8]), row.clone(), n), row);
            }
            let mut bytes = Vec::new();
            entries.encode(&mut bytes);
            let back = Entries::decode(&bytes, None).unwrap();
            let rows = |e: &Entries| e.rows().map(|(p, r)| (p.clone(), r.clone())).collect::<Vec<_>>();
            assert_eq!(rows(&back), rows(&entries));
            assert_eq!(matches!(back, Entries::Many(_)), count as usize > FEW);
            let by_arrival = Entries::decode(&bytes, Some(&no_tie)).unwrap();
            assert!(by_arrival.rows().all(|(p, _)| p.1.is_empty()));
            if !bytes.is_empty() {
                assert!(
                    Entries::decode(&bytes[..bytes.len() - 1], None).is_none(),
                    "cut short"
                );
            }
        }
    }
}
