//! The spilling state backend of OVER aggregations of an updating input: partitions beyond the memory budget in files per key group.
//!
//! Memory holds the partitions the latest changes reached. When they pass a
//! quarter of the subtask's budget, every partition is written to a file of
//! its key group ([`weir_state::entry_files`], one entry per partition: its
//! rows in order, each one's time, copy and bytes) and memory starts empty
//! again. From then on a change of a key group with files waits there
//! ([`crate::waiting`]) until enough changes wait to read the key group's
//! files, a second has passed, or a barrier comes. Then the files'
//! partitions come back as bytes ([`Unread`], decoded when a change reaches
//! them, written back as they were otherwise) and the part's waiting
//! changes are applied as one mini-batch. Every partition ends each
//! mini-batch with the heap's rows and results; how its changes are
//! batched (so which updates it emits in between) and the order between
//! partitions differ.
//!
//! The watermark passed on waits behind the changes that came before it:
//! a row's time column must not come out after a watermark past it.
//!
//! Checkpoints stay state files: a snapshot writes memory to the files,
//! then the frozen files as one run, read by the snapshot's writer; an
//! incremental one the partitions changed since the last snapshot, read
//! back from the frozen files. A restore of more than memory holds writes
//! the checkpoint's rows to files, a partition per entry.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array};
use arrow::datatypes::UInt32Type;
use arrow::row::{Row, RowConverter, SortField};

use crate::over::retract::{Place, RetractOverOperator};
use crate::waiting::{ReadsWaiting, Waiting, hold_rows, part_width, parts_with_files};
use crate::{Error, Result};
use weir_common::time::Timestamp;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, deleted_entries};
use weir_state::entry::{ValueReader, ValueWriter, split_entry_key};
use weir_state::entry_files::{Unread, entries_run, files_delta, store_key, write_entries};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::key_group_files::KeyGroupFiles;
use weir_state::memory_guess;
use weir_state::snapshot::{key_groups, key_groups_of_bytes, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, WRITE_CHUNK};

/// Changes waiting for their part's read: each batch with the number of
/// batches that came before it (which watermarks it precedes).
type Arrived = (u64, RecordBatch);

/// A retracting OVER subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are store keys: key group, then
/// partition key).
pub(in crate::over) struct RetractSpill {
    codec: Codec,
    /// The spilled partitions, opened at the first spill (or restore).
    files: Option<KeyGroupFiles>,
    /// Changes waiting for their part's read, and the entries of each
    /// part's files.
    waiting: Waiting<Arrived>,
    /// Key groups per part ([`part_width`]).
    width: u32,
    /// Partitions read back and not decoded yet.
    unread: Unread,
    /// Batches that came so far.
    arrived: u64,
    /// Watermarks held behind waiting changes, each with the number of
    /// batches that came before it.
    watermarks: VecDeque<(u64, Timestamp)>,
}

impl RetractSpill {
    pub(in crate::over) fn new(settings: SpillSettings, op: &RetractOverOperator) -> Result<Spilled<Self>> {
        // At least a kept row: its bytes and the tree's slot.
        let core = SpillCore::new(settings, op.changed.is_some(), 64);
        let own = RetractSpill {
            codec: Codec::new(op)?,
            files: None,
            waiting: Waiting::default(),
            width: part_width(op.max_parallelism),
            unread: Unread::default(),
            arrived: 0,
            watermarks: VecDeque::new(),
        };
        Ok(Spilled::new(core, own))
    }
}

/// A partition's `count` rows as an entry's value: how many, then each
/// one's time, copy and bytes.
fn encode_rows<'a>(count: usize, rows: impl Iterator<Item = &'a Place>) -> Vec<u8> {
    let mut value = ValueWriter((count as u32).to_le_bytes().to_vec());
    for (time, row, copy) in rows {
        value.time(*time).count(*copy as usize).bytes(row);
    }
    value.0
}

/// How many rows an [`encode_rows`] value holds (read without decoding
/// them: a part is read by its waiting changes against its rows).
fn rows_in(value: &[u8]) -> Result<u32> {
    let count = value.get(..4).ok_or_else(cut_short)?;
    Ok(u32::from_le_bytes(count.try_into().expect("4 bytes")))
}

fn cut_short() -> Error {
    Error::State("a spilled OVER partition's rows are cut short".into())
}

/// The rows of an [`encode_rows`] value.
fn decode_rows(bytes: &[u8]) -> Result<Vec<(i64, u32, &[u8])>> {
    let body = bytes.get(4..).ok_or_else(cut_short)?;
    let (mut value, mut rows) = (ValueReader(body), Vec::new());
    while !value.is_done() {
        rows.push((value.time()?, value.count()? as u32, value.bytes()?));
    }
    Ok(rows)
}

/// A partition of an [`encode_rows`] value, as memory keeps it.
fn decode_partition(bytes: &[u8]) -> Result<BTreeMap<Place, ()>> {
    Ok((decode_rows(bytes)?.into_iter())
        .map(|(time, copy, row)| ((time, Arc::from(row), copy), ()))
        .collect())
}

/// Entries to the heap's state rows (`_key_group`, the input's columns).
struct Codec {
    schema: arrow::datatypes::SchemaRef,
    keyless: bool,
    keys: RowConverter,
    rows: RowConverter,
    max_parallelism: usize,
}

impl Codec {
    fn new(op: &RetractOverOperator) -> Result<Codec> {
        let input = op.spec.input.fields().iter();
        Ok(Codec {
            schema: op.state_schema(),
            keyless: op.spec.partition.is_empty(),
            keys: super::super::converter(&op.spec.partition, &op.spec.input)?,
            rows: RowConverter::new(input.map(|f| SortField::new(f.data_type().clone())).collect())?,
            max_parallelism: op.max_parallelism,
        })
    }

    /// Each partition key's key group.
    fn key_groups(&self, keys: &[&[u8]]) -> Result<Vec<u32>> {
        match self.keyless {
            true => Ok(vec![0; keys.len()]),
            false => Ok(key_groups_of_bytes(&self.keys, keys, self.max_parallelism)?
                .values()
                .to_vec()),
        }
    }

    /// The state rows of entries; `None` without rows.
    fn decode(&self, entries: &[Entry]) -> Result<Option<RecordBatch>> {
        Ok(self.decode_keyed(entries)?.map(|(rows, _)| rows))
    }

    /// [`Codec::decode`] as a replacing file's part, each row keyed by its
    /// partition.
    fn decode_parts(&self, entries: &[Entry]) -> Result<Vec<ReplacedPart>> {
        let part = self
            .decode_keyed(entries)?
            .map(|(rows, keys)| (rows, keys, false));
        Ok(part.into_iter().collect())
    }

    /// [`Codec::decode`], and each row's partition key.
    fn decode_keyed(&self, entries: &[Entry]) -> Result<Option<(RecordBatch, BinaryArray)>> {
        let (mut groups, mut rows): (Vec<u32>, Vec<Row<'_>>) = (Vec::new(), Vec::new());
        let mut keys = BinaryBuilder::new();
        let parser = self.rows.parser();
        for (entry, value) in entries {
            let (group, key) = split_entry_key(entry)?;
            for (_, _, row) in decode_rows(value)? {
                groups.push(group);
                keys.append_value(key);
                rows.push(parser.parse(row));
            }
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(groups))];
        columns.extend(self.rows.convert_rows(rows)?);
        Ok(Some((state_rows(&self.schema, columns)?, keys.finish())))
    }
}

impl ReadsWaiting for RetractOverOperator {
    type Rows = Arrived;

    fn waiting(&self) -> Option<(&Waiting<Arrived>, usize)> {
        (self.spill.as_ref()).map(|s| (&s.own.waiting, s.core.settings.budget))
    }

    fn waiting_mut(&mut self) -> Option<&mut Waiting<Arrived>> {
        self.spill.as_mut().map(|s| &mut s.own.waiting)
    }

    fn load_part(&mut self, part: u32) -> Result<usize> {
        self.load(part)
    }

    /// Applies a part's waiting changes as one mini-batch.
    fn take_waiting(&mut self, rows: Vec<Arrived>, out: &mut Output) -> Result<usize> {
        let batches: Vec<RecordBatch> = rows.into_iter().map(|(_, batch)| batch).collect();
        let Some(first) = batches.first() else {
            return Ok(0);
        };
        let batch = arrow::compute::concat_batches(&first.schema(), &batches)?;
        self.process(&batch, out)?;
        Ok(batch.num_rows())
    }

    fn operator_name(&self) -> &str {
        &self.spec.name
    }

    /// A quarter, as for insert-only input: a read decodes whole
    /// partitions (every row each keeps) for its changes, so it pays to
    /// read many changes at a time (docs/state.md's job: 15 s with a
    /// quarter, 18 s with an eighth).
    fn waiting_share(&self) -> usize {
        4
    }
}

spills_when_full!(RetractOverOperator);

impl RetractOverOperator {
    /// Bytes its kept rows, the changes waiting and the partitions read
    /// back take in memory, about.
    fn memory_size(&self) -> usize {
        let rows: usize = (self.partitions.iter())
            .map(|(k, rows)| k.len() + 64 + rows.keys().map(|p| p.1.len() + 80).sum::<usize>())
            .sum();
        let spilled = (self.spill.as_ref()).map_or(0, |s| s.own.waiting.bytes() + s.own.unread.size());
        rows + 16 * self.partitions.capacity() + spilled
    }

    /// Whether partitions went to files: changes of key groups with files
    /// then wait for their read, and snapshots read the files.
    pub(super) fn spilled_to_files(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.own.files.is_some())
    }

    /// Of a batch: the changes of parts with files wait for their part's
    /// read. Returns the other changes, to apply now (`None` when all wait).
    pub(super) fn hold_unread(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let data = weir_common::changelog::data(batch);
        // From the key columns: no row bytes to parse back.
        let columns = crate::over::evaluate(&self.spec.partition, &data)?;
        let groups = key_groups(&columns, data.num_rows(), self.max_parallelism)?;
        let own = &mut self.spill.as_mut().expect("changes wait only when spilled").own;
        let files = own.files.as_ref().expect("changes wait only when spilled");
        let parts = parts_with_files(files, own.width, self.max_parallelism, &groups);
        let arrived = own.arrived;
        own.arrived += 1;
        hold_rows(&mut own.waiting, batch, &parts, |rows| (arrived, rows))
    }

    /// Holds `watermark` behind the changes waiting, if any; else it goes.
    pub(super) fn hold_watermark(&mut self, watermark: Timestamp, out: &mut Output) {
        match self.spill.as_mut().map(|s| &mut s.own) {
            Some(own) if !own.waiting.is_empty() || !own.watermarks.is_empty() => {
                own.watermarks.push_back((own.arrived, watermark));
            }
            _ => out.watermark(watermark),
        }
    }

    /// Passes on the latest watermark held that no waiting change came
    /// before.
    pub(super) fn forward_watermarks(&mut self, out: &mut Output) {
        let Some(own) = self.spill.as_mut().map(|s| &mut s.own) else {
            return;
        };
        let oldest = own.waiting.least_first(|(arrived, _)| *arrived);
        let mut latest = None;
        while let Some(&(before, watermark)) = own.watermarks.front() {
            if oldest.is_some_and(|oldest| oldest < before) {
                break;
            }
            own.watermarks.pop_front();
            latest = Some(watermark);
        }
        if let Some(watermark) = latest {
            out.watermark(watermark);
        }
    }

    /// Brings the partitions of `part`'s files to memory, as bytes; the
    /// files go. Returns the entries read.
    fn load(&mut self, part: u32) -> Result<usize> {
        let spill = self.spill.as_mut().expect("spilled");
        let Some(files) = spill.own.files.as_mut() else {
            return Ok(0);
        };
        let stored = spill.own.waiting.stored_in(part);
        let batches = files.take(part)?;
        spill.own.waiting.stored_changed(part, -(stored as i64));
        batches.into_iter().for_each(|rows| {
            spill.own.unread.add(rows);
        });
        Ok(stored as usize)
    }

    /// Decodes the partitions of `keys` read back and not decoded yet.
    pub(super) fn decode_read(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Some(unread) = (self.spill.as_mut().map(|s| &mut s.own.unread)).filter(|u| !u.is_empty()) else {
            return Ok(());
        };
        for key in keys {
            if let Some(value) = unread.take(key) {
                self.partitions.insert((*key).into(), decode_partition(value)?);
            }
        }
        Ok(())
    }

    /// Writes every partition to its key group's files, a file per part
    /// (those read back and not decoded as they were), notes the
    /// partitions changed since the last snapshot, and empties memory.
    pub(in crate::over) fn spill_all(&mut self) -> Result<()> {
        let unread = self.spill.as_mut().map(|s| std::mem::take(&mut s.own.unread));
        let Some(mut unread) = unread.filter(|u| !self.partitions.is_empty() || !u.is_empty()) else {
            return Ok(());
        };
        self.note_flushed()?;
        let spill = self.spill.as_mut().expect("checked above");
        let kept: Vec<_> = self.partitions.iter().collect();
        let keys: Vec<&[u8]> = kept.iter().map(|(k, _)| &k[..]).collect();
        let mut groups = spill.own.codec.key_groups(&keys)?;
        let as_read: Vec<(u32, &[u8], &[u8])> = unread.entries().collect();
        let read_rows = (as_read.iter())
            .map(|e| rows_in(e.2))
            .collect::<Result<Vec<u32>>>()?;
        groups.extend(as_read.iter().map(|e| e.0));
        let width = spill.own.width;
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        let files = spill.own.files.as_mut().expect("opened above");
        // Each part's rows, by which its waiting changes are weighed.
        let mut stored = BTreeMap::<u32, i64>::new();
        write_entries(files, width, &groups, |i, group, rows| {
            let count = match kept.get(i) {
                Some((key, partition)) => {
                    rows.push(group, key, &encode_rows(partition.len(), partition.keys()));
                    partition.len()
                }
                None => {
                    let (_, key, value) = as_read[i - kept.len()];
                    rows.push(group, key, value);
                    read_rows[i - kept.len()] as usize
                }
            };
            *stored.entry(group / width).or_default() += count as i64;
        })?;
        for (part, n) in stored {
            spill.own.waiting.stored_changed(part, n);
        }
        drop(as_read);
        unread.clear();
        spill.own.unread = unread;
        self.partitions = Default::default();
        spill.core.emptied();
        Ok(())
    }

    /// Notes the partitions changed in memory, about to be written to the
    /// files, for the next incremental snapshot to read back.
    fn note_flushed(&mut self) -> Result<()> {
        let (Some(changed), Some(spill)) = (self.changed.as_mut().map(std::mem::take), self.spill.as_mut())
        else {
            return Ok(());
        };
        let changed: Vec<Box<[u8]>> = changed.into_iter().collect();
        for chunk in changed.chunks(WRITE_CHUNK) {
            let keys: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
            let groups = spill.own.codec.key_groups(&keys)?;
            (keys.iter().zip(groups)).for_each(|(key, group)| spill.core.note(&store_key(group, key)));
        }
        Ok(())
    }

    /// A full snapshot of spilled state: every partition to the files, then
    /// the files, frozen now, as one run of state rows in key-group order,
    /// keyed by partition when it is the `base` of an incremental chain
    /// (which then leaves no change for the next delta), written by the
    /// snapshot's writer.
    pub(in crate::over) fn spilled_snapshot(&mut self, base: bool) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        if base {
            self.spill.forget_spilled_changes();
        }
        let (codec, schema) = (Codec::new(self)?, self.state_schema());
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let files = spill.own.files.as_ref().expect("has spilled");
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let decode = move |entries: &[Entry]| match base {
            true => replacement_rows(&schema, codec.decode_parts(entries)?, true),
            false => codec.decode(entries),
        };
        let path = files.snapshot_run_path(spill.core.runs)?;
        Ok(vec![entries_run(files.frozen(), path, decode)])
    }

    /// An incremental snapshot of spilled state: every partition to the
    /// files, then those changed since the last snapshot, read back from
    /// the files frozen now by the snapshot's writer (deleted when they
    /// have no entry there). `None`: nothing changed.
    pub(in crate::over) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        self.spill_all()?;
        let (codec, schema) = (Codec::new(self)?, self.state_schema());
        let deleting = schema.clone();
        let read = move |found: &[Entry], missing: &[&[u8]]| {
            let mut parts = codec.decode_parts(found)?;
            parts.extend(deleted_entries(&deleting, missing)?);
            Ok(parts)
        };
        let spill = self.spill.as_mut().expect("has spilled");
        let files = spill.own.files.as_ref().expect("has spilled");
        files_delta(&mut spill.core, files, spill.own.width, schema, read)
    }

    /// Whether restored state `rows` go to files: once files are there, or
    /// when they may not fit half the memory the state is given (the rows
    /// and the partitions built from them are in memory at once).
    pub(super) fn restores_to_files(&self, rows: &RecordBatch) -> bool {
        self.spill.as_ref().is_some_and(|s| {
            s.own.files.is_some()
                || rows.get_array_memory_size() > memory_guess::spill_threshold(s.core.settings.budget) / 2
        })
    }

    /// Restores state rows into the files (not memory): each partition's
    /// rows in order as one entry, a file per part.
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        let data = RecordBatch::try_new(self.spec.input.clone(), rows.columns()[1..].to_vec())
            .map_err(|e| Error::State(format!("{}: kept rows: {e}", self.spec.name)))?;
        let groups = rows.column(0).as_primitive::<UInt32Type>();
        let keys = self.partition_keys(&data)?;
        let times = crate::join::window::millis(data.column(self.time_column()?))?;
        let converted = self.rows_of.convert_columns(data.columns())?;
        let key = |i: usize| keys.as_ref().map_or(&[][..], |k| k.row(i).data());
        let place = |i: usize| (groups.value(i), key(i), times[i], converted.row(i).data());
        let mut order: Vec<usize> = (0..rows.num_rows()).collect();
        order.sort_by(|a, b| place(*a).cmp(&place(*b)));
        let mut entries: Vec<(u32, usize, Vec<u8>)> = Vec::new();
        for same in order.chunk_by(|a, b| groups.value(*a) == groups.value(*b) && key(*a) == key(*b)) {
            let mut value = ValueWriter((same.len() as u32).to_le_bytes().to_vec());
            for (n, i) in same.iter().enumerate() {
                // Equal rows before it in the partition: its copy.
                let copy = same[..n]
                    .iter()
                    .rev()
                    .take_while(|j| place(**j) == place(*i))
                    .count();
                value.time(times[*i]).count(copy).bytes(converted.row(*i).data());
            }
            entries.push((groups.value(same[0]), same[0], value.0));
        }
        let spill = self.spill.as_mut().expect("spilling");
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        let files = spill.own.files.as_mut().expect("opened above");
        let of: Vec<u32> = entries.iter().map(|e| e.0).collect();
        let width = spill.own.width;
        write_entries(files, width, &of, |i, group, rows| {
            rows.push(group, key(entries[i].1), &entries[i].2);
        })?;
        for (group, _, value) in &entries {
            spill
                .own
                .waiting
                .stored_changed(group / width, rows_in(value)? as i64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_rows_come_back_from_their_value_in_order() {
        let rows: Vec<Place> = vec![
            (-2, Arc::from(&b"a"[..]), 0),
            (-2, Arc::from(&b"a"[..]), 1),
            (5, Arc::from(&b""[..]), 0),
        ];
        let value = encode_rows(rows.len(), rows.iter());
        let back = decode_rows(&value).unwrap();
        assert_eq!(back, [(-2, 0, &b"a"[..]), (-2, 1, b"a"), (5, 0, b"")]);
        assert_eq!(rows_in(&value).unwrap(), 3);
        assert!(decode_rows(&value[..value.len() - 3]).is_err());
        assert!(rows_in(&value[..2]).is_err());
    }
}
