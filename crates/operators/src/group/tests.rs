//! GroupAggregate through the operator harness: rows and kinds in, changes out.

use crate::harness::Harness;

const TABLE: &str = "CREATE TABLE t (k STRING, v BIGINT) WITH ('connector' = 'datagen')";
const SINK: &str = "CREATE TABLE out (a STRING, b BIGINT, c BIGINT) WITH ('connector' = 'blackhole')";
const SINK2: &str = "CREATE TABLE out2 (a STRING, b BIGINT) WITH ('connector' = 'blackhole')";
const SINK_NUMBERS: &str = "CREATE TABLE nums (a BIGINT, b BIGINT) WITH ('connector' = 'blackhole')";
const SINK_ONE: &str = "CREATE TABLE one (a STRING) WITH ('connector' = 'blackhole')";

fn harness(insert: &str, nth: usize) -> Harness {
    Harness::of(
        &[TABLE, SINK, SINK2, SINK_NUMBERS, SINK_ONE],
        insert,
        "GroupAggregate",
        nth,
    )
    .unwrap()
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_new_group_is_inserted_and_a_changed_group_is_retracted_and_updated() {
    let mut h = harness("INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k", 0);
    assert_eq!(h.push("a 1\nb 2").unwrap(), lines(&["+I a 1 1", "+I b 1 2"]));
    assert_eq!(h.push("a 3").unwrap(), lines(&["-U a 1 1", "+U a 2 4"]));
}

#[test]
fn one_batch_emits_one_change_per_group_it_touched() {
    let mut h = harness("INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k", 0);
    assert_eq!(h.push("a 1\na 2\na 3").unwrap(), lines(&["+I a 3 6"]));
    assert_eq!(
        h.push("a 1\nb 1\na 1").unwrap(),
        lines(&["-U a 3 6", "+U a 5 8", "+I b 1 1"])
    );
}

#[test]
fn a_group_whose_result_did_not_change_emits_nothing() {
    let mut h = harness("INSERT INTO out2 SELECT k, MAX(v) FROM t GROUP BY k", 0);
    assert_eq!(h.push("a 5").unwrap(), lines(&["+I a 5"]));
    assert_eq!(h.push("a 3").unwrap(), Vec::<String>::new());
    h.restart().unwrap();
    assert_eq!(h.push("a 4").unwrap(), Vec::<String>::new());
    assert_eq!(h.push("a 7").unwrap(), lines(&["-U a 5", "+U a 7"]));
}

/// The outer aggregate of `c, COUNT(*)` over `k, COUNT(*) AS c` sees the
/// inner one's changes: its input rows are `c` with a kind.
fn counts_of_counts() -> Harness {
    harness(
        "INSERT INTO nums SELECT c, COUNT(*) FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) GROUP BY c",
        1,
    )
}

#[test]
fn retracted_rows_leave_their_group_and_the_last_one_deletes_it() {
    let mut h = counts_of_counts();
    assert_eq!(h.push("+I 1\n+I 1").unwrap(), lines(&["+I 1 2"]));
    assert_eq!(
        h.push("-U 1\n+U 2").unwrap(),
        lines(&["-U 1 2", "+U 1 1", "+I 2 1"])
    );
    assert_eq!(h.push("-D 1").unwrap(), lines(&["-D 1 1"]));
    // The group starts again from nothing.
    assert_eq!(h.push("+I 1").unwrap(), lines(&["+I 1 1"]));
}

#[test]
fn a_retraction_of_a_group_without_rows_is_ignored() {
    let mut h = counts_of_counts();
    assert_eq!(h.push("-D 7").unwrap(), Vec::<String>::new());
    assert_eq!(h.push("+I 7\n-U 3").unwrap(), lines(&["+I 7 1"]));
}

#[test]
fn min_and_max_under_retraction_fall_back_to_the_next_value() {
    let mut h = harness(
        "INSERT INTO out SELECT k, MAX(v), MIN(v) FROM (SELECT DISTINCT k, v FROM t) GROUP BY k",
        1,
    );
    assert_eq!(h.push("+I a 1\n+I a 5\n+I a 3").unwrap(), lines(&["+I a 5 1"]));
    assert_eq!(h.push("-D a 5").unwrap(), lines(&["-U a 5 1", "+U a 3 1"]));
    h.restart().unwrap();
    assert_eq!(h.push("-D a 1").unwrap(), lines(&["-U a 3 1", "+U a 3 3"]));
    assert_eq!(h.push("-D a 3").unwrap(), lines(&["-D a 3 3"]));
}

#[test]
fn distinct_aggregates_count_each_value_once_until_its_last_copy_goes() {
    let mut h = harness(
        "INSERT INTO out SELECT k, COUNT(DISTINCT v), SUM(DISTINCT v) FROM \
         (SELECT k, v, COUNT(*) AS c FROM t GROUP BY k, v) GROUP BY k",
        1,
    );
    assert_eq!(h.push("+I a 1\n+I a 2\n+I a 2").unwrap(), lines(&["+I a 2 3"]));
    h.restart().unwrap();
    assert_eq!(h.push("-U a 2").unwrap(), Vec::<String>::new());
    assert_eq!(h.push("-U a 2").unwrap(), lines(&["-U a 2 3", "+U a 1 1"]));
}

#[test]
fn filtered_counts_and_integer_averages_follow_flink() {
    let mut h = harness(
        "INSERT INTO out SELECT k, COUNT(*) FILTER (WHERE v > 1), AVG(v) FROM t GROUP BY k",
        0,
    );
    // AVG of a BIGINT is a BIGINT, divided toward zero.
    assert_eq!(h.push("a 1\na 4").unwrap(), lines(&["+I a 1 2"]));
    assert_eq!(h.push("a 0").unwrap(), lines(&["-U a 1 2", "+U a 1 1"]));
}

#[test]
fn a_global_aggregate_is_one_group() {
    let mut h = harness("INSERT INTO nums SELECT COUNT(v), SUM(v) FROM t", 0);
    assert_eq!(h.push("1\n2").unwrap(), lines(&["+I 2 3"]));
    assert_eq!(h.push("4\nnull").unwrap(), lines(&["-U 2 3", "+U 3 7"]));
}

#[test]
fn first_and_last_value_keep_arrival_order() {
    let mut h = harness(
        "INSERT INTO out SELECT k, FIRST_VALUE(v), LAST_VALUE(v) FROM t GROUP BY k",
        0,
    );
    assert_eq!(h.push("a 1\na 2").unwrap(), lines(&["+I a 1 2"]));
    h.restart().unwrap();
    assert_eq!(h.push("a 3").unwrap(), lines(&["-U a 1 2", "+U a 1 3"]));
}

#[test]
fn listagg_joins_in_arrival_order_and_takes_out_a_retracted_value() {
    let mut h = harness(
        "INSERT INTO out2 SELECT k, LISTAGG(CAST(c AS STRING), ';') FROM \
         (SELECT k, v, COUNT(*) AS c FROM t GROUP BY k, v) GROUP BY k",
        1,
    );
    // The inner aggregate's rows are (k, c): c is the second column in.
    assert_eq!(h.push("+I a 1\n+I a 2\n+I a 1").unwrap(), lines(&["+I a 1;2;1"]));
    h.restart().unwrap();
    assert_eq!(h.push("-U a 1").unwrap(), lines(&["-U a 1;2;1", "+U a 2;1"]));
    assert_eq!(h.push("-U a 2\n-U a 1").unwrap(), lines(&["-D a 2;1"]));
}

#[test]
fn select_distinct_inserts_each_row_once() {
    let mut h = harness("INSERT INTO one SELECT DISTINCT k FROM t", 0);
    assert_eq!(h.push("a\na\nb").unwrap(), lines(&["+I a", "+I b"]));
    assert_eq!(h.push("a").unwrap(), Vec::<String>::new());
}

#[test]
fn state_survives_a_snapshot_and_restore() {
    let mut h = harness("INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k", 0);
    h.push("a 1\nb 2\na 3").unwrap();
    let snapshot = h.restart().unwrap().expect("keyed state");
    let rows = snapshot.rows.expect("rows");
    assert_eq!(rows.num_rows(), 2);
    assert_eq!(rows.schema().field(0).name(), "_key_group");
    assert_eq!(
        h.push("a 10\nc 1").unwrap(),
        lines(&["-U a 2 4", "+U a 3 14", "+I c 1 1"])
    );
}

#[test]
fn a_group_idle_for_longer_than_the_state_ttl_is_forgotten_and_starts_afresh() {
    let mut h = Harness::of(
        &[TABLE, SINK, "SET 'table.exec.state.ttl' = '1 s'"],
        "INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k",
        "GroupAggregate",
        0,
    )
    .unwrap();
    assert_eq!(h.push("a 1\nb 1").unwrap(), lines(&["+I a 1 1", "+I b 1 1"]));
    assert_eq!(h.push("a 2").unwrap(), lines(&["-U a 1 1", "+U a 2 3"]));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Expired: counted from nothing again, as Flink does (no retraction of
    // what was emitted before).
    assert_eq!(h.push("a 5").unwrap(), lines(&["+I a 1 5"]));
    let snapshot = h.restart().unwrap().unwrap();
    let rows = snapshot.rows.unwrap();
    assert_eq!(rows.num_rows(), 1, "the expired group b is not in the snapshot");
}

#[test]
fn the_state_ttl_goes_on_counting_across_a_restore() {
    let mut h = Harness::of(
        &[TABLE, SINK, "SET 'table.exec.state.ttl' = '1 s'"],
        "INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k",
        "GroupAggregate",
        0,
    )
    .unwrap();
    assert_eq!(h.push("a 1").unwrap(), lines(&["+I a 1 1"]));
    std::thread::sleep(std::time::Duration::from_millis(600));
    let rows = h.restart().unwrap().unwrap().rows.unwrap();
    assert!(rows.schema().column_with_name("_written").is_some());
    std::thread::sleep(std::time::Duration::from_millis(600));
    // Written 1.2 s ago, though restored 0.6 s ago: expired.
    assert_eq!(h.push("a 2").unwrap(), lines(&["+I a 1 2"]));
}

/// The phases of `SELECT k, COUNT(*), SUM(v) ... GROUP BY k` when two run.
fn phase(node: &str) -> Harness {
    Harness::of(
        &[
            TABLE,
            SINK,
            "SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE'",
        ],
        "INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k",
        node,
        0,
    )
    .unwrap()
}

#[test]
fn a_local_phase_folds_each_batch_into_one_partial_row_per_group() {
    let mut local = phase("LocalGroupAggregate");
    // keys, _delta, COUNT's count, SUM's sum and count.
    assert_eq!(
        local.push("a 1\na 2\nb 5").unwrap(),
        lines(&["+I a 2 2 3 2", "+I b 1 1 5 1"])
    );
    // Nothing is kept from one batch to the next.
    assert_eq!(local.push("a 4").unwrap(), lines(&["+I a 1 1 4 1"]));
    assert!(local.restart().unwrap().is_none());
}

#[test]
fn a_global_phase_merges_partial_rows_and_emits_the_changes() {
    let mut global = phase("GlobalGroupAggregate");
    assert_eq!(global.push("a 2 2 3 2").unwrap(), lines(&["+I a 2 3"]));
    assert_eq!(
        global.push("a 1 1 4 1").unwrap(),
        lines(&["-U a 2 3", "+U a 3 7"])
    );
    global.restart().unwrap();
    // Partial rows of taken-away rows count down; the last one deletes.
    assert_eq!(
        global.push("a -1 -1 -2 -1").unwrap(),
        lines(&["-U a 3 7", "+U a 2 5"])
    );
    assert_eq!(global.push("a -2 -2 -5 -2").unwrap(), lines(&["-D a 2 5"]));
}

#[test]
fn groups_of_several_keys_survive_a_snapshot_and_a_local_phase_batch_after_batch() {
    let query = "INSERT INTO out SELECT k, v, COUNT(*) FROM t GROUP BY k, v";
    let mut single = harness(query, 0);
    assert_eq!(
        single.push("a 1\nb 2\na 1").unwrap(),
        lines(&["+I a 1 2", "+I b 2 1"])
    );
    single.restart().unwrap();
    assert_eq!(
        single.push("b 2\nc 3").unwrap(),
        lines(&["-U b 2 1", "+U b 2 2", "+I c 3 1"])
    );
    single.restart().unwrap();
    assert_eq!(single.push("a 1").unwrap(), lines(&["-U a 1 2", "+U a 1 3"]));

    let mut local = Harness::of(
        &[
            TABLE,
            SINK,
            "SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE'",
        ],
        query,
        "LocalGroupAggregate",
        0,
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            local.push("a 1\nb 2\na 1").unwrap(),
            lines(&["+I a 1 2 2", "+I b 2 1 1"])
        );
    }
}

/// The state key (first column after the key group) and whether the row
/// deletes it, of each row of an upsert delta.
fn upserts(delta: &arrow::record_batch::RecordBatch) -> Vec<(String, bool)> {
    use arrow::array::AsArray;
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    let keys = ArrayFormatter::try_new(delta.column(1).as_ref(), &FormatOptions::default()).unwrap();
    let deleted = delta
        .column_by_name(weir_state::incremental::DELETED_COLUMN)
        .expect("a delta")
        .as_boolean();
    let mut rows: Vec<(String, bool)> = (0..delta.num_rows())
        .map(|i| (keys.value(i).to_string(), deleted.value(i)))
        .collect();
    rows.sort();
    rows
}

#[test]
fn an_incremental_snapshot_holds_the_groups_changed_since_the_last_one_and_deletes_emptied_ones() {
    let mut h = counts_of_counts().incremental().unwrap();
    h.push("+I 1\n+I 1\n+I 2").unwrap();
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(base.num_rows(), 2);
    h.push("+I 3").unwrap();
    h.push("-D 2").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(upserts(&delta), vec![("2".into(), true), ("3".into(), false)]);
    assert!(
        h.snapshot_delta(false).unwrap().is_none(),
        "nothing changed since"
    );
    h.push("+I 1").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(upserts(&delta), vec![("1".into(), false)]);

    let restored = h.restart_from_chain().unwrap().expect("rows");
    assert_eq!(restored.num_rows(), 2, "groups 1 and 3; 2 was deleted");
    assert_eq!(h.push("-U 1").unwrap(), lines(&["-U 1 3", "+U 1 2"]));
    assert_eq!(h.push("+I 2").unwrap(), lines(&["+I 2 1"]));
    assert_eq!(h.push("+I 3").unwrap(), lines(&["-U 3 1", "+U 3 2"]));
}

#[test]
fn a_full_snapshot_restarts_the_count_of_changes_and_a_savepoint_leaves_it_alone() {
    let mut h = harness("INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k", 0)
        .incremental()
        .unwrap();
    h.push("a 1\nb 2").unwrap();
    h.snapshot_delta(true).unwrap();
    h.push("a 3").unwrap();
    // A savepoint (a plain snapshot) holds everything, and the next delta
    // still holds what changed before it.
    let savepoint = h.snapshot_only().unwrap().and_then(|s| s.rows).expect("rows");
    assert_eq!(savepoint.num_rows(), 2);
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(upserts(&delta), vec![("a".into(), false)]);
    h.push("b 5").unwrap();
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(base.num_rows(), 2);
    assert!(
        h.snapshot_delta(false).unwrap().is_none(),
        "the base holds every change"
    );
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.push("a 1\nb 1").unwrap(),
        lines(&["-U a 2 4", "+U a 3 5", "-U b 2 7", "+U b 3 8"])
    );
}

/// Batches of `rows` rows each over `keys` keys (`k0`, `k1`, ...), the
/// keys of a batch far apart so that every batch touches new groups.
fn many_rows(batches: usize, rows: usize, keys: usize) -> Vec<String> {
    (0..batches)
        .map(|b| {
            (0..rows)
                .map(|r| {
                    let i = b * rows + r;
                    format!("k{} {}", (i * 7919) % keys, i % 100)
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// Everything `h` emits for `batches`, in order.
fn emitted(h: &mut Harness, batches: &[String]) -> Vec<String> {
    batches.iter().flat_map(|b| h.push(b).unwrap()).collect()
}

fn entries_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

const COUNT_SUM_MAX: &str = "INSERT INTO out SELECT k, COUNT(*), MAX(v) + SUM(v) FROM t GROUP BY k";

/// The table a changelog of `lines` (`+I k v...`) ends with, keyed by its
/// first value; panics on a change the table does not allow (a retraction
/// of a row it does not hold, an insert of a key it has).
fn table(lines: &[String]) -> std::collections::BTreeMap<String, String> {
    let mut table = std::collections::BTreeMap::new();
    for line in lines {
        let (kind, row) = line.split_once(' ').unwrap();
        let (key, values) = row.split_once(' ').unwrap_or((row, ""));
        match kind {
            "+I" | "+U" => assert!(
                table.insert(key.to_string(), values.to_string()).is_none(),
                "{line}: the key has a row"
            ),
            _ => assert_eq!(table.remove(key).as_deref(), Some(values), "{line}"),
        }
    }
    table
}

/// Whether each key's new rows (`+I`, `+U`) in `part` come in the order of
/// its new rows in `whole`, some left out (a larger mini-batch leaves out
/// intermediate results).
fn new_rows_follow(part: &[String], whole: &[String]) -> bool {
    let of_key = |lines: &[String]| {
        let mut keys = std::collections::BTreeMap::<String, Vec<String>>::new();
        for line in lines.iter().filter(|l| l.starts_with('+')) {
            let row = line.split_once(' ').unwrap().1;
            let key = row.split_once(' ').map_or(row, |(k, _)| k);
            keys.entry(key.to_string()).or_default().push(row.to_string());
        }
        keys
    };
    let whole = of_key(whole);
    of_key(part).iter().all(|(key, rows)| {
        let mut all = whole.get(key).into_iter().flatten();
        rows.iter().all(|row| all.any(|w| w == row))
    })
}

#[test]
fn spilled_groups_emit_the_heaps_results_and_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(60, 100, 2000);
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &batches);
    assert!(expected.len() > 6000, "{} changes", expected.len());

    let mut spilling = harness(COUNT_SUM_MAX, 0).spilling(32 * 1024, dir.path()).unwrap();
    let mut got = Vec::new();
    let mut store_seen = false;
    for batch in &batches {
        got.extend(spilling.push(batch).unwrap());
        store_seen |= entries_in(dir.path()) > 0;
    }
    assert!(store_seen, "groups went to files");
    let before_barrier = got.len();
    got.extend(spilling.barrier().unwrap());
    assert!(got.len() > before_barrier, "rows waited for their key group");
    assert!(
        spilling.barrier().unwrap().is_empty(),
        "none wait after a barrier"
    );
    assert_eq!(table(&got), table(&expected));
    assert!(new_rows_follow(&got, &expected));
}

#[test]
fn rows_of_spilled_groups_wait_at_most_a_second_and_then_come_out() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(30, 100, 1500);
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &batches);
    let mut h = harness(COUNT_SUM_MAX, 0).spilling(16 * 1024, dir.path()).unwrap();
    let mut got = emitted(&mut h, &batches);
    let later = weir_common::time::wall_clock_millis() + crate::waiting::LONGEST_WAIT_MS;
    let waited = h.processing_time(later).unwrap();
    assert!(
        !waited.is_empty(),
        "the last batch's rows of groups in the files waited"
    );
    got.extend(waited);
    assert!(h.finish().unwrap().is_empty(), "every row was read by then");
    assert_eq!(table(&got), table(&expected));
    assert!(new_rows_follow(&got, &expected));
}

/// A key other than `key` in `key`'s key group (of 128).
fn key_in_the_key_group_of(key: &str) -> String {
    use arrow::array::{ArrayRef, StringArray};
    let group = |k: &str| {
        let keys: Vec<ArrayRef> = vec![std::sync::Arc::new(StringArray::from(vec![k]))];
        weir_state::snapshot::key_groups(&keys, 1, 128).unwrap().value(0)
    };
    (0..)
        .map(|i| format!("n{i}"))
        .find(|k| group(k) == group(key))
        .unwrap()
}

#[test]
fn rows_wait_only_in_key_groups_with_files_and_not_once_their_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness("INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k", 0)
        .spilling(1 << 20, dir.path())
        .unwrap();
    // About 40 groups in each of 128 key groups: one row is not enough to
    // read its key group's files.
    let all: Vec<String> = (0..5000).map(|i| format!("k{i} 1")).collect();
    h.push(&all.join("\n")).unwrap();
    // A restore writes every group to its key group's files.
    h.restart().unwrap();
    assert!(h.push("k0 2").unwrap().is_empty(), "k0's key group has files");
    let later = weir_common::time::wall_clock_millis() + crate::waiting::LONGEST_WAIT_MS;
    assert_eq!(
        h.processing_time(later).unwrap(),
        lines(&["-U k0 1 1", "+U k0 2 3"])
    );
    assert_eq!(
        h.push("k0 4").unwrap(),
        lines(&["-U k0 2 3", "+U k0 3 7"]),
        "read back, its state is in memory"
    );
    let new = key_in_the_key_group_of("k0");
    assert_eq!(
        h.push(&format!("{new} 5")).unwrap(),
        [format!("+I {new} 1 5")],
        "a new key of a key group read has no state to wait for"
    );
}

#[test]
fn spilled_groups_of_many_key_groups_share_files_per_range_and_give_the_heaps_table() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(40, 100, 1500);
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &batches);
    let mut h = harness(COUNT_SUM_MAX, 0)
        .max_parallelism(1024)
        .unwrap()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let (first, second) = batches.split_at(20);
    let mut got = emitted(&mut h, first);
    h.snapshot_delta(true).unwrap();
    got.extend(h.take_barrier_output());
    let files = spill_files(dir.path());
    assert!(!files.is_empty() && files.len() <= 128, "{} files", files.len());
    got.extend(emitted(&mut h, &second[..10]));
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    got.extend(h.take_barrier_output());
    assert!(!upserts(&delta).is_empty());
    h.restart_from_chain().unwrap();
    got.extend(emitted(&mut h, &second[10..]));
    got.extend(h.finish().unwrap());
    assert_eq!(table(&got), table(&expected));
    // A full snapshot's run is in key-group order across the shared files.
    let snapshot = h.restart().unwrap().expect("a snapshot");
    let groups = crate::harness::run_key_groups(&snapshot);
    assert!(
        groups.is_sorted() && groups.iter().any(|g| *g >= 128),
        "{groups:?}"
    );
}

/// The spilled groups' files under `dir` (`weir-groups-*/*.arrow`).
fn spill_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "arrow"))
        .collect()
}

#[test]
fn spilled_retractions_leave_their_groups_and_emptied_groups_leave_the_files() {
    let dir = tempfile::tempdir().unwrap();
    // Counts of counts: every batch retracts what an earlier one added.
    let adds: Vec<String> = (0..40)
        .map(|b| {
            (0..50)
                .map(|r| format!("+I {}", b * 50 + r))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let takes: Vec<String> = (0..40)
        .map(|b| {
            (0..50)
                .map(|r| format!("-D {}", b * 50 + r))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let all: Vec<String> = adds.iter().chain(&takes).cloned().collect();
    let expected = emitted(&mut counts_of_counts(), &all);
    let mut h = counts_of_counts().spilling(16 * 1024, dir.path()).unwrap();
    let mut got = emitted(&mut h, &all);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    got.extend(h.take_barrier_output());
    assert_eq!(table(&got), table(&expected));
    assert!(table(&got).is_empty());
    assert!(new_rows_follow(&got, &expected));
    assert!(
        snapshot.runs.is_empty() && snapshot.rows.is_none(),
        "every group was emptied: the files holds none"
    );
}

#[test]
fn spilled_groups_restore_from_a_snapshot_as_if_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(40, 100, 1500);
    let (before, after) = batches.split_at(batches.len() / 2);
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &batches);

    let mut h = harness(COUNT_SUM_MAX, 0).spilling(32 * 1024, dir.path()).unwrap();
    let mut got = emitted(&mut h, before);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    got.extend(h.take_barrier_output());
    assert_eq!(snapshot.runs.len(), 1, "the files as one run");
    assert_eq!(snapshot.runs[0].info.rows, 1500);
    got.extend(emitted(&mut h, after));
    got.extend(h.finish().unwrap());
    assert_eq!(table(&got), table(&expected));
    assert!(new_rows_follow(&got, &expected));
}

#[test]
fn a_spilled_snapshot_holds_the_groups_of_its_barrier_while_the_operator_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(40, 100, 1500);
    let (before, after) = batches.split_at(batches.len() / 2);
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &batches);

    let mut h = harness(COUNT_SUM_MAX, 0).spilling(32 * 1024, dir.path()).unwrap();
    let mut got = emitted(&mut h, before);
    let snapshot = h.snapshot_unwritten().unwrap().expect("a snapshot");
    got.extend(h.take_barrier_output());
    assert_eq!(
        snapshot.deferred.len(),
        1,
        "the files, read by the snapshot's writer"
    );
    emitted(&mut h, after);
    h.finish().unwrap();
    h.restart_from(snapshot).unwrap();
    got.extend(emitted(&mut h, after));
    got.extend(h.finish().unwrap());
    assert_eq!(
        table(&got),
        table(&expected),
        "the groups as they were at the barrier"
    );
}

#[test]
fn incremental_snapshots_of_spilled_groups_hold_what_changed_in_memory_and_in_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = many_rows(30, 100, 1500);
    // Then 300 keys only, changed again and again (spilled in between).
    let second = many_rows(30, 100, 300);
    let third = many_rows(10, 100, 1500);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &all);

    let mut h = harness(COUNT_SUM_MAX, 0)
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let mut got = emitted(&mut h, &first);
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(base.num_rows(), 1500);
    got.extend(h.take_barrier_output());
    got.extend(emitted(&mut h, &second));
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    got.extend(h.take_barrier_output());
    let keys = upserts(&delta);
    assert_eq!(keys.len(), 300, "each changed key once");
    assert!(keys.iter().all(|(_, deleted)| !deleted));
    h.restart_from_chain().unwrap();
    got.extend(emitted(&mut h, &third));
    got.extend(h.finish().unwrap());
    assert_eq!(table(&got), table(&expected));
}

#[test]
fn a_delta_of_spilled_groups_reads_the_files_of_its_barrier_while_the_operator_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let first = many_rows(30, 100, 1500);
    let second = many_rows(30, 100, 300);
    let third = many_rows(10, 100, 1500);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let expected = emitted(&mut harness(COUNT_SUM_MAX, 0), &all);

    let mut h = harness(COUNT_SUM_MAX, 0)
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let mut got = emitted(&mut h, &first);
    h.snapshot_delta(true).unwrap();
    got.extend(h.take_barrier_output());
    got.extend(emitted(&mut h, &second));
    // The third part changes the files before the delta is read.
    let delta = h
        .snapshot_delta_while(false, |h| {
            emitted(h, &third);
            h.finish()?;
            Ok(())
        })
        .unwrap()
        .expect("changes");
    got.extend(h.take_barrier_output());
    assert_eq!(upserts(&delta).len(), 300, "the keys changed before the barrier");
    h.restart_from_chain().unwrap();
    got.extend(emitted(&mut h, &third));
    got.extend(h.finish().unwrap());
    assert_eq!(table(&got), table(&expected));
}

#[test]
fn spilled_groups_past_the_state_ttl_are_swept_from_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::of(
        &[TABLE, SINK, "SET 'table.exec.state.ttl' = '1 h'"],
        "INSERT INTO out SELECT k, COUNT(*), SUM(v) FROM t GROUP BY k",
        "GroupAggregate",
        0,
    )
    .unwrap()
    .spilling(16 * 1024, dir.path())
    .unwrap();
    emitted(&mut h, &many_rows(20, 100, 1000));
    // A restart puts every group in the files.
    h.restart().unwrap();
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    for _ in 0..3 {
        h.processing_time(later).unwrap();
    }
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert!(snapshot.runs.is_empty(), "every group expired");
    assert_eq!(h.push("k0 5").unwrap(), lines(&["+I k0 1 5"]));
}

#[test]
fn a_delta_after_a_savepoint_of_spilled_groups_holds_what_changed_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(COUNT_SUM_MAX, 0)
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    emitted(&mut h, &many_rows(30, 100, 1500));
    h.snapshot_delta(true).unwrap();
    emitted(&mut h, &many_rows(3, 100, 300));
    // The savepoint writes every group to the files: memory holds none.
    let savepoint = h.snapshot_only().unwrap().expect("a savepoint");
    assert_eq!(savepoint.runs[0].info.rows, 1500);
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(upserts(&delta).len(), 300);
    assert!(
        h.snapshot_delta(false).unwrap().is_none(),
        "nothing changed since"
    );
}
