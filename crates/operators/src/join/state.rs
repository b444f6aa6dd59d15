//! The rows one side of a regular join keeps, by join key, and what a row
//! arriving on one side emits given the other side's matching rows, as
//! Flink's `StreamingJoinOperator` decides it: plain data and functions.

use std::collections::{HashMap, HashSet};

use thin_vec::ThinVec;

use weir_common::changelog::RowKind;
use weir_plan::join::Layout;
use weir_state::keyed_map::KeyedMap;

/// How often a stored row is there, and, on an outer side, how many rows of
/// the other side it joins (its null-padded row is out while that is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Copies of the row.
    pub count: i64,
    /// Rows of the other side joined with it (outer sides only).
    pub matches: i64,
}

/// One key's rows: their row-format bytes back to back, and beside them,
/// only where a side needs them, their ends, tallies and write times. A side
/// whose rows are each there once and never count matches (an insert-only
/// side of an inner join) keeps just the bytes: about a third of a row per
/// allocation, and no allocation per row. Rows of only fixed-width columns
/// all have one length (`width`), so their ends are not kept either. Up to
/// 16 bytes of rows (a row of one or two numbers) are kept inline, and a
/// vector a side does not need takes 8 bytes: most keys of a large join
/// have one row.
#[derive(Debug, Default, Clone)]
pub struct Bucket {
    bytes: smallvec::SmallVec<[u8; 16]>,
    /// Each row's length when rows have one (0: they vary, see `ends`).
    width: u32,
    ends: ThinVec<u32>,
    tallies: ThinVec<Tally>,
    written: ThinVec<i64>,
}

impl Bucket {
    /// An empty bucket of rows `width` bytes long (0: of varying length).
    pub fn with_width(width: u32) -> Self {
        Bucket {
            width,
            ..Bucket::default()
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self.width {
            0 => self.ends.len(),
            w => self.bytes.len() / w as usize,
        }
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.ends.is_empty()
    }

    /// Where row `j` starts and ends in `bytes`.
    fn span(&self, j: usize) -> (usize, usize) {
        match self.width {
            0 => {
                let start = if j == 0 { 0 } else { self.ends[j - 1] as usize };
                (start, self.ends[j] as usize)
            }
            w => (j * w as usize, (j + 1) * w as usize),
        }
    }

    /// Row `j`'s bytes.
    pub fn row(&self, j: usize) -> &[u8] {
        let (start, end) = self.span(j);
        &self.bytes[start..end]
    }

    /// Row `j`'s tally (one copy, no matches where none are kept).
    pub fn tally(&self, j: usize) -> Tally {
        self.tallies
            .get(j)
            .copied()
            .unwrap_or(Tally { count: 1, matches: 0 })
    }

    /// Sets row `j`'s tally (on a side that keeps them).
    pub fn set_tally(&mut self, j: usize, tally: Tally) {
        if let Some(t) = self.tallies.get_mut(j) {
            *t = tally;
        }
    }

    /// When row `j` was last written (0 where not kept).
    pub fn written(&self, j: usize) -> i64 {
        self.written.get(j).copied().unwrap_or(0)
    }

    /// Row `j` was written at `now` (on a side with a TTL).
    pub fn touch(&mut self, j: usize, now: i64) {
        if let Some(w) = self.written.get_mut(j) {
            *w = now;
        }
    }

    /// Appends a row, with its tally and write time where kept.
    pub fn push(&mut self, row: &[u8], tally: Option<Tally>, written: Option<i64>) {
        debug_assert!(self.width == 0 || row.len() == self.width as usize);
        self.bytes.extend_from_slice(row);
        if self.width == 0 {
            self.ends.push(self.bytes.len() as u32);
        }
        self.tallies.extend(tally);
        self.written.extend(written);
    }

    /// The first row equal to `row`.
    pub fn position(&self, row: &[u8]) -> Option<usize> {
        (0..self.len()).find(|j| self.row(*j) == row)
    }

    /// Removes row `j`.
    pub fn remove(&mut self, j: usize) {
        let (start, end) = self.span(j);
        self.bytes.drain(start..end);
        if self.width == 0 {
            self.ends.remove(j);
            let width = (end - start) as u32;
            self.ends[j..].iter_mut().for_each(|e| *e -= width);
        }
        if j < self.tallies.len() {
            self.tallies.remove(j);
        }
        if j < self.written.len() {
            self.written.remove(j);
        }
    }

    /// Bytes it takes in memory, beyond its own struct.
    pub fn size(&self) -> usize {
        // A thin vector's allocation starts with its length and capacity.
        let thin = |capacity: usize, width: usize| match capacity {
            0 => 0,
            n => 16 + n * width,
        };
        let bytes = if self.bytes.spilled() {
            self.bytes.capacity()
        } else {
            0
        };
        bytes
            + thin(self.ends.capacity(), 4)
            + thin(self.tallies.capacity(), std::mem::size_of::<Tally>())
            + thin(self.written.capacity(), 8)
    }

    /// The bucket as one value of the spilling backend's store: its row
    /// count, which of tallies and write times it keeps, then the rows'
    /// ends (rows of varying length), tallies, write times and bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&(self.len() as u32).to_le_bytes());
        out.push(u8::from(!self.tallies.is_empty()) | (u8::from(!self.written.is_empty()) << 1));
        self.ends
            .iter()
            .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        for t in &self.tallies {
            out.extend_from_slice(&t.count.to_le_bytes());
            out.extend_from_slice(&t.matches.to_le_bytes());
        }
        self.written
            .iter()
            .for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
        out.extend_from_slice(&self.bytes);
    }

    /// A bucket of rows `width` bytes long (0: varying) from
    /// [`Bucket::encode`]'s bytes; `None` when they are cut short.
    pub fn decode(bytes: &[u8], width: u32) -> Option<Bucket> {
        let mut at = 0;
        let mut take = |n: usize| -> Option<&[u8]> {
            let part = bytes.get(at..at + n)?;
            at += n;
            Some(part)
        };
        let n = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let flags = take(1)?[0];
        let word = |b: &[u8], i: usize| i64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let ends = match width {
            0 => take(n * 4)?
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
            _ => ThinVec::new(),
        };
        let tallies = match flags & 1 {
            0 => ThinVec::new(),
            _ => {
                let b = take(n * 16)?;
                (0..n)
                    .map(|j| Tally {
                        count: word(b, 2 * j),
                        matches: word(b, 2 * j + 1),
                    })
                    .collect()
            }
        };
        let written = match flags & 2 {
            0 => ThinVec::new(),
            _ => {
                let b = take(n * 8)?;
                (0..n).map(|j| word(b, j)).collect()
            }
        };
        let rest = bytes.get(at..)?;
        let length = match width {
            0 => ends.last().copied().unwrap_or(0) as usize,
            w => n * w as usize,
        };
        (rest.len() == length).then(|| Bucket {
            bytes: smallvec::SmallVec::from_slice(rest),
            width,
            ends,
            tallies,
            written,
        })
    }

    /// Forgets the rows not written for `ttl` ms at `now`; whether any were.
    pub fn expire(&mut self, now: i64, ttl: i64) -> bool {
        let written: Vec<i64> = (0..self.len()).map(|j| self.written(j)).collect();
        if written.iter().all(|w| now - w < ttl) {
            return false;
        }
        self.retain(|j| now - written[j] < ttl);
        true
    }

    /// Keeps the rows for which `keep(j)` holds.
    pub fn retain(&mut self, keep: impl Fn(usize) -> bool) {
        let mut kept = Bucket::with_width(self.width);
        for j in 0..self.len() {
            if keep(j) {
                let tally = self.tallies.get(j).copied();
                let written = self.written.get(j).copied();
                kept.push(self.row(j), tally, written);
            }
        }
        *self = kept;
    }
}

/// A key's row-format bytes; up to 16 (two numeric columns) inline, so a
/// lookup compares them in the table's own memory instead of following a
/// pointer to them (a cache miss per row on a large table).
pub type Key = smallvec::SmallVec<[u8; 16]>;

/// Keys' bytes hashed with foldhash (std's SipHash was a fifth of a join's
/// time; xxh3's streaming hasher as slow on short keys).
pub type ByKey<V> = HashMap<Key, V, foldhash::fast::FixedState>;

/// Expires `bucket`'s rows at `now` for `ttl`, noting `key` as changed
/// when it lost any; whether it keeps rows.
fn keep_unexpired(
    key: &Key,
    bucket: &mut Bucket,
    (now, ttl): (i64, i64),
    changed: &mut Option<HashSet<Key, foldhash::fast::FixedState>>,
) -> bool {
    if !bucket.expire(now, ttl) {
        return true;
    }
    if let Some(changed) = changed.as_mut() {
        changed.insert(key.clone());
    }
    !bucket.is_empty()
}

/// The rows of one side by join key (row-format bytes of the key).
#[derive(Debug)]
pub struct SideState {
    /// Each key's rows, in arrival order.
    pub buckets: KeyedMap<Key, Bucket>,
    /// How rows are kept.
    pub layout: Layout,
    /// Whether rows keep tallies (copies, matches): a multiset side that
    /// dedupes, or one whose rows count their matches.
    pub tallies: bool,
    /// Whether rows keep their write time (a state TTL).
    pub ttl: bool,
    /// The length of every row, when its columns are all fixed-width (0: rows vary).
    pub width: u32,
    /// Incremental checkpoints: the keys whose rows changed since the last snapshot.
    pub changed: Option<HashSet<Key, foldhash::fast::FixedState>>,
}

impl SideState {
    /// An empty side.
    pub fn new(layout: Layout, counts_matches: bool, ttl: bool) -> Self {
        SideState {
            buckets: KeyedMap::default(),
            layout,
            tallies: layout == (Layout::Multiset { dedupe: true }) || counts_matches,
            ttl,
            width: 0,
            changed: None,
        }
    }

    /// A side that counts the keys whose rows change (incremental checkpoints).
    pub fn tracking_changes(mut self) -> Self {
        self.changed = Some(HashSet::default());
        self
    }

    /// Notes that `key`'s rows changed (when changes are tracked).
    pub fn mark(&mut self, key: &[u8]) {
        if let Some(changed) = &mut self.changed
            && !changed.contains(key)
        {
            changed.insert(key.into());
        }
    }

    /// The keys changed since the last call; counting starts afresh.
    pub fn take_changed(&mut self) -> Vec<Key> {
        self.changed
            .as_mut()
            .map(|c| c.drain().collect())
            .unwrap_or_default()
    }

    /// Rows of `width` bytes each (see [`row_width`]).
    pub fn with_width(mut self, width: u32) -> Self {
        self.width = width;
        self
    }

    /// The key's bucket, made when it has none.
    pub fn bucket(&mut self, key: &[u8]) -> &mut Bucket {
        let width = self.width;
        (self.buckets).get_or_insert_with(key, || (key.into(), Bucket::with_width(width)))
    }

    /// Adds a copy of `row` under `key` at `now`, joined with `matches`
    /// rows of the other side.
    pub fn add(&mut self, key: &[u8], row: &[u8], matches: i64, now: i64) {
        self.mark(key);
        let width = self.width;
        let bucket = (self.buckets).get_or_insert_with(key, || (key.into(), Bucket::with_width(width)));
        match self.layout {
            Layout::OneRowPerJoinKey => *bucket = Bucket::with_width(width),
            Layout::Multiset { dedupe: true } => {
                if let Some(j) = bucket.position(row) {
                    let mut tally = bucket.tally(j);
                    tally.count += 1;
                    tally.matches = matches;
                    bucket.set_tally(j, tally);
                    bucket.touch(j, now);
                    return;
                }
            }
            Layout::OneRowPerUniqueKey | Layout::Multiset { dedupe: false } => {}
        }
        let tally = self.tallies.then_some(Tally { count: 1, matches });
        bucket.push(row, tally, self.ttl.then_some(now));
    }

    /// Forgets the rows of `key` not written for `ttl` ms at `now`
    /// (Flink's state TTL: nothing is emitted for them).
    pub fn expire_key(&mut self, key: &[u8], now: i64, ttl: i64) {
        if let Some(bucket) = self.buckets.get_mut(key)
            && bucket.expire(now, ttl)
        {
            if bucket.is_empty() {
                self.buckets.remove(key);
            }
            self.mark(key);
        }
    }

    /// Forgets every row not written for `ttl` ms at `now`.
    pub fn expire(&mut self, now: i64, ttl: i64) {
        let changed = &mut self.changed;
        (self.buckets).retain(|key, bucket| keep_unexpired(key, bucket, (now, ttl), changed));
    }

    /// Forgets the rows not written for `ttl` ms at `now` of the keys in
    /// the next `buckets` buckets from `cursor` (see [`KeyedMap::sweep`]).
    pub fn expire_some(&mut self, cursor: &mut usize, buckets: usize, now: i64, ttl: i64) {
        let changed = &mut self.changed;
        (self.buckets).sweep(cursor, buckets, |key, bucket| {
            keep_unexpired(key, bucket, (now, ttl), changed)
        });
    }

    /// Takes a copy of `row` away from `key` at `now`; false when it is
    /// not there.
    pub fn retract(&mut self, key: &[u8], row: &[u8], now: i64) -> bool {
        if !self.buckets.contains_key(key) {
            return false;
        }
        self.mark(key);
        let Some(bucket) = self.buckets.get_mut(key) else {
            return false;
        };
        if self.layout == Layout::OneRowPerJoinKey {
            self.buckets.remove(key);
            return true;
        }
        let Some(at) = bucket.position(row) else {
            return false;
        };
        let mut tally = bucket.tally(at);
        tally.count -= 1;
        bucket.set_tally(at, tally);
        bucket.touch(at, now);
        if tally.count <= 0 || self.layout == Layout::OneRowPerUniqueKey {
            bucket.remove(at);
        }
        if bucket.is_empty() {
            self.buckets.remove(key);
        }
        true
    }

    /// Bytes its rows and keys take in memory.
    pub fn memory_size(&self) -> usize {
        let slot = std::mem::size_of::<Key>() + std::mem::size_of::<Bucket>() + 8;
        let changed = self
            .changed
            .as_ref()
            .map_or(0, |c| c.capacity() * (std::mem::size_of::<Key>() + 8));
        let rows: usize = self
            .buckets
            .iter()
            .map(|(k, b)| b.size() + if k.spilled() { k.capacity() } else { 0 })
            .sum();
        self.buckets.capacity() * slot + changed + rows
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.buckets.values().map(Bucket::len).sum()
    }

    /// Whether it holds no rows.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// The length of every row of `schema` in arrow's row format when it has
/// only fixed-width columns (a null byte and the value each); 0 otherwise.
pub fn row_width(schema: &arrow::datatypes::Schema) -> u32 {
    let widths: Option<Vec<usize>> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().map(|w| w + 1))
        .collect();
    widths.map_or(0, |w| w.iter().sum::<usize>() as u32)
}

/// One row to emit for an input row: the input row joined with a matched
/// row (by its position among the matches), either of them padded with
/// nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// The input row with matched row `k`.
    Joined(RowKind, usize),
    /// The input row with nulls for the other side.
    InputPadded(RowKind),
    /// Matched row `k` with nulls for the input's side.
    OtherPadded(RowKind, usize),
}

/// What one input row of kind `kind` emits, given the tallies of the other
/// side's rows it matches (updated here: their match counts); whether the
/// input's side and the other side are outer. Returns the matches the row
/// is stored with when it is added (copies of matched rows).
///
/// As Flink's streaming join: an outer side's row without matches is
/// emitted padded (`+I`), its padded row retracted (`-D`) when a first match
/// comes and emitted again when the last one goes; an outer join emits `+I`
/// and `-D` only, an inner one passes the input's kind on.
pub fn decide(
    kind: RowKind,
    input_outer: bool,
    other_outer: bool,
    matched: &mut [Tally],
    out: &mut Vec<Emit>,
) -> i64 {
    let copies: i64 = matched.iter().map(|t| t.count).sum();
    let repeat = |out: &mut Vec<Emit>, emit: Emit, times: i64| {
        out.extend(std::iter::repeat_n(emit, times.max(0) as usize));
    };
    if matched.is_empty() {
        if input_outer {
            let padded = if kind.is_retraction() {
                RowKind::Delete
            } else {
                RowKind::Insert
            };
            out.push(Emit::InputPadded(padded));
        }
        return 0;
    }
    let joined_kind = match (input_outer || other_outer, kind.is_retraction()) {
        (false, _) => kind,
        (true, false) => RowKind::Insert,
        (true, true) => RowKind::Delete,
    };
    if !kind.is_retraction() {
        if other_outer {
            for (k, t) in matched.iter_mut().enumerate() {
                if t.matches == 0 {
                    repeat(out, Emit::OtherPadded(RowKind::Delete, k), t.count);
                }
                t.matches += 1;
            }
        }
        for (k, t) in matched.iter().enumerate() {
            repeat(out, Emit::Joined(joined_kind, k), t.count);
        }
    } else {
        for (k, t) in matched.iter().enumerate() {
            repeat(out, Emit::Joined(joined_kind, k), t.count);
        }
        if other_outer {
            for (k, t) in matched.iter_mut().enumerate() {
                if t.matches == 1 {
                    repeat(out, Emit::OtherPadded(RowKind::Insert, k), t.count);
                }
                t.matches -= 1;
            }
        }
    }
    copies
}

/// What a right row of a semi (or, with `anti`, an anti) join emits: the
/// left rows it matches (`Emit::OtherPadded`: a left row alone) as they
/// gain their first match (semi: `+I`, anti: `-D`) or lose their last
/// (semi: `-D`, anti: `+I`), as Flink's `StreamingSemiAntiJoinOperator`.
/// A left row itself comes out when it arrives with matches (semi) or
/// without (anti), with its own kind.
pub fn semi_right(kind: RowKind, anti: bool, matched: &mut [Tally], out: &mut Vec<Emit>) {
    let (gained, lost) = match anti {
        false => (RowKind::Insert, RowKind::Delete),
        true => (RowKind::Delete, RowKind::Insert),
    };
    for (k, t) in matched.iter_mut().enumerate() {
        let copies = t.count.max(0) as usize;
        if !kind.is_retraction() {
            if t.matches == 0 {
                out.extend(std::iter::repeat_n(Emit::OtherPadded(gained, k), copies));
            }
            t.matches += 1;
        } else {
            if t.matches == 1 {
                out.extend(std::iter::repeat_n(Emit::OtherPadded(lost, k), copies));
            }
            t.matches -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RowKind::*;

    fn tally(count: i64, matches: i64) -> Tally {
        Tally { count, matches }
    }

    #[test]
    fn an_inner_join_passes_the_input_kind_to_each_match() {
        let mut matched = [tally(1, 0), tally(2, 0)];
        let mut out = Vec::new();
        let copies = decide(UpdateAfter, false, false, &mut matched, &mut out);
        assert_eq!(copies, 3);
        assert_eq!(
            out,
            vec![
                Emit::Joined(UpdateAfter, 0),
                Emit::Joined(UpdateAfter, 1),
                Emit::Joined(UpdateAfter, 1)
            ]
        );
    }

    #[test]
    fn an_outer_row_without_matches_is_padded_and_its_retraction_deletes_the_padded_row() {
        let mut out = Vec::new();
        assert_eq!(decide(Insert, true, false, &mut [], &mut out), 0);
        decide(Delete, true, false, &mut [], &mut out);
        assert_eq!(out, vec![Emit::InputPadded(Insert), Emit::InputPadded(Delete)]);
        out.clear();
        decide(Insert, false, false, &mut [], &mut out);
        assert!(
            out.is_empty(),
            "an inner side's row without matches emits nothing"
        );
    }

    #[test]
    fn the_first_match_of_an_outer_row_deletes_its_padded_row_and_the_last_brings_it_back() {
        // A left join; the input comes from the right, the matched row is a left one.
        let mut left = [tally(1, 0)];
        let mut out = Vec::new();
        decide(Insert, false, true, &mut left, &mut out);
        assert_eq!(out, vec![Emit::OtherPadded(Delete, 0), Emit::Joined(Insert, 0)]);
        assert_eq!(left[0].matches, 1);
        out.clear();
        decide(Insert, false, true, &mut left, &mut out);
        assert_eq!(
            out,
            vec![Emit::Joined(Insert, 0)],
            "a second match leaves the padded row gone"
        );
        out.clear();
        decide(UpdateBefore, false, true, &mut left, &mut out);
        decide(Delete, false, true, &mut left, &mut out);
        assert_eq!(
            out,
            vec![
                Emit::Joined(Delete, 0),
                Emit::Joined(Delete, 0),
                Emit::OtherPadded(Insert, 0)
            ]
        );
        assert_eq!(left[0].matches, 0);
    }

    #[test]
    fn a_side_keeps_copies_of_equal_rows_when_it_updates() {
        let mut side = SideState::new(Layout::Multiset { dedupe: true }, false, false);
        side.add(b"k", b"r", 0, 0);
        side.add(b"k", b"r", 0, 0);
        assert_eq!(side.len(), 1);
        assert!(side.retract(b"k", b"r", 0));
        assert_eq!(side.buckets[&b"k"[..]].tally(0).count, 1);
        assert!(side.retract(b"k", b"r", 0));
        assert!(side.is_empty());
        assert!(!side.retract(b"k", b"r", 0), "nothing left to take away");
    }

    #[test]
    fn a_side_unique_on_its_join_key_keeps_one_row_per_key() {
        let mut side = SideState::new(Layout::OneRowPerJoinKey, false, false);
        side.add(b"k", b"v1", 0, 0);
        side.add(b"k", b"v2", 0, 0);
        assert_eq!(side.len(), 1, "the new row replaced the key's row");
        assert_eq!(side.buckets[&b"k"[..]].row(0), b"v2");
        assert!(side.retract(b"k", b"v2", 0));
        assert!(side.is_empty());
        assert!(!side.tallies, "no copy counts are kept");
    }

    #[test]
    fn a_side_with_a_unique_key_keeps_one_entry_per_row_without_counts() {
        let mut side = SideState::new(Layout::OneRowPerUniqueKey, false, false);
        side.add(b"k", b"a", 0, 0);
        side.add(b"k", b"b", 0, 0);
        assert!(!side.tallies);
        assert!(side.retract(b"k", b"a", 0));
        assert_eq!(side.len(), 1);
        assert_eq!(side.buckets[&b"k"[..]].row(0), b"b");
        assert!(!side.retract(b"k", b"a", 0), "the row is gone");
    }

    #[test]
    fn fixed_width_rows_keep_no_ends_and_read_back_the_same() {
        let mut side = SideState::new(Layout::Multiset { dedupe: true }, false, false).with_width(2);
        side.add(b"k", b"ab", 0, 0);
        side.add(b"k", b"cd", 0, 0);
        side.add(b"k", b"ab", 0, 0);
        let bucket = &side.buckets[&b"k"[..]];
        assert_eq!(
            (bucket.len(), bucket.row(0), bucket.row(1)),
            (2, &b"ab"[..], &b"cd"[..])
        );
        assert!(bucket.ends.is_empty());
        assert!(side.retract(b"k", b"ab", 0) && side.retract(b"k", b"ab", 0));
        assert_eq!(side.buckets[&b"k"[..]].row(0), b"cd");
    }

    #[test]
    fn rows_of_fixed_width_columns_have_one_length_in_the_row_format() {
        use arrow::array::{ArrayRef, Int32Array, Int64Array};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int32, true),
        ]);
        let converter = arrow::row::RowConverter::new(vec![
            arrow::row::SortField::new(DataType::Int64),
            arrow::row::SortField::new(DataType::Int32),
        ])
        .unwrap();
        let columns: Vec<ArrayRef> = vec![
            std::sync::Arc::new(Int64Array::from(vec![Some(1), None, Some(-7)])),
            std::sync::Arc::new(Int32Array::from(vec![None, Some(2), Some(3)])),
        ];
        let rows = converter.convert_columns(&columns).unwrap();
        for i in 0..3 {
            assert_eq!(rows.row(i).as_ref().len() as u32, row_width(&schema));
        }
        let strings = Schema::new(vec![Field::new("s", DataType::Utf8, true)]);
        assert_eq!(row_width(&strings), 0);
    }

    #[test]
    fn a_bucket_of_one_small_row_takes_no_memory_beyond_its_slot() {
        assert!(
            std::mem::size_of::<Bucket>() <= 64,
            "{} bytes",
            std::mem::size_of::<Bucket>()
        );
        let mut bucket = Bucket::with_width(9);
        bucket.push(b"123456789", None, None);
        assert_eq!(bucket.size(), 0, "the row is inline, no vector allocated");
    }

    #[test]
    fn a_bucket_reads_back_from_its_bytes_and_refuses_them_cut_short() {
        let mut varying = Bucket::with_width(0);
        varying.push(b"abc", Some(tally(2, 1)), Some(7));
        varying.push(b"de", Some(tally(1, 0)), Some(9));
        let mut fixed = Bucket::with_width(2);
        fixed.push(b"xy", None, None);
        fixed.push(b"zw", None, None);
        for bucket in [varying, fixed] {
            let mut bytes = Vec::new();
            bucket.encode(&mut bytes);
            let back = Bucket::decode(&bytes, bucket.width).expect("whole bytes");
            assert_eq!(back.len(), 2);
            for j in 0..2 {
                assert_eq!(
                    (back.row(j), back.tally(j), back.written(j)),
                    (bucket.row(j), bucket.tally(j), bucket.written(j))
                );
            }
            assert!(Bucket::decode(&bytes[..bytes.len() - 1], bucket.width).is_none());
            assert!(Bucket::decode(&bytes[..3], bucket.width).is_none());
        }
    }

    #[test]
    fn the_layout_follows_what_the_input_is_unique_on() {
        assert_eq!(Layout::of(Some(&[0]), &[0, 1], true), Layout::OneRowPerJoinKey);
        assert_eq!(Layout::of(Some(&[2]), &[0], true), Layout::OneRowPerUniqueKey);
        assert_eq!(Layout::of(None, &[0], true), Layout::Multiset { dedupe: true });
        assert_eq!(Layout::of(None, &[0], false), Layout::Multiset { dedupe: false });
    }

    #[test]
    fn rows_not_written_for_the_ttl_are_forgotten() {
        let mut side = SideState::new(Layout::Multiset { dedupe: false }, false, true);
        side.add(b"k", b"old", 0, 0);
        side.add(b"k", b"new", 0, 900);
        side.add(b"j", b"old", 0, 0);
        side.expire_key(b"k", 1000, 1000);
        assert_eq!(
            side.buckets[&b"k"[..]].len(),
            1,
            "only the row written at 0 expired"
        );
        side.expire(1000, 1000);
        assert_eq!(side.len(), 1);
        assert!(!side.buckets.contains_key(&b"j"[..]));
    }

    #[test]
    fn a_semi_join_emits_a_left_row_at_its_first_match_and_retracts_it_at_its_last() {
        let mut left = [tally(2, 0)];
        let mut out = Vec::new();
        semi_right(Insert, false, &mut left, &mut out);
        semi_right(Insert, false, &mut left, &mut out);
        assert_eq!(
            out,
            vec![Emit::OtherPadded(Insert, 0), Emit::OtherPadded(Insert, 0)]
        );
        out.clear();
        semi_right(Delete, false, &mut left, &mut out);
        assert!(out.is_empty(), "one match is left");
        semi_right(Delete, true, &mut left, &mut out);
        assert_eq!(
            out,
            vec![Emit::OtherPadded(Insert, 0), Emit::OtherPadded(Insert, 0)],
            "an anti join brings the row back when its last match goes"
        );
    }
}
