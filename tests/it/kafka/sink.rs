//! The Kafka sink against the real broker: delivery guarantees, and
//! exactly-once output across SIGKILLs of `weir run` (aligned, unaligned,
//! rescaled), checked by a `read_committed` consumer.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::BaseRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use weir::connectors::kafka::transactions::describe;

use super::{broker, checked_producer, create_topic, flush_checked};

/// Every value in `topic` (all partitions, from the start) that a consumer
/// with `isolation` reads until `quiet` passes without a record.
pub fn read_all(topic: &str, isolation: &str, quiet: Duration) -> Vec<String> {
    read_until(topic, isolation, quiet, usize::MAX)
}

/// As [`read_all`], but a quiet spell ends the read only once `expected`
/// values arrived (or 60 s passed): on a loaded machine a read_committed
/// consumer may go quiet for seconds while it fetches past aborted
/// transactions.
pub fn read_until(topic: &str, isolation: &str, quiet: Duration, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", format!("read-{topic}"))
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        list.add_partition_offset(topic, p.id(), Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut values = Vec::new();
    let (started, mut last) = (Instant::now(), Instant::now());
    let short = |values: &Vec<String>| values.len() < expected && expected != usize::MAX;
    while last.elapsed() < quiet || (short(&values) && started.elapsed() < Duration::from_secs(60)) {
        if let Some(message) = consumer.poll(Duration::from_millis(50)) {
            let message = message.unwrap();
            values.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string());
            last = Instant::now();
        }
    }
    values
}

#[test]
fn an_exactly_once_sink_commits_each_checkpoint_and_the_end_of_its_input() {
    create_topic("eo-basic-in", 2);
    create_topic("eo-basic-out", 3);
    let (input, failures) = checked_producer();
    for i in 0..1_000 {
        let value = format!(r#"{{"v":{i}}}"#);
        input
            .send(
                BaseRecord::<str, str>::to("eo-basic-in")
                    .partition(i % 2)
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    flush_checked(&input, &failures);
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(2);
    engine.set("execution.checkpointing.interval", "100 ms").unwrap();
    engine
        .set("execution.checkpointing.dir", &dir.path().display().to_string())
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE src (v INT) WITH ('connector' = 'kafka', 'topic' = 'eo-basic-in', \
             'properties.bootstrap.servers' = '{b}', 'format' = 'json', \
             'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')",
            b = broker()
        ))
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE dst (v INT, w STRING) WITH ('connector' = 'kafka', 'topic' = 'eo-basic-out', \
             'properties.bootstrap.servers' = '{b}', 'format' = 'csv', \
             'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'eo-basic')",
            b = broker()
        ))
        .unwrap();
    let explain = crate::sorted_rows(
        &engine
            .sql("EXPLAIN INSERT INTO dst SELECT v, 'x' FROM src")
            .unwrap()
            .collect()
            .unwrap(),
    )
    .join("\n");
    assert!(
        explain.contains(
            "kafka, topic=eo-basic-out, format=csv, exactly-once, transactional-id-prefix=eo-basic"
        ),
        "{explain}"
    );
    let result = engine
        .sql("INSERT INTO dst SELECT v, CAST(v * 2 AS STRING) FROM src")
        .unwrap();
    result.job().unwrap().wait().unwrap();
    let mut got = read_all("eo-basic-out", "read_committed", Duration::from_secs(2));
    got.sort_by_key(|line| line.split(',').next().unwrap().parse::<i64>().unwrap());
    let expected: Vec<String> = (0..1_000).map(|i| format!("{i},{}", i * 2)).collect();
    assert_eq!(got, expected);
}

/// The input of the crash tests: `count` records `{"k", "v", "ts"}` over
/// 4 partitions (by key), with event times 1 ms apart.
fn fill_input(topic: &str, count: i64) -> BTreeMap<(i64, i64), i64> {
    create_topic(topic, 4);
    let (input, failures) = checked_producer();
    let mut sums = BTreeMap::new();
    for i in 0..count {
        let (k, v) = (i % 10, i % 7);
        let ts = i;
        *sums.entry((k, ts / 1000 * 1000)).or_insert(0) += v;
        let value = format!(r#"{{"k":{k},"v":{v},"ts":{ts}}}"#);
        let record = BaseRecord::<str, str>::to(topic)
            .partition((k % 4) as i32)
            .timestamp(ts)
            .payload(&value);
        let mut record = record;
        loop {
            match input.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    flush_checked(&input, &failures);
    sums
}

/// A `weir run` file: tumbling one-second sums per key from `input` into
/// `output`, exactly once, checkpointing every 300 ms.
fn job_file(dir: &Path, name: &str, input: &str, output: &str, parallelism: usize, settings: &str) -> String {
    let file = dir.join(format!("{name}-{parallelism}.sql"));
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.interval' = '300 ms';
             SET 'execution.checkpointing.dir' = '{ckpt}';
             SET 'pipeline.name' = '{name}';
             SET 'parallelism.default' = '{parallelism}';
             SET 'table.local-time-zone' = 'UTC';
             {settings}
             CREATE TABLE src (k BIGINT, v BIGINT, ts BIGINT,
               rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
             WITH ('connector' = 'kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{b}',
                   'format' = 'json', 'scan.startup.mode' = 'earliest-offset',
                   'scan.bounded.mode' = 'latest-offset', 'properties.group.id' = '{name}');
             CREATE TABLE dst (k BIGINT, window_start BIGINT, s BIGINT)
             WITH ('connector' = 'kafka', 'topic' = '{output}', 'properties.bootstrap.servers' = '{b}',
                   'format' = 'csv', 'sink.delivery-guarantee' = 'exactly-once',
                   'sink.transactional-id-prefix' = '{name}');
             INSERT INTO dst
             SELECT k, MIN(ts) / 1000 * 1000, SUM(v)
             FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(rt), INTERVAL '1' SECOND))
             GROUP BY k, window_start, window_end;",
            ckpt = dir.join("checkpoints").display(),
            b = broker(),
        ),
    )
    .unwrap();
    file.display().to_string()
}

fn weir(file: &str, restore: Option<&Path>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .arg("run")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(path) = restore {
        command.arg("--restore").arg(path);
    }
    command
}

/// Runs the tumbling sum over a 4-partition topic, killed with SIGKILL at a
/// random moment in each run but the last of `parallelisms`, restored each
/// time; a `read_committed` consumer must read exactly the sums.
fn crash_and_check(name: &str, parallelisms: &[usize], settings: &str) {
    let seed: u64 = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let context = format!("{name} {parallelisms:?}, WEIR_TEST_SEED={seed}");
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let sums = fill_input(&input, 1_000_000);
    create_topic(&output, 3);
    let dir = tempfile::tempdir().unwrap();
    // A clean run (its own output topic and transactional ids): how long the
    // job takes, for the moments of the kills.
    let clean_output = format!("{name}-clean-out");
    create_topic(&clean_output, 3);
    let clean = job_file(
        dir.path(),
        &format!("{name}-clean"),
        &input,
        &clean_output,
        parallelisms[0],
        settings,
    );
    let started = Instant::now();
    let run = weir(&clean, None).output().unwrap();
    assert!(
        run.status.success(),
        "the clean run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let took = started.elapsed().as_millis() as u64;
    assert_eq!(
        read_all(&clean_output, "read_committed", Duration::from_secs(2)).len(),
        sums.len(),
        "the clean run: {context}"
    );
    let job_dir = dir.path().join("checkpoints").join(name);
    let (last, killed) = parallelisms.split_last().unwrap();
    for (attempt, parallelism) in killed.iter().enumerate() {
        let file = job_file(dir.path(), name, &input, &output, *parallelism, settings);
        let restore = (attempt > 0).then_some(job_dir.as_path());
        let before = complete_checkpoints(&job_dir);
        let mut child = weir(&file, restore).spawn().unwrap();
        // The kill comes at a random moment after this run completed a
        // checkpoint of its own, so that every run but the last has state to
        // lose whatever else the machine is doing (a clean run measured while
        // other tests load the machine is no clock for this one).
        let waiting = Instant::now();
        while complete_checkpoints(&job_dir).is_subset(&before) && child.try_wait().unwrap().is_none() {
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "run {attempt} completed no checkpoint in 60 s: {context}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(
            rng.random_range(0..took.clamp(100, 1000) / 3),
        ));
        if child.try_wait().unwrap().is_some() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            // A restored run may finish what is left before its kill.
            assert!(
                attempt > 0 && stderr.contains("finished"),
                "run {attempt} ended before it was killed: {context}\n{stderr}"
            );
            break;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let file = job_file(dir.path(), name, &input, &output, *last, settings);
    let run = weir(&file, Some(&job_dir)).output().unwrap();
    assert!(
        run.status.success(),
        "the restored run failed: {context}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let context = format!("{context}\n{}", String::from_utf8_lossy(&run.stderr));
    let got = read_all(&output, "read_committed", Duration::from_secs(3));
    assert_sums(&got, &sums, &context);
}

/// `got` (CSV rows `k,window_start,s`) holds each of `sums` once, with its
/// sum; `context` says what ran.
fn assert_sums(got: &[String], sums: &BTreeMap<(i64, i64), i64>, context: &str) {
    let mut counted: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
    for line in got {
        let fields: Vec<i64> = line.split(',').map(|f| f.parse().unwrap()).collect();
        counted.entry((fields[0], fields[1])).or_default().push(fields[2]);
    }
    let doubled: Vec<_> = counted.iter().filter(|(_, s)| s.len() > 1).take(5).collect();
    assert!(doubled.is_empty(), "rows written twice: {doubled:?}; {context}");
    let lost: Vec<_> = sums.keys().filter(|k| !counted.contains_key(k)).collect();
    assert!(
        lost.is_empty(),
        "{} rows lost, the first {:?}, the last {:?}; {context}",
        lost.len(),
        lost.first(),
        lost.last()
    );
    let wrong: Vec<_> = sums
        .iter()
        .filter(|(k, s)| counted.get(k).is_some_and(|got| got[0] != **s))
        .take(5)
        .collect();
    assert!(wrong.is_empty(), "wrong sums: {wrong:?}; {context}");
    assert_eq!(got.len(), sums.len(), "{context}");
}

#[test]
fn a_tumbling_sum_from_kafka_to_kafka_killed_three_times_is_read_exactly_once() {
    crash_and_check("eo-aligned", &[4, 4, 4, 4], "");
}

#[test]
fn unaligned_a_tumbling_sum_from_kafka_to_kafka_killed_three_times_is_read_exactly_once() {
    crash_and_check(
        "eo-unaligned",
        &[4, 4, 4, 4],
        "SET 'execution.checkpointing.unaligned.enabled' = 'true';",
    );
}

#[test]
fn a_tumbling_sum_from_kafka_to_kafka_killed_and_rescaled_4_to_2_is_read_exactly_once() {
    crash_and_check("eo-rescaled", &[4, 4, 2], "");
}

/// The checkpoint directories under `dir` whose `_metadata` is written.
fn complete_checkpoints(dir: &Path) -> std::collections::BTreeSet<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|path| path.is_dir())
        .flat_map(|path| match path.join("_metadata").exists() {
            true => [path].into_iter().collect(),
            false => complete_checkpoints(&path),
        })
        .collect()
}

/// Whether a checkpoint under `dir` is complete (its `_metadata` written).
fn has_complete_checkpoint(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        path.file_name().is_some_and(|n| n == "_metadata")
            || (path.is_dir() && has_complete_checkpoint(&path))
    })
}

/// The founding texts' `sum_even`: numbers 1..=4000 arrive in two partitions
/// (1000 a second); the even ones are written to Kafka with `delivery`. The
/// job is killed 400 ms after its first checkpoint completes (rows written
/// since are written again after the restore, unless they were in a
/// transaction the crash aborted) and restored. Returns the even numbers a
/// `read_committed` consumer reads, and what `weir checkpoint inspect`
/// said of the checkpoint the restore used.
fn sum_even(delivery: &str) -> (Vec<i64>, String) {
    let (input, output) = (format!("even-in-{delivery}"), format!("even-out-{delivery}"));
    create_topic(&input, 2);
    create_topic(&output, 1);
    let writer = {
        let input = input.clone();
        std::thread::spawn(move || {
            let (producer, failures) = checked_producer();
            for v in 1..=4_000i64 {
                let value = format!(r#"{{"v":{v}}}"#);
                let record = BaseRecord::<str, str>::to(&input)
                    .partition((v % 2) as i32)
                    .payload(&value);
                producer.send(record).map_err(|(e, _)| e).unwrap();
                if v % 10 == 0 {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            flush_checked(&producer, &failures);
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let name = format!("sum-even-{delivery}");
    let transactional = match delivery {
        "exactly-once" => format!(", 'sink.transactional-id-prefix' = '{name}'"),
        _ => String::new(),
    };
    let file = dir.path().join("job.sql");
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.interval' = '1 s';
             SET 'execution.checkpointing.dir' = '{ckpt}';
             SET 'pipeline.name' = '{name}';
             SET 'parallelism.default' = '2';
             CREATE TABLE numbers (v BIGINT) WITH ('connector' = 'kafka', 'topic' = '{input}',
               'properties.bootstrap.servers' = '{b}', 'format' = 'json', 'scan.startup.mode' = 'earliest-offset',
               'scan.bounded.mode' = 'specific-offsets',
               'scan.bounded.specific-offsets' = 'partition:0,offset:2000;partition:1,offset:2000');
             CREATE TABLE evens (v BIGINT) WITH ('connector' = 'kafka', 'topic' = '{output}',
               'properties.bootstrap.servers' = '{b}', 'format' = 'json',
               'sink.delivery-guarantee' = '{delivery}'{transactional});
             INSERT INTO evens SELECT v FROM numbers WHERE v % 2 = 0;",
            ckpt = dir.path().join("checkpoints").display(),
            b = broker(),
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let job_dir = dir.path().join("checkpoints").join(&name);
    let mut child = weir(&file, None).spawn().unwrap();
    let start = Instant::now();
    while !has_complete_checkpoint(&job_dir) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no checkpoint completed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
    if child.try_wait().unwrap().is_some() {
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        panic!("the job ended before the crash: {stderr}");
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    writer.join().unwrap();
    let inspect = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["checkpoint", "inspect"])
        .arg(&job_dir)
        .output()
        .unwrap();
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    let run = weir(&file, Some(&job_dir)).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let evens = read_all(&output, "read_committed", Duration::from_secs(2))
        .iter()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["v"]
                .as_i64()
                .unwrap()
        })
        .collect();
    (evens, String::from_utf8_lossy(&inspect.stdout).to_string())
}

#[test]
fn sum_even_at_least_once_counts_the_rows_written_since_the_checkpoint_twice() {
    let (evens, _) = sum_even("at-least-once");
    let distinct: std::collections::BTreeSet<i64> = evens.iter().copied().collect();
    assert_eq!(distinct, (1..=2_000).map(|i| i * 2).collect(), "nothing is lost");
    assert!(
        evens.len() > distinct.len(),
        "the rows written between the checkpoint and the crash are written again: {} rows",
        evens.len()
    );
    assert!(evens.iter().sum::<i64>() > 2_000 * 2_001);
}

#[test]
fn sum_even_exactly_once_counts_every_row_once() {
    let (mut evens, inspect) = sum_even("exactly-once");
    // The checkpoint holds each partition's offset, and the pending
    // transaction of the sink subtask that writes the even numbers
    // (partition 0's: the other one reads only odd numbers).
    for expected in [
        "kafka offsets: even-in-exactly-once-0 @ ",
        "kafka offsets: even-in-exactly-once-1 @ ",
        "kafka pending transactions: sum-even-exactly-once-0-",
        "kafka: no pending transaction",
    ] {
        assert!(inspect.contains(expected), "{expected} in\n{inspect}");
    }
    evens.sort_unstable();
    assert_eq!(evens, (1..=2_000).map(|i| i * 2).collect::<Vec<_>>());
    assert_eq!(evens.iter().sum::<i64>(), 2_000 * 2_001);
}

#[test]
fn a_fresh_run_at_a_lower_parallelism_aborts_what_a_crashed_run_left_open() {
    // No checkpoint completes (one an hour): the crashed run at parallelism
    // 4 leaves a transaction open in each subtask; a fresh run at 2 must
    // abort those of subtasks 2 and 3 too, or read_committed consumers wait
    // behind them for the transaction timeout.
    let name = "eo-fresh";
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let sums = fill_input(&input, 300_000);
    create_topic(&output, 3);
    let dir = tempfile::tempdir().unwrap();
    let hourly = "SET 'execution.checkpointing.interval' = '1 h';";
    // The crashed run reads without end, so it never finishes (and never
    // commits in a final checkpoint) before it is killed.
    let crashed = job_file(dir.path(), name, &input, &output, 4, hourly);
    let unbounded = std::fs::read_to_string(&crashed)
        .unwrap()
        .replace("'scan.bounded.mode' = 'latest-offset',", "");
    std::fs::write(&crashed, unbounded).unwrap();
    let mut child = weir(&crashed, None).spawn().unwrap();
    let start = Instant::now();
    while read_all(&output, "read_uncommitted", Duration::from_millis(200)).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "nothing was written");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the crash"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let fresh = job_file(dir.path(), name, &input, &output, 2, hourly);
    let run = weir(&fresh, None).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut got = read_until(&output, "read_committed", Duration::from_secs(3), sums.len());
    let first = got.len();
    if first < sums.len() {
        // A second consumer: a short first read with every transaction
        // complete (CI, twice) may be the consumer's, not the topic's.
        got = read_until(&output, "read_committed", Duration::from_secs(3), sums.len());
    }
    // On failure, say which transaction was left open (the usual cause),
    // and how often the rows lost are in the topic uncommitted (the
    // crashed run's and the fresh run's: two each).
    let states = || -> Vec<String> {
        (0..4)
            .flat_map(|s| (0..3).map(move |n| format!("{name}-{s}-{n}")))
            .map(|id| format!("{id}: {:?}", describe(broker(), &id).map(|d| d.map(|d| d.state))))
            .collect()
    };
    let window = |row: &String| row.split(',').take(2).collect::<Vec<_>>().join(",");
    let uncommitted = || -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for row in read_all(&output, "read_uncommitted", Duration::from_secs(3)) {
            *counts.entry(window(&row)).or_default() += 1;
        }
        let read: std::collections::BTreeSet<String> = got.iter().map(window).collect();
        counts.retain(|w, _| !read.contains(w));
        counts
    };
    let context = match got.len() < sums.len() {
        true => format!(
            "{} of {} rows ({first} at the first read); transactions:\n{}\nthe rows lost, \
             uncommitted: {:?}\nthe fresh run's log:\n{}",
            got.len(),
            sums.len(),
            states().join("\n"),
            uncommitted(),
            String::from_utf8_lossy(&run.stderr)
        ),
        false => format!("{first} rows at the first read"),
    };
    assert_sums(&got, &sums, &context);
}

/// Records per partition of `topic` (3 partitions).
fn per_partition(topic: &str) -> Vec<usize> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "partitions")
        .create()
        .unwrap();
    (0..3)
        .map(|p| {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            (high - low) as usize
        })
        .collect()
}

#[test]
fn the_fixed_partitioner_writes_a_subtask_to_one_partition_and_round_robin_to_all() {
    create_topic("part-in", 2);
    let (input, failures) = checked_producer();
    for i in 0..60 {
        let value = format!(r#"{{"v":{i}}}"#);
        input
            .send(
                BaseRecord::<str, str>::to("part-in")
                    .partition(i % 2)
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    flush_checked(&input, &failures);
    for partitioner in ["fixed", "round-robin"] {
        let output = format!("part-out-{partitioner}");
        create_topic(&output, 3);
        let engine = crate::engine(2);
        let b = broker();
        engine
            .sql(&format!(
                "CREATE TABLE src (v INT) WITH ('connector' = 'kafka', 'topic' = 'part-in', \
                 'properties.bootstrap.servers' = '{b}', 'format' = 'json', \
                 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')"
            ))
            .unwrap();
        engine
            .sql(&format!(
                "CREATE TABLE dst (v INT) WITH ('connector' = 'kafka', 'topic' = '{output}', \
                 'properties.bootstrap.servers' = '{b}', 'format' = 'json', 'sink.partitioner' = '{partitioner}')"
            ))
            .unwrap();
        engine
            .sql("INSERT INTO dst SELECT v FROM src")
            .unwrap()
            .collect()
            .unwrap();
        let counts = per_partition(&output);
        assert_eq!(counts.iter().sum::<usize>(), 60, "{partitioner}");
        match partitioner {
            // Subtask s (reading partition s of the input) writes to partition s.
            "fixed" => assert_eq!(counts, vec![30, 30, 0]),
            _ => assert!(counts.iter().all(|c| *c > 0), "{counts:?}"),
        }
    }
}
