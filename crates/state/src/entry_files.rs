//! Spilled state as entries in files per key group: a key's bytes and its value's bytes a row, for operators that read a key group whole.
//!
//! Regular joins and TopN keep one entry per key (a side and join key, a
//! partition), as they kept in [`crate::store`], but in
//! [`KeyGroupFiles`]: a file row is the key group, the key and the value.
//! Here is what they share: writing entries a file per part of key groups,
//! a full snapshot of every entry as one run, an incremental one of the
//! keys written since the last snapshot read back from the frozen files,
//! and the rewrite of a part by a state TTL. The entries they hand to their
//! decoders are the store's: the key group (big-endian) then the key, and
//! the value.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{AsArray, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};

use crate::Result;
use crate::deferred::{Deferred, DeltaOf, aborted, store_delta};
use crate::incremental::{ReplacedPart, replacement_rows};
use crate::key_group_files::{FrozenFiles, KeyGroupFiles, by_key_group};
use crate::runs::RunWriter;
use crate::spilled::SpillCore;
use crate::store::{Entry, WRITE_CHUNK};

/// The rows of an entry file.
pub fn entry_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("_key_group", DataType::UInt32, false),
        Field::new("_key", DataType::Binary, false),
        Field::new("_value", DataType::Binary, false),
    ]))
}

/// The key groups, keys and values of entry file rows.
pub fn entry_columns(rows: &RecordBatch) -> (&UInt32Array, &BinaryArray, &BinaryArray) {
    (
        rows.column(0).as_primitive::<UInt32Type>(),
        rows.column(1).as_binary::<i32>(),
        rows.column(2).as_binary::<i32>(),
    )
}

/// A store key: the key group, big-endian (so keys sort in key-group
/// order), then the key.
pub fn store_key(key_group: u32, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + key.len());
    bytes.extend_from_slice(&key_group.to_be_bytes());
    bytes.extend_from_slice(key);
    bytes
}

/// Builds entry file rows, in the order they are added.
#[derive(Default)]
pub struct EntryRows {
    groups: UInt32Builder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
}

impl EntryRows {
    /// Adds `key`'s `value` in `key_group`.
    pub fn push(&mut self, key_group: u32, key: &[u8], value: &[u8]) {
        self.groups.append_value(key_group);
        self.keys.append_value(key);
        self.values.append_value(value);
    }

    /// The rows added.
    pub fn finish(mut self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            entry_schema(),
            vec![
                Arc::new(self.groups.finish()),
                Arc::new(self.keys.finish()),
                Arc::new(self.values.finish()),
            ],
        )?)
    }
}

/// Writes items `0..groups.len()` (item `i` in key group `groups[i]`) to
/// `files`, a file per part of `width` key groups, in key-group order;
/// `entry(i, key_group, rows)` adds item `i`'s entry. Returns each part's
/// rows written.
pub fn write_entries(
    files: &mut KeyGroupFiles,
    width: u32,
    groups: &[u32],
    mut entry: impl FnMut(usize, u32, &mut EntryRows),
) -> Result<Vec<(u32, usize)>> {
    let mut written = Vec::new();
    let by_group = by_key_group(groups, |i| i as u32);
    for part in by_group.chunk_by(|a, b| a.0 / width == b.0 / width) {
        let mut rows = EntryRows::default();
        for (group, items) in part {
            items.iter().for_each(|i| entry(*i as usize, *group, &mut rows));
        }
        let rows = rows.finish()?;
        files.write(part[0].0 / width, &rows)?;
        written.push((part[0].0 / width, rows.num_rows()));
    }
    Ok(written)
}

/// The entries of entry file rows, as the store gave them.
pub fn store_entries(batches: &[RecordBatch]) -> Vec<Entry> {
    let mut entries = Vec::new();
    for rows in batches {
        let (groups, keys, values) = entry_columns(rows);
        for i in 0..rows.num_rows() {
            let key = store_key(groups.value(i), keys.value(i));
            entries.push((key.into(), values.value(i).into()));
        }
    }
    entries
}

/// A full snapshot: every part's entries in `frozen`, in key-group order,
/// made state rows by `decode` a part at a time, as one run at `path`,
/// read by the snapshot's writer; `None` without rows.
pub fn entries_run<D>(frozen: FrozenFiles, path: PathBuf, mut decode: D) -> Deferred
where
    D: FnMut(&[Entry]) -> Result<Option<RecordBatch>> + Send + 'static,
{
    Deferred::new(move |live| {
        let mut writer: Option<RunWriter> = None;
        for part in frozen.key_groups() {
            if !live() {
                return Err(aborted());
            }
            let mut entries = store_entries(&frozen.read(part)?);
            // A part with several files (of a restore) in key-group order.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let Some(rows) = decode(&entries)? else {
                continue;
            };
            let writer = match &mut writer {
                Some(writer) => writer,
                None => writer.insert(RunWriter::create(path.clone(), rows.schema())?),
            };
            writer.write(&rows)?;
        }
        writer.map(RunWriter::finish).transpose()
    })
}

/// Looks store keys up in frozen entry files, a part indexed at a time.
pub struct EntryLookup {
    /// Key groups per part.
    width: u32,
    /// The part indexed last (keys come in key-group order, a chunk at a
    /// time, so a part's keys may span chunks), by store key.
    last: Option<(u32, HashMap<Vec<u8>, Entry>)>,
}

impl EntryLookup {
    /// Lookups in files of parts of `width` key groups.
    pub fn new(width: u32) -> Self {
        EntryLookup { width, last: None }
    }

    /// The entries of `keys` (store keys, in key-group order) in `frozen`,
    /// and the keys it has none of.
    pub fn get_each<'k>(
        &mut self,
        frozen: &FrozenFiles,
        keys: &[&'k [u8]],
    ) -> Result<(Vec<Entry>, Vec<&'k [u8]>)> {
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for &key in keys {
            let group = key
                .get(..4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            let part = group / self.width;
            if self.last.as_ref().map(|l| l.0) != Some(part) {
                let index = (store_entries(&frozen.read(part)?).into_iter())
                    .map(|entry| (entry.0.to_vec(), entry))
                    .collect();
                self.last = Some((part, index));
            }
            match self.last.as_ref().and_then(|l| l.1.get(key)) {
                Some(entry) => found.push(entry.clone()),
                None => missing.push(key),
            }
        }
        Ok((found, missing))
    }
}

/// The incremental snapshot of entry `files` (parts of `width` key
/// groups), written to already: the upsert delta of the store keys
/// written since the last snapshot (taken from `core`), read back from the
/// files frozen now by the snapshot's writer and made parts by `read`
/// (the entries found, the keys without one). `None`: nothing changed.
pub fn files_delta<R>(
    core: &mut SpillCore,
    files: &KeyGroupFiles,
    width: u32,
    schema: SchemaRef,
    mut read: R,
) -> Result<Option<Deferred>>
where
    R: FnMut(&[Entry], &[&[u8]]) -> Result<Vec<ReplacedPart>> + Send + 'static,
{
    let flushed = std::mem::take(core.flushed.get_or_insert_with(Default::default));
    if flushed.is_empty() {
        return Ok(None);
    }
    core.runs += 1;
    let of = DeltaOf {
        frozen: files.frozen(),
        path: files.snapshot_run_path(core.runs)?,
        chunk: WRITE_CHUNK,
        memory: Vec::new(),
        in_memory: |_: &[u8]| false,
        flushed,
    };
    let mut lookup = EntryLookup::new(width);
    Ok(Some(store_delta(
        of,
        move |frozen: &FrozenFiles, keys: &[&[u8]]| {
            let (found, missing) = lookup.get_each(frozen, keys)?;
            read(&found, &missing)
        },
        move |parts| replacement_rows(&schema, parts, false),
    )))
}

/// Entries read back from files and not decoded yet: an operator decodes a
/// key's entry when a row comes to it, and writes the others back as they
/// were at its next spill (most of a key group's keys get no row before
/// it: decoding, encoding and dropping them all took most of a spilled
/// TopN's time).
#[derive(Default)]
pub struct Unread {
    batches: Vec<RecordBatch>,
    /// Each key's batch and row.
    index: HashMap<Box<[u8]>, (u32, u32), foldhash::fast::FixedState>,
    /// Bytes the batches take.
    bytes: usize,
}

impl Unread {
    /// Adds entry file rows (read from a part's files); returns their
    /// batch's number ([`Unread::key_at`]).
    pub fn add(&mut self, rows: RecordBatch) -> u32 {
        let b = self.batches.len() as u32;
        let (_, keys, values) = entry_columns(&rows);
        for i in 0..rows.num_rows() {
            self.index.insert(keys.value(i).into(), (b, i as u32));
        }
        // The columns share the buffer they were read into: their bytes,
        // not each one's view of the whole buffer; and the index's copy of
        // each key, with the allocator's overhead.
        let copies = keys.values().len() + 16 * rows.num_rows();
        self.bytes += keys.values().len() + values.values().len() + 12 * rows.num_rows() + copies;
        self.batches.push(rows);
        b
    }

    /// The key of row `row` of the rows added as batch `batch`, unread or
    /// not.
    pub fn key_at(&self, batch: u32, row: u32) -> &[u8] {
        entry_columns(&self.batches[batch as usize]).1.value(row as usize)
    }

    /// The value of `key`, which is unread no more.
    pub fn take(&mut self, key: &[u8]) -> Option<&[u8]> {
        let (b, i) = self.index.remove(key)?;
        Some(entry_columns(&self.batches[b as usize]).2.value(i as usize))
    }

    /// Forgets every entry, keeping the index's room for the next ones (a
    /// new index grown a spill at a time took 3% of a spilled OVER's time).
    pub fn clear(&mut self) {
        self.batches.clear();
        self.index.clear();
        self.bytes = 0;
    }

    /// Whether no key is unread.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes it holds.
    pub fn size(&self) -> usize {
        self.bytes + self.index.capacity() * (std::mem::size_of::<(Box<[u8]>, (u32, u32))>() + 1)
    }

    /// Each unread entry: its key group, key and value.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], &[u8])> {
        self.index.values().map(|(b, i)| {
            let (groups, keys, values) = entry_columns(&self.batches[*b as usize]);
            let i = *i as usize;
            (groups.value(i), keys.value(i), values.value(i))
        })
    }

    /// The keys that `pick` picks, given each key and value (stopping at
    /// its first error).
    pub fn keys_where(&self, mut pick: impl FnMut(&[u8], &[u8]) -> Result<bool>) -> Result<Vec<Box<[u8]>>> {
        let mut picked = Vec::new();
        for (key, (b, i)) in &self.index {
            if pick(
                key,
                entry_columns(&self.batches[*b as usize]).2.value(*i as usize),
            )? {
                picked.push(key.clone());
            }
        }
        Ok(picked)
    }
}

/// What a state TTL's rewrite does with one entry.
pub enum Rewrite {
    /// It stays as it is.
    Same,
    /// It takes this value.
    Value(Vec<u8>),
    /// It goes.
    Gone,
}

/// Rewrites `part`'s files with each entry as `rewrite` says (given its
/// store key and value); returns the store keys of the entries changed or
/// gone. Nothing is rewritten when every entry stays.
pub fn rewrite_part(
    files: &mut KeyGroupFiles,
    part: u32,
    mut rewrite: impl FnMut(&[u8], &[u8]) -> Result<Rewrite>,
) -> Result<Vec<Vec<u8>>> {
    let (mut kept, mut changed) = (EntryRows::default(), Vec::new());
    for rows in files.read(part)? {
        let (groups, keys, values) = entry_columns(&rows);
        for i in 0..rows.num_rows() {
            let key = store_key(groups.value(i), keys.value(i));
            match rewrite(&key, values.value(i))? {
                Rewrite::Same => kept.push(groups.value(i), keys.value(i), values.value(i)),
                Rewrite::Value(value) => {
                    kept.push(groups.value(i), keys.value(i), &value);
                    changed.push(key);
                }
                Rewrite::Gone => changed.push(key),
            }
        }
    }
    if !changed.is_empty() {
        files.take(part)?;
        files.write(part, &kept.finish()?)?;
    }
    Ok(changed)
}

/// What a sweep did: each part's change in entries, and the store keys of
/// the entries changed or gone.
pub type Swept = (Vec<(u32, i64)>, Vec<Vec<u8>>);

/// A state TTL's sweep: rewrites the parts after `swept` (until `rows`
/// entries are read, [`KeyGroupFiles::to_sweep`]) as `rewrite` says, and
/// notes the last one in `swept`.
pub fn sweep_entries(
    files: &mut KeyGroupFiles,
    swept: &mut Option<u32>,
    rows: usize,
    mut rewrite: impl FnMut(&[u8], &[u8]) -> Result<Rewrite>,
) -> Result<Swept> {
    let (mut counts, mut changed) = (Vec::new(), Vec::new());
    for part in files.to_sweep(*swept, rows) {
        *swept = Some(part);
        let before = files.rows_in(part) as i64;
        changed.extend(rewrite_part(files, part, &mut rewrite)?);
        counts.push((part, files.rows_in(part) as i64 - before));
    }
    Ok((counts, changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(files: &KeyGroupFiles, part: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        store_entries(&files.read(part).unwrap())
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    }

    #[test]
    fn entries_go_to_a_file_per_part_in_key_group_order_and_read_back_as_the_stores() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        // Items in key groups 5, 1, 4, 1 under parts of 2 key groups.
        let groups = [5, 1, 4, 1];
        let written = write_entries(&mut files, 2, &groups, |i, group, rows| {
            rows.push(group, format!("k{i}").as_bytes(), &[i as u8]);
        })
        .unwrap();
        assert_eq!(written, [(0, 2), (2, 2)]);
        assert_eq!(
            entries(&files, 0),
            [(store_key(1, b"k1"), vec![1]), (store_key(1, b"k3"), vec![3])]
        );
        assert_eq!(
            entries(&files, 2),
            [(store_key(4, b"k2"), vec![2]), (store_key(5, b"k0"), vec![0])]
        );
        let mut lookup = EntryLookup::new(2);
        let (wanted, none) = (store_key(1, b"k3"), store_key(5, b"k9"));
        let (found, missing) = lookup.get_each(&files.frozen(), &[&wanted, &none]).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((&found[0].0[..], &found[0].1[..]), (&wanted[..], &[3u8][..]));
        assert_eq!(missing, [&none[..]]);
    }

    #[test]
    fn unread_entries_are_taken_once_and_the_rest_are_listed_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        write_entries(&mut files, 1, &[4, 4], |i, group, rows| {
            rows.push(group, &[b'a' + i as u8], &[i as u8]);
        })
        .unwrap();
        let mut unread = Unread::default();
        files
            .take(4)
            .unwrap()
            .into_iter()
            .for_each(|rows| assert_eq!(unread.add(rows), 0));
        assert_eq!(unread.key_at(0, 0), b"a");
        assert_eq!(unread.take(b"b"), Some(&[1u8][..]));
        assert_eq!(unread.take(b"b"), None, "taken once");
        let rest: Vec<(u32, Vec<u8>, Vec<u8>)> = (unread.entries())
            .map(|(g, k, v)| (g, k.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(rest, [(4, b"a".to_vec(), vec![0])]);
        assert_eq!(
            unread.keys_where(|_, v| Ok(v[0] == 0)).unwrap(),
            [Box::from(&b"a"[..])]
        );
        assert!(!unread.is_empty() && unread.size() > 0);
        unread.clear();
        assert!(unread.is_empty() && unread.entries().next().is_none());
        assert_eq!(unread.take(b"a"), None, "gone");
    }

    #[test]
    fn a_rewrite_keeps_changes_and_drops_entries_and_leaves_an_unchanged_part_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        write_entries(&mut files, 1, &[3, 3, 3], |i, group, rows| {
            rows.push(group, &[b'a' + i as u8], &[i as u8]);
        })
        .unwrap();
        let same = rewrite_part(&mut files, 3, |_, _| Ok(Rewrite::Same)).unwrap();
        assert!(same.is_empty());
        let changed = rewrite_part(&mut files, 3, |_, v| {
            Ok(match v[0] {
                0 => Rewrite::Gone,
                1 => Rewrite::Value(vec![9]),
                _ => Rewrite::Same,
            })
        })
        .unwrap();
        assert_eq!(changed, [store_key(3, b"a"), store_key(3, b"b")]);
        assert_eq!(
            entries(&files, 3),
            [(store_key(3, b"b"), vec![9]), (store_key(3, b"c"), vec![2])]
        );
        rewrite_part(&mut files, 3, |_, _| Ok(Rewrite::Gone)).unwrap();
        assert!(!files.holds(3), "no file without entries");
    }

    #[test]
    fn a_run_of_entry_files_decodes_each_part_in_key_group_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        // Two files of one part, as a restore in two calls writes them.
        for group in [1, 0] {
            write_entries(&mut files, 2, &[group], |_, g, rows| {
                rows.push(g, b"k", &[g as u8])
            })
            .unwrap();
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = seen.clone();
        let run = entries_run(files.frozen(), dir.path().join("run.parquet"), move |entries| {
            out.lock().unwrap().extend(entries.iter().map(|e| e.0.to_vec()));
            Ok(None)
        });
        assert!(run.write(&|| true).unwrap().is_none(), "no rows decoded");
        assert_eq!(*seen.lock().unwrap(), [store_key(0, b"k"), store_key(1, b"k")]);
    }
}
