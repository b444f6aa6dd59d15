//! Incremental snapshots of a spilled temporal join: at the barrier memory goes to the store, and a replacing delta reads what changed since the last snapshot from the store frozen then.
//!
//! What changed is noted as store keys, in store-key (so key-group) order:
//!
//! ```text
//!  key group | 1 | key                  a key's versions were written or removed
//!  key group | 0 | time                 stream rows at this time were written
//!  key group | 0 | time | 1 | join key  stream rows of this key fired (a
//!                                       null key's bytes are empty)
//! ```
//!
//! A versions note reads that key's versions (a key the store lacks is
//! deleted). The stream notes of one key group and time are read with one
//! prefix scan, which gives every row still waiting there, each keyed as
//! the heap's deltas key it (`0 | time | group | key`); a fired key with no
//! row left is deleted. Versions the watermark dropped since a key's last
//! write are not noted: a restore drops them again
//! ([`super::TemporalJoinOperator::compact`] at the restored watermark).

use std::collections::HashSet;

use crate::Result;
use crate::join::temporal::TemporalJoinOperator;
use crate::join::temporal::delta::{deleted_of, versions_key, waiting_key};
use crate::join::temporal::spill::{STREAM_PREFIX, split_stream_value, stored_parts, time_of};
use weir_runtime::operator::OperatorSnapshot;
use weir_state::deferred::{DeltaOf, keyed_base, store_delta};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::store::{Entry, Frozen};

/// Deleted state keys and their key groups, of stream rows (0) and of
/// versions (1).
type Gone = [(Vec<u32>, Vec<Vec<u8>>); 2];

impl TemporalJoinOperator {
    /// Notes what memory changed since the last spill (written to the
    /// store now): the keys whose versions changed and the stream rows that
    /// fired, from memory or from the store (the rows that came are noted
    /// as they are written).
    pub(super) fn note_changed(&mut self) -> Result<()> {
        let Some(changed) = self.changed.as_mut().map(std::mem::take) else {
            return Ok(());
        };
        let keys: Vec<&[u8]> = changed.keys.iter().map(|k| &k[..]).collect();
        let groups = weir_state::snapshot::key_groups_of_bytes(&self.keys_of, &keys, self.max_parallelism)?;
        let Some(flushed) = self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()) else {
            return Ok(());
        };
        for (key, group) in keys.iter().zip(groups.values()) {
            flushed.push(&super::spill::versions_key(*group, key));
        }
        for (time, group, key) in &changed.fired {
            let prefix = super::spill::stream_key(group.to_be_bytes(), *time, 0);
            flushed.push(&fired_note(&prefix, key));
        }
        Ok(())
    }

    /// An incremental snapshot of spilled state, and the watermark: memory
    /// to the store, then a base (`full`: the store, frozen now, as one run
    /// keyed as the heap's) or a replacing delta of what changed since the
    /// last snapshot, read from the store frozen now by the snapshot's
    /// writer.
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let (w, max_parallelism, spec) = (self.compacted, self.max_parallelism, self.spec.clone());
        let converters = crate::join::row_converters(&spec.inputs)?;
        let schema = spec.state_schema();
        let spill = self.spill.as_mut().expect("has spilled");
        if full {
            let decode =
                move |entries: &[Entry]| stored_parts(&spec, &converters, max_parallelism, w, entries);
            snapshot.deferred = keyed_base(&mut spill.core, schema, decode)?;
            return Ok(snapshot);
        }
        let Some(of) = DeltaOf::take(&mut spill.core, Vec::new(), |_: &[u8]| false)? else {
            return Ok(snapshot);
        };
        let deleting = schema.clone();
        // The stream prefix read last and its keys (its notes may span two
        // chunks).
        let mut last: Option<(Vec<u8>, HashSet<Vec<u8>>)> = None;
        let read_back = move |frozen: &Frozen, notes: &[&[u8]]| -> Result<Vec<ReplacedPart>> {
            let (entries, gone) = read_notes(frozen, notes, &mut last)?;
            let mut parts = stored_parts(&spec, &converters, max_parallelism, w, &entries)?;
            for (side, (groups, keys)) in gone.into_iter().enumerate() {
                if !keys.is_empty() {
                    parts.push(deleted_of(&deleting, side as i8, groups.into(), keys)?);
                }
            }
            Ok(parts)
        };
        let finish = move |parts| replacement_rows(&schema, parts, false);
        snapshot.deferred = vec![store_delta(of, read_back, finish)];
        Ok(snapshot)
    }
}

/// The note that the stream rows of `key` fired, of the store key of one
/// of them (its [`STREAM_PREFIX`] says where and when).
fn fired_note(stream_key: &[u8], key: &[u8]) -> Vec<u8> {
    [&stream_key[..STREAM_PREFIX], &[1], key].concat()
}

/// The store entries `notes` name (see the module's table) and the state
/// keys they delete; `last` is the stream prefix read last and its keys.
fn read_notes(
    frozen: &Frozen,
    notes: &[&[u8]],
    last: &mut Option<(Vec<u8>, HashSet<Vec<u8>>)>,
) -> Result<(Vec<Entry>, Gone)> {
    let cut = || crate::Error::State("an incremental temporal join note is cut short".into());
    let (mut entries, mut gone): (Vec<Entry>, Gone) = Default::default();
    for note in notes {
        let group = u32::from_be_bytes(note.get(..4).ok_or_else(cut)?.try_into().expect("4 bytes"));
        if note.get(4) == Some(&1) {
            let (found, _) = frozen.get_each(&[note])?;
            if found.is_empty() {
                gone[1].0.push(group);
                gone[1].1.push(versions_key(&note[5..]));
            }
            entries.extend(found);
            continue;
        }
        let prefix = note.get(..STREAM_PREFIX).ok_or_else(cut)?;
        if last.as_ref().is_none_or(|(p, _)| p[..] != *prefix) {
            let found = frozen.prefixed(prefix)?;
            let keys = (found.iter())
                .map(|(_, value)| Ok(split_stream_value(value)?.0.to_vec()))
                .collect::<Result<HashSet<_>>>()?;
            entries.extend(found);
            *last = Some((prefix.to_vec(), keys));
        }
        let present = &last.as_ref().expect("read above").1;
        if let Some(key) = note.get(STREAM_PREFIX + 1..)
            && !present.contains(key)
        {
            gone[0].0.push(group);
            gone[0].1.push(waiting_key(time_of(&prefix[5..])?, group, key));
        }
    }
    Ok((entries, gone))
}
