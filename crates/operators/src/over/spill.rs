//! The spilling state backend of OVER aggregations: partitions beyond the memory budget in files per key group.
//!
//! Memory holds the partitions the latest batches touched. When they pass
//! a quarter of the subtask's budget ([`weir_state::memory_guess`]),
//! every partition is written to a file of its key group
//! ([`weir_state::entry_files`], one entry per partition, its key and
//! [`encode_partition`]'s value: the time of its first row waiting for the
//! watermark, its last released time, its accumulators' states, a bounded
//! frame's rows and its waiting rows) and memory starts empty again.
//!
//! From then on what reaches a key group with files waits there
//! ([`crate::waiting`]), in arrival order: a batch's rows, and a watermark
//! that concerns it (rows of it wait, or its files hold rows waiting for
//! the watermark at or before it). When enough rows wait, a second has
//! passed, a barrier comes or input ends, the key group's files come back
//! to memory (the files go; a partition is decoded when a row comes to it,
//! or when a watermark reaches its first waiting row) and its queue is
//! replayed: each batch as it came, each watermark releasing the rows
//! before it. So every
//! partition sees its rows and watermarks in the heap's order: a row is
//! late, enters and leaves its frame as on the heap; only the order between
//! partitions can differ. The watermark passed on stays at the earliest
//! watermark still queued, so no row is released after a watermark past it.
//!
//! Checkpoints stay state files: a snapshot writes memory to the files,
//! then the frozen files as one run of the heap's state rows, read by the
//! snapshot's writer; an incremental one the partitions changed since the
//! last snapshot, read back from the frozen files.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Schema, UInt32Type};
use arrow::row::{RowConverter, SortField};

use crate::Result;
use crate::over::state::{
    ACCUMULATORS, FRAME_ROW, KeyedPart, Part, WAITING_ROW, cast_all, replaced_parts, rows_of_parts,
};
use crate::over::{OverAggregate, OverOperator, converter, evaluate};
use crate::waiting::{ReadsWaiting, Waiting, hold_rows, part_width, parts_of, parts_with_files};
use weir_common::time::{Timestamp, wall_clock_millis};
use weir_runtime::Output;
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_state::deferred::Deferred;
use weir_state::entry::{ValueReader, ValueWriter, split_entry_key};
use weir_state::entry_files::{Unread, entries_run, entry_columns, files_delta, store_key, write_entries};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::key_group_files::KeyGroupFiles;
use weir_state::keyed_rows::columns_of;
use weir_state::snapshot::{key_groups, key_groups_of_bytes};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::Entry;

/// What waits for a part's read, in arrival order.
pub(super) enum Queued {
    /// A batch's rows, with the wall clock when they came (a
    /// processing-time OVER's time for them).
    Rows(RecordBatch, Timestamp),
    /// A watermark that concerns the part's partitions.
    Watermark(Timestamp),
}

/// An OVER aggregation subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are store keys: key group, then
/// partition key).
pub(super) struct OverSpill {
    codec: Codec,
    /// The spilled partitions, opened at the first spill (or restore).
    files: Option<KeyGroupFiles>,
    /// What waits for each part's read, and the entries of its files.
    waiting: Waiting<Queued>,
    /// Key groups per part ([`part_width`]).
    width: u32,
    /// Partitions read back and not decoded yet.
    unread: Unread,
    /// Each part with files: the earliest time of a row in them waiting
    /// for the watermark.
    due_from: BTreeMap<u32, Timestamp>,
    /// Each part with a watermark queued: the watermark its partitions had
    /// before it (the watermark passed on stays at the least).
    held: BTreeMap<u32, Timestamp>,
    /// The watermark last passed on.
    forwarded: Timestamp,
    /// The partitions read back and not decoded yet that have rows waiting
    /// for the watermark (their first one's time, and their place in
    /// [`Unread`], earliest first): decoded when a watermark reaches it.
    unread_due: BinaryHeap<Reverse<(Timestamp, u32, u32)>>,
}

impl OverSpill {
    /// The spill of an OVER subtask of `spec` (an error if its states
    /// have no row format).
    pub(super) fn new(
        settings: SpillSettings,
        spec: &Arc<OverAggregate>,
        max_parallelism: usize,
        incremental: bool,
    ) -> Result<Spilled<Self>> {
        let own = OverSpill {
            codec: Codec::new(spec, max_parallelism)?,
            files: None,
            waiting: Waiting::default(),
            width: part_width(max_parallelism),
            unread: Unread::default(),
            due_from: BTreeMap::new(),
            held: BTreeMap::new(),
            forwarded: Timestamp::MIN,
            unread_due: BinaryHeap::new(),
        };
        // At least a row waiting: its bytes and the map's slot.
        Ok(Spilled::new(SpillCore::new(settings, incremental, 64), own))
    }
}

/// The first waiting time of a partition without waiting rows.
const NONE_WAITING: Timestamp = Timestamp::MAX;

/// One stored partition, as its entry holds it.
struct Stored<'a> {
    key: &'a [u8],
    last: i64,
    states: &'a [u8],
    frame: Vec<(i64, &'a [u8])>,
    waiting: Vec<(i64, &'a [u8])>,
}

/// A partition's entry value: its first waiting row's time (to find the
/// partitions a watermark releases rows of without decoding them), last
/// time, states' row, frame rows, waiting rows (in order of time);
/// written over `value`.
fn encode_partition<'a>(
    value: &mut ValueWriter,
    last: i64,
    states: &[u8],
    frame: impl ExactSizeIterator<Item = (i64, &'a [u8])>,
    waiting: &[(i64, &[u8])],
) {
    value.0.clear();
    let first = waiting.first().map_or(NONE_WAITING, |(t, _)| *t);
    value.time(first).time(last).bytes(states).count(frame.len());
    for (t, row) in frame {
        value.time(t).bytes(row);
    }
    value.count(waiting.len());
    for (t, row) in waiting {
        value.time(*t).bytes(row);
    }
}

/// The time of the first row of an entry's partition waiting for the
/// watermark ([`NONE_WAITING`] without).
fn first_waiting(value: &[u8]) -> Result<Timestamp> {
    ValueReader(value).time()
}

/// The partition of key `key`'s entry value ([`encode_partition`]).
fn decode_partition<'a>(key: &'a [u8], value: &'a [u8]) -> Result<Stored<'a>> {
    let mut value = ValueReader(value);
    let _first = value.time()?;
    let (last, states) = (value.time()?, value.bytes()?);
    let timed = |value: &mut ValueReader<'a>| -> Result<Vec<(i64, &'a [u8])>> {
        (0..value.count()?)
            .map(|_| Ok((value.time()?, value.bytes()?)))
            .collect()
    };
    let frame = timed(&mut value)?;
    let waiting = timed(&mut value)?;
    Ok(Stored {
        key,
        last,
        states,
        frame,
        waiting,
    })
}

/// Partitions to entries and back: the operator's row formats, and one of
/// every accumulator's state fields.
struct Codec {
    spec: Arc<OverAggregate>,
    keys: RowConverter,
    args: RowConverter,
    rows: RowConverter,
    states: RowConverter,
    state_types: Vec<DataType>,
    max_parallelism: usize,
}

impl Codec {
    fn new(spec: &Arc<OverAggregate>, max_parallelism: usize) -> Result<Codec> {
        let state_types: Vec<DataType> = (spec.accumulators()?.iter())
            .flat_map(|a| a.state_fields())
            .map(|f| f.data_type().clone())
            .collect();
        let input = spec.input.fields().iter();
        Ok(Codec {
            keys: converter(&spec.partition, &spec.input)?,
            args: converter(&spec.arguments(), &spec.input)?,
            rows: RowConverter::new(input.map(|f| SortField::new(f.data_type().clone())).collect())?,
            states: RowConverter::new(state_types.iter().map(|t| SortField::new(t.clone())).collect())?,
            state_types,
            max_parallelism,
            spec: spec.clone(),
        })
    }

    /// Each partition key's key group.
    fn key_groups(&self, keys: &[&[u8]]) -> Result<Vec<u32>> {
        match self.spec.partition.is_empty() {
            true => Ok(vec![0; keys.len()]),
            false => Ok(key_groups_of_bytes(&self.keys, keys, self.max_parallelism)?
                .values()
                .to_vec()),
        }
    }

    /// The accumulators' states (all of them, one after another) as rows.
    fn state_rows(&self, states: Vec<ArrayRef>) -> Result<arrow::row::Rows> {
        let types = self
            .state_types
            .iter()
            .map(|t| arrow::datatypes::Field::new("", t.clone(), true));
        let states = cast_all(states, &Schema::new(types.collect::<Vec<_>>()))?;
        Ok(self.states.convert_columns(&states)?)
    }

    /// Partition key columns (none when keyless).
    fn key_columns<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        match self.spec.partition.is_empty() {
            true => Ok(Vec::new()),
            false => columns_of(&self.keys, keys),
        }
    }

    /// The state rows (as the heap writes them) of store entries; `None`
    /// without partitions.
    fn decode(&self, entries: &[Entry]) -> Result<Option<RecordBatch>> {
        let stored = stored_of(entries)?;
        let parts = self.parts(&stored)?.into_iter().map(|(part, _)| part).collect();
        rows_of_parts(&self.spec, parts, self.max_parallelism)
    }

    /// [`Codec::decode`] as a replacing file's parts, each row keyed by its
    /// partition key.
    fn decode_parts(&self, entries: &[Entry]) -> Result<Vec<ReplacedPart>> {
        let stored = stored_of(entries)?;
        replaced_parts(&self.spec, self.parts(&stored)?, self.max_parallelism)
    }

    /// The state parts of stored partitions, with the partition key of each
    /// row; none without partitions.
    fn parts<'a>(&self, stored: &[Stored<'a>]) -> Result<Vec<KeyedPart<'a>>> {
        if stored.is_empty() {
            return Ok(Vec::new());
        }
        let mut parts = vec![(
            Part {
                role: ACCUMULATORS,
                times: stored
                    .iter()
                    .map(|s| (s.last != i64::MIN).then_some(s.last))
                    .collect(),
                keys: self.key_columns(stored.iter().map(|s| s.key))?,
                input: None,
                args: None,
                states: Some(columns_of(&self.states, stored.iter().map(|s| s.states))?),
            },
            stored.iter().map(|s| s.key).collect(),
        )];
        let framed: Vec<(&[u8], i64, &[u8])> = (stored.iter())
            .flat_map(|s| s.frame.iter().map(|(t, r)| (s.key, *t, *r)))
            .collect();
        let waiting: Vec<(&[u8], i64, &[u8])> = (stored.iter())
            .flat_map(|s| s.waiting.iter().map(|(t, r)| (s.key, *t, *r)))
            .collect();
        for (role, rows) in [(FRAME_ROW, framed), (WAITING_ROW, waiting)] {
            if rows.is_empty() {
                continue;
            }
            let values = match role {
                FRAME_ROW => &self.args,
                _ => &self.rows,
            };
            let values = columns_of(values, rows.iter().map(|(_, _, r)| *r))?;
            let (args, input) = match role {
                FRAME_ROW => (Some(values), None),
                _ => (None, Some(values)),
            };
            let part = Part {
                role,
                times: rows.iter().map(|(_, t, _)| Some(*t)).collect(),
                keys: self.key_columns(rows.iter().map(|(k, _, _)| *k))?,
                input,
                args,
                states: None,
            };
            parts.push((part, rows.iter().map(|(k, _, _)| *k).collect()));
        }
        Ok(parts)
    }
}

/// The partitions of store entries (key group, then partition key).
fn stored_of(entries: &[Entry]) -> Result<Vec<Stored<'_>>> {
    (entries.iter())
        .map(|(k, v)| decode_partition(split_entry_key(k)?.1, v))
        .collect()
}

spills_when_full!(OverOperator);

impl ReadsWaiting for OverOperator {
    type Rows = Queued;

    fn waiting(&self) -> Option<(&Waiting<Queued>, usize)> {
        (self.spill.as_ref()).map(|s| (&s.own.waiting, s.core.settings.budget))
    }

    fn waiting_mut(&mut self) -> Option<&mut Waiting<Queued>> {
        self.spill.as_mut().map(|s| &mut s.own.waiting)
    }

    fn load_part(&mut self, part: u32) -> Result<usize> {
        self.load(part)
    }

    /// Replays a part's queue, apart from memory's other waiting rows (of
    /// partitions the queue's watermarks have passed already): each batch
    /// is taken and each watermark releases the part's rows up to it.
    fn take_waiting(&mut self, queue: Vec<Queued>, out: &mut Output) -> Result<usize> {
        let others = std::mem::take(&mut self.pending);
        let replayed = self.replay(queue, out);
        for (row, group) in std::mem::replace(&mut self.pending, others) {
            self.pending.insert(row, group);
        }
        replayed
    }

    fn operator_name(&self) -> &str {
        &self.spec.name
    }

    /// A quarter: a read decodes a partition per waiting row and the
    /// partitions a watermark reaches, then writes them all back, so rows
    /// are better read many at a time (the unbounded job of docs/state.md,
    /// its state 20 times its budget: 6 s with a quarter, 9 s with an
    /// eighth, 17 s with a thirty-second).
    fn waiting_share(&self) -> usize {
        4
    }
}

impl OverOperator {
    /// Bytes its partitions and waiting rows take in memory, about.
    fn memory_size(&self) -> usize {
        let keys: usize = self.keys.iter().map(|k| 2 * k.len() + 72).sum();
        let frames: usize = (self.frames.iter())
            .map(|f| 24 * f.capacity() + f.iter().map(|(_, r)| r.len()).sum::<usize>())
            .sum();
        let waiting: usize = self.pending.values().map(|(r, _)| r.len() + 64).sum();
        let accumulators: usize = self.accumulators.iter().map(|a| a.size()).sum();
        let spilled = (self.spill.as_ref()).map_or(0, |s| {
            s.own.waiting.bytes() + s.own.unread.size() + 16 * s.own.unread_due.capacity()
        });
        keys + frames + waiting + accumulators + 8 * self.last.capacity() + spilled
    }

    /// Whether partitions went to files: what reaches a key group with
    /// files then waits for its read, and snapshots read the files.
    pub(super) fn spilled_to_files(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.own.files.is_some())
    }

    /// Of a batch that came at `now`: the rows of parts with files wait for
    /// their part's read. Returns the other rows, to take now (`None` when
    /// all wait).
    pub(super) fn hold_unread(&mut self, batch: &RecordBatch, now: Timestamp) -> Result<Option<RecordBatch>> {
        let columns = evaluate(&self.spec.partition, batch)?;
        let groups = key_groups(&columns, batch.num_rows(), self.max_parallelism)?;
        let own = &mut self.spill.as_mut().expect("rows wait only when spilled").own;
        let files = own.files.as_ref().expect("rows wait only when spilled");
        let parts = parts_with_files(files, own.width, self.max_parallelism, &groups);
        hold_rows(&mut own.waiting, batch, &parts, |rows| Queued::Rows(rows, now))
    }

    /// The watermark, just advanced from `before`, waits in the queue of
    /// each part with files it concerns (rows of the part wait, or its
    /// files hold rows waiting for a watermark at or before it), after what
    /// waits there; following watermarks with nothing between them are one.
    pub(super) fn hold_watermark(&mut self, before: Timestamp) {
        let watermark = self.watermark;
        let Some(own) = self.spill.as_mut().map(|s| &mut s.own) else {
            return;
        };
        let now = wall_clock_millis();
        let parts = (self.max_parallelism as u32).div_ceil(own.width);
        for part in 0..parts {
            let due = own.due_from.get(&part).is_some_and(|t| *t <= watermark);
            if !due && !own.waiting.holds(part) {
                continue;
            }
            match own.waiting.last_mut(part) {
                Some(Queued::Watermark(last)) => *last = watermark,
                _ => own.waiting.hold(part, Queued::Watermark(watermark), 0, 0, now),
            }
            own.held.entry(part).or_insert(before);
        }
    }

    /// Passes the watermark on as far as every partition's rows were
    /// released: a part with a watermark queued holds it at the one
    /// before.
    pub(super) fn forward(&mut self, out: &mut Output) {
        let Some(own) = self.spill.as_mut().map(|s| &mut s.own) else {
            return;
        };
        let to = (own.held.values().min()).map_or(self.watermark, |held| (*held).min(self.watermark));
        if to > own.forwarded {
            own.forwarded = to;
            out.watermark(to);
        }
    }

    /// Brings `part`'s files to memory (the files go) as partitions not
    /// decoded yet, those with rows waiting for the watermark noted by
    /// their first one's time. Returns the entries read.
    fn load(&mut self, part: u32) -> Result<usize> {
        let Some(own) = self.spill.as_mut().map(|s| &mut s.own) else {
            return Ok(0);
        };
        let Some(files) = own.files.as_mut() else {
            return Ok(0);
        };
        let stored = files.rows_in(part);
        let batches = files.take(part)?;
        own.waiting.stored_changed(part, -(stored as i64));
        own.due_from.remove(&part);
        // Its queue is replayed next: its watermarks are passed.
        own.held.remove(&part);
        for rows in batches {
            let firsts = (0..rows.num_rows())
                .map(|i| first_waiting(entry_columns(&rows).2.value(i)))
                .collect::<Result<Vec<_>>>()?;
            let batch = own.unread.add(rows);
            for (i, first) in firsts.into_iter().enumerate() {
                if first != NONE_WAITING {
                    own.unread_due.push(Reverse((first, batch, i as u32)));
                }
            }
        }
        Ok(stored)
    }

    /// A part's queue, its files read: each batch taken, and each
    /// watermark releasing rows up to it (the partitions read back whose
    /// first waiting row it reaches decoded first). Returns the rows taken.
    fn replay(&mut self, queue: Vec<Queued>, out: &mut Output) -> Result<usize> {
        let mut taken = 0;
        for queued in queue {
            match queued {
                Queued::Rows(batch, now) => {
                    self.process_at(&batch, now, out)?;
                    taken += batch.num_rows();
                }
                Queued::Watermark(watermark) => {
                    self.decode_due(watermark)?;
                    self.release(watermark, out)?;
                }
            }
        }
        Ok(taken)
    }

    /// Decodes the partitions read back whose waiting rows a watermark at
    /// `watermark` reaches, so that they are released with memory's.
    pub(super) fn decode_due(&mut self, watermark: Timestamp) -> Result<()> {
        let Some(own) = self.spill.as_mut().map(|s| &mut s.own) else {
            return Ok(());
        };
        let mut due: Vec<Box<[u8]>> = Vec::new();
        while let Some(Reverse((first, batch, row))) = own.unread_due.peek().copied()
            && first <= watermark
        {
            own.unread_due.pop();
            due.push(own.unread.key_at(batch, row).into());
        }
        let keys: Vec<&[u8]> = due.iter().map(|k| &k[..]).collect();
        self.decode_read(&keys)
    }

    /// Decodes into memory the partitions of `keys` read back and not
    /// decoded yet.
    pub(super) fn decode_read(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Some(unread) = (self.spill.as_mut().map(|s| &mut s.own.unread)).filter(|u| !u.is_empty()) else {
            return Ok(());
        };
        let mut values: Vec<(&[u8], Vec<u8>)> = Vec::new();
        for key in keys {
            if let Some(value) = unread.take(key) {
                values.push((key, value.to_vec()));
            }
        }
        let stored = (values.iter())
            .map(|(key, value)| decode_partition(key, value))
            .collect::<Result<Vec<_>>>()?;
        self.take_stored(&stored)
    }

    /// Adds stored partitions to memory.
    fn take_stored(&mut self, stored: &[Stored]) -> Result<()> {
        let Some(spill) = &self.spill else {
            return Ok(());
        };
        if stored.is_empty() {
            return Ok(());
        }
        let states = columns_of(&spill.own.codec.states, stored.iter().map(|s| s.states))?;
        let groups: Vec<usize> = stored.iter().map(|s| self.add_group(s.key)).collect();
        let (total, mut offset) = (self.keys.len(), 0);
        for acc in &mut self.accumulators {
            let n = acc.state_fields().len();
            acc.restore(&states[offset..offset + n], &groups, total)?;
            offset += n;
        }
        for (s, g) in stored.iter().zip(groups) {
            self.last[g] = s.last;
            self.frames[g].extend(s.frame.iter().map(|(t, r)| (*t, Box::from(*r))));
            for (t, row) in &s.waiting {
                self.seq += 1;
                self.pending.insert((*t, self.seq), (Box::from(*row), g));
            }
        }
        Ok(())
    }

    /// Before a restore adds a `chunk` of state rows (with partition keys
    /// `keys`): their partitions in files come to memory.
    pub(super) fn load_for_restore(&mut self, chunk: &RecordBatch, keys: &[&[u8]]) -> Result<()> {
        let Some(width) = self
            .spill
            .as_ref()
            .filter(|s| s.own.files.is_some())
            .map(|s| s.own.width)
        else {
            return Ok(());
        };
        for part in parts_of(chunk.column(0).as_primitive::<UInt32Type>().values(), width) {
            self.load(part)?;
        }
        self.decode_read(keys)
    }

    /// Writes every partition (and those read back and not decoded, as
    /// they were) to its key group's files, a file per part, notes the
    /// partitions changed since the last snapshot, and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let unread = (self.spill.as_mut()).map(|s| {
            s.own.unread_due.clear();
            std::mem::take(&mut s.own.unread)
        });
        let Some(unread) = unread.filter(|u| !self.keys.is_empty() || !u.is_empty()) else {
            return Ok(());
        };
        let spill = self.spill.as_mut().expect("checked above");
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let mut waiting: Vec<Vec<(i64, &[u8])>> = vec![Vec::new(); self.keys.len()];
        for ((t, _), (row, g)) in &self.pending {
            waiting[*g].push((*t, row));
        }
        let ids: Vec<usize> = (0..self.keys.len()).collect();
        let mut states = Vec::new();
        for acc in &self.accumulators {
            states.extend(acc.state(&ids)?);
        }
        let states = spill.own.codec.state_rows(states)?;
        let keys: Vec<&[u8]> = self.keys.iter().map(|k| &k[..]).collect();
        let mut groups = spill.own.codec.key_groups(&keys)?;
        let as_read: Vec<(u32, &[u8], &[u8])> = unread.entries().collect();
        groups.extend(as_read.iter().map(|e| e.0));
        let (own, mut flushed) = (&mut spill.own, spill.core.flushed.as_mut());
        let (width, due_from) = (own.width, &mut own.due_from);
        let files = own.files.as_mut().expect("opened above");
        let mut waits_from = |group: u32, first: Timestamp| {
            let at = due_from.entry(group / width).or_insert(first);
            *at = (*at).min(first);
        };
        let mut value = ValueWriter::default();
        let written = write_entries(files, width, &groups, |i, group, rows| {
            let Some(key) = keys.get(i) else {
                let (_, key, value) = as_read[i - keys.len()];
                // Written as read: its first waiting row's time as well.
                let first = first_waiting(value).unwrap_or(Timestamp::MIN);
                if first != NONE_WAITING {
                    waits_from(group, first);
                }
                return rows.push(group, key, value);
            };
            if let Some((first, _)) = waiting[i].first() {
                waits_from(group, *first);
            }
            if let (true, Some(flushed)) = (changed.contains(&i), flushed.as_mut()) {
                flushed.push(&store_key(group, key));
            }
            let frame = self.frames[i].iter().map(|(t, r)| (*t, &r[..]));
            encode_partition(&mut value, self.last[i], states.row(i).data(), frame, &waiting[i]);
            rows.push(group, key, &value.0);
        })?;
        for (part, n) in written {
            own.waiting.stored_changed(part, n as i64);
        }
        drop((waiting, as_read));
        let mut unread = unread;
        unread.clear();
        own.unread = unread;
        self.groups.clear();
        self.keys.clear();
        self.frames.clear();
        self.last.clear();
        self.pending.clear();
        self.accumulators = self.spec.accumulators()?;
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        Ok(())
    }

    /// A full snapshot of spilled state: every partition to the files, then
    /// the files, frozen now, as one run of state rows in key-group order,
    /// keyed by partition when it is the `base` of an incremental chain
    /// (which then leaves no change for the next delta), written by the
    /// snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self, base: bool) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        if base {
            self.spill.forget_spilled_changes();
        }
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let codec = Codec::new(&self.spec, self.max_parallelism)?;
        let schema = super::state::schema(&self.spec)?;
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let files = spill.own.files.as_ref().expect("has spilled");
        if files.is_empty() {
            return Ok(snapshot);
        }
        let decode = move |entries: &[Entry]| match base {
            true => replacement_rows(&schema, codec.decode_parts(entries)?, true),
            false => codec.decode(entries),
        };
        let path = files.snapshot_run_path(spill.core.runs)?;
        snapshot.deferred = vec![entries_run(files.frozen(), path, decode)];
        Ok(snapshot)
    }

    /// An incremental snapshot of spilled state: a base (`full`,
    /// [`OverOperator::spilled_snapshot`]), or every partition to the
    /// files, then those changed since the last snapshot, read back from
    /// the files frozen now by the snapshot's writer (partitions never
    /// go); and the watermark.
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        if full {
            return self.spilled_snapshot(true);
        }
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let codec = Codec::new(&self.spec, self.max_parallelism)?;
        let schema = super::state::schema(&self.spec)?;
        let read = move |found: &[Entry], _gone: &[&[u8]]| codec.decode_parts(found);
        let spill = self.spill.as_mut().expect("has spilled");
        let files = spill.own.files.as_ref().expect("has spilled");
        let delta: Option<Deferred> = files_delta(&mut spill.core, files, spill.own.width, schema, read)?;
        snapshot.deferred = delta.into_iter().collect();
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_entry_gives_back_its_time_states_frame_and_waiting_rows() {
        let frame = [(1, &b"f1"[..]), (2, b"")];
        let mut value = ValueWriter::default();
        encode_partition(&mut value, 5, b"states", frame.into_iter(), &[(9, &b"w"[..])]);
        let value = value.0;
        assert_eq!(first_waiting(&value).unwrap(), 9);
        let stored = decode_partition(b"key", &value).unwrap();
        assert_eq!((stored.key, stored.last), (&b"key"[..], 5));
        assert_eq!(stored.states, b"states");
        assert_eq!(stored.frame, frame);
        assert_eq!(stored.waiting, [(9, &b"w"[..])]);
        assert!(decode_partition(b"key", &value[..value.len() - 1]).is_err());
        let mut none = ValueWriter::default();
        encode_partition(&mut none, 5, b"", std::iter::empty(), &[]);
        assert_eq!(first_waiting(&none.0).unwrap(), NONE_WAITING);
    }
}
