//! The Nexmark generator and connector: determinism, proportions, id ranges,
//! event-time order, the standard views, and `weir bench`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Int32Type, Int64Type, TimestampMillisecondType};
use weir::Engine;
use weir::connectors::nexmark::generator::{EventBatchBuilder, GeneratorConfig};

const EVENTS: u64 = 5_000;

fn engine(parallelism: usize, events: u64, extra_options: &str) -> Engine {
    let engine = crate::engine(parallelism);
    let ddl = weir::bench::query_script(
        "SELECT 1",
        &weir::bench::NexmarkOptions {
            events,
            event_rate: 10_000,
            ..Default::default()
        },
        std::path::Path::new("unused"),
        0,
    );
    // The standard DDL and views, without the final query.
    let ddl = ddl.rsplit_once("SELECT 1").unwrap().0;
    let ddl = ddl.replace(
        "'connector' = 'nexmark',",
        &format!("'connector' = 'nexmark', {extra_options}"),
    );
    engine.sql(&ddl).unwrap();
    engine
}

fn rows(batches: &[RecordBatch]) -> Vec<String> {
    crate::sorted_rows(batches)
}

const ALL_FIELDS: &str = "SELECT event_type, person.id, person.name, person.emailAddress, person.creditCard,
      person.city, person.state, person.extra, auction.id, auction.itemName, auction.description,
      auction.initialBid, auction.reserve, auction.expires, auction.seller, auction.category,
      auction.extra, bid.auction, bid.bidder, bid.price, bid.channel, bid.url, bid.extra, `dateTime`
    FROM datagen";

#[test]
fn the_same_events_at_parallelism_1_3_and_8() {
    let reference = rows(&engine(1, EVENTS, "").sql(ALL_FIELDS).unwrap().collect().unwrap());
    assert_eq!(reference.len(), EVENTS as usize);
    for parallelism in [3, 8] {
        let actual = rows(
            &engine(parallelism, EVENTS, "")
                .sql(ALL_FIELDS)
                .unwrap()
                .collect()
                .unwrap(),
        );
        assert!(actual == reference, "events differ at parallelism {parallelism}");
    }
    // ... and at another number of splits and another emission rate.
    let more_splits = rows(
        &engine(2, EVENTS, "'splits' = '5', 'rate.limited' = 'false',")
            .sql(ALL_FIELDS)
            .unwrap()
            .collect()
            .unwrap(),
    );
    assert!(more_splits == reference);
}

#[test]
fn generating_again_from_an_offset_gives_the_same_events() {
    let config = Arc::new(GeneratorConfig::default());
    let generate = |ids: std::ops::Range<u64>| {
        let mut builder = EventBatchBuilder::new(config.clone(), 64);
        for id in ids {
            builder.append(id);
        }
        let columns = builder.finish();
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("event_type", arrow::datatypes::DataType::Int32, false),
            arrow::datatypes::Field::new("person", columns[1].data_type().clone(), true),
            arrow::datatypes::Field::new("auction", columns[2].data_type().clone(), true),
            arrow::datatypes::Field::new("bid", columns[3].data_type().clone(), true),
        ]));
        RecordBatch::try_new(schema, columns).unwrap()
    };
    let whole = generate(0..3_000);
    // A split restarted at position 1234 regenerates exactly the rest.
    let head = generate(0..1_234);
    let tail = generate(1_234..3_000);
    let joined = arrow::compute::concat_batches(&whole.schema(), &[head, tail]).unwrap();
    assert_eq!(joined, whole);
}

#[test]
fn proportions_id_ranges_and_states_follow_the_model() {
    let engine = engine(4, EVENTS, "");
    let batches = engine
        .sql("SELECT event_type, person.id, person.state, auction.id, auction.seller, auction.category, bid.auction, bid.bidder, bid.price FROM datagen")
        .unwrap()
        .collect()
        .unwrap();
    let mut kinds = BTreeMap::new();
    let (mut max_person, mut max_auction) = (0i64, 0i64);
    for batch in &batches {
        let kind = batch.column(0).as_primitive::<Int32Type>();
        let long = |c: usize| batch.column(c).as_primitive::<Int64Type>();
        let state = batch.column(2).as_string::<i32>();
        for row in 0..batch.num_rows() {
            *kinds.entry(kind.value(row)).or_insert(0) += 1;
            match kind.value(row) {
                0 => {
                    max_person = max_person.max(long(1).value(row));
                    assert!(["AZ", "CA", "ID", "OR", "WA", "WY"].contains(&state.value(row)));
                    assert!(batch.column(3).is_null(row) && batch.column(6).is_null(row));
                }
                1 => {
                    max_auction = max_auction.max(long(3).value(row));
                    assert!((10..=14).contains(&long(5).value(row)));
                    assert!(long(4).value(row) >= 1000);
                }
                _ => {
                    assert!(long(6).value(row) >= 1000 && long(7).value(row) >= 1000);
                    assert!((100..=100_000_000).contains(&long(8).value(row)));
                    assert!(batch.column(1).is_null(row));
                }
            }
        }
    }
    // 1 person, 3 auctions, 46 bids in every 50 events.
    assert_eq!(kinds, BTreeMap::from([(0, 100), (1, 300), (2, 4600)]));
    // Ids count up from 1000, one person and three auctions per 50 events.
    assert_eq!(max_person, 1000 + 99);
    assert_eq!(max_auction, 1000 + 299);
}

#[test]
fn event_time_advances_with_the_id_and_never_goes_back_within_a_split() {
    let times = |engine: Engine| -> Vec<Vec<i64>> {
        engine
            .sql("SELECT `dateTime` FROM datagen")
            .unwrap()
            .collect()
            .unwrap()
            .iter()
            .map(|b| {
                b.column(0)
                    .as_primitive::<TimestampMillisecondType>()
                    .values()
                    .to_vec()
            })
            .collect()
    };
    let base = weir::connectors::nexmark::generator::DEFAULT_BASE_TIME_MS;
    // One subtask reading four splits merges them in id order: time never goes back.
    let merged: Vec<i64> = times(engine(1, EVENTS, "'splits' = '4',")).concat();
    assert_eq!(merged.len(), EVENTS as usize);
    assert!(merged.windows(2).all(|w| w[0] <= w[1]));
    // 10 000 events per second of event time: event 4999 is 499 ms after event 0.
    assert_eq!(merged[0], base);
    assert_eq!(*merged.last().unwrap(), base + (EVENTS as i64 - 1) / 10);
    // Three subtasks, one split each: every batch is one split's run of events.
    for batch in times(engine(3, EVENTS, "")) {
        assert!(batch.windows(2).all(|w| w[0] <= w[1]));
    }
}

#[test]
fn bench_runs_end_to_end_on_a_few_events() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("results.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "bench",
            "nexmark",
            "--queries",
            "q0,q3,q6,q9,q10,q11,q13,q14",
            "--events",
            "3000",
            "--parallelism",
            "2",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--output-dir")
        .arg(dir.path().join("nexmark"))
        .args(["--checkpoint-interval", "20ms"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("generator") && text.contains("q14"), "{text}");
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = results.as_array().unwrap();
    let by_name = |name: &str| results.iter().find(|r| r["query"] == name).unwrap().clone();
    assert_eq!(by_name("generator")["status"], "finished");
    assert_eq!(by_name("q0")["output_rows"], 2760);
    // A join query runs; q9 is a TopN over an interval join; q6 an OVER
    // aggregation of a TopN's updates, which Flink cannot run.
    for query in ["q3", "q6", "q9"] {
        assert_eq!(by_name(query)["status"], "finished", "{query}");
    }
    assert_eq!(by_name("q10")["output_rows"], 2760);
    // q13 reads the side input file the runner writes, as Nexmark's setup does.
    assert_eq!(by_name("q13")["output_rows"], 2760);
    // q10 writes under --output-dir/data/output/<submit time>/bid/, as Nexmark's scripts do.
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("nexmark/data/output"))
        .unwrap()
        .collect();
    assert_eq!(runs.len(), 1);
    let partition = runs[0]
        .as_ref()
        .unwrap()
        .path()
        .join("bid/dt=2015-07-15/hm=00%3A00");
    assert!(partition.join("_SUCCESS").is_file(), "{partition:?}");
    assert_eq!(crate::part_file_lines(&partition).len(), 2760);
    assert!(
        by_name("q0")["checkpoints"].is_u64(),
        "checkpoint figures are reported"
    );
    for name in ["q0", "q10", "q11", "q14"] {
        let r = by_name(name);
        assert_eq!(r["events"], 3000);
        assert!(r["events_per_second"].as_f64().unwrap() > 0.0);
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
}

#[test]
fn the_checkpoint_benchmark_runs_end_to_end_on_a_few_rows() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("checkpoint.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "bench",
            "checkpoint",
            "--rows",
            "200000",
            "--keys",
            "1000",
            "--runs",
            "1",
        ])
        .args(["--interval", "50ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("recovery after SIGKILL"), "{text}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(r["recovery_state_rows"].as_u64().unwrap() >= 1000, "{r}");
    assert!(r["recovery_ms"].as_f64().unwrap() > 0.0);
    assert!(r["plain_rows_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn q13_enriches_every_bid_with_its_side_input_row_from_the_legacy_file_table() {
    let dir = tempfile::tempdir().unwrap();
    weir::bench::write_side_input(dir.path()).unwrap();
    let q13 = weir::bench::query("q13").unwrap();
    // Flink's file unchanged, except that the rows are collected instead of
    // written to a blackhole.
    let (ddl, select) = q13.split_once("INSERT INTO nexmark_q13").unwrap();
    let options = weir::bench::NexmarkOptions {
        events: EVENTS,
        event_rate: 10_000,
        ..Default::default()
    };
    for parallelism in [1, 2] {
        let script = weir::bench::query_script(&format!("{ddl}{select}"), &options, dir.path(), 0);
        let batches = crate::engine(parallelism)
            .sql(&script)
            .unwrap()
            .collect()
            .unwrap();
        let mut bids = 0;
        for batch in &batches {
            let auction = batch.column(0).as_primitive::<Int64Type>();
            let value = batch.column(4).as_string::<i32>();
            for i in 0..batch.num_rows() {
                assert_eq!(value.value(i), (auction.value(i) % 10_000).to_string());
                bids += 1;
            }
        }
        // 46 of every 50 events are bids, and every one finds its key.
        assert_eq!(bids, EVENTS * 46 / 50, "at parallelism {parallelism}");
    }
}

#[test]
fn weir_run_runs_q14_whose_create_function_names_a_java_class_with_a_rust_port() {
    let dir = tempfile::tempdir().unwrap();
    let options = weir::bench::NexmarkOptions {
        events: EVENTS,
        event_rate: 10_000,
        ..Default::default()
    };
    let q14 = weir::bench::query("q14").unwrap();
    // Flink's file, with the rows printed instead of dropped.
    let q14 = q14.replace("'connector' = 'blackhole'", "'connector' = 'print'");
    let file = dir.path().join("q14.sql");
    std::fs::write(&file, weir::bench::query_script(&q14, &options, dir.path(), 0)).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows = stdout.lines().filter(|l| l.starts_with("+I[")).count();
    // q14 keeps the bids priced over 1,000,000 cents and below 50,000,000.
    assert!(rows > 0 && rows < EVENTS as usize, "{rows} rows\n{stderr}");
}

/// The rows of Nexmark query `name` (Flink's file, its rows collected
/// instead of written to its sink) over `events` events, at `parallelism`;
/// the final table when it updates. Also whether its plan reads the
/// processing time.
fn query_rows(name: &str, events: u64, parallelism: usize, dir: &std::path::Path) -> (Vec<String>, bool) {
    let file = weir::bench::query(name).unwrap();
    let at = file.find("INSERT INTO").unwrap();
    let (ddl, insert) = file.split_at(at);
    // `INSERT INTO <sink>` off: the query itself.
    let select = insert["INSERT INTO".len()..].trim_start();
    let select = &select[select.find(char::is_whitespace).unwrap()..];
    // 2,000 events per second of event time: 20 s, several windows of each query.
    let options = weir::bench::NexmarkOptions {
        events,
        event_rate: 2_000,
        ..Default::default()
    };
    let script = weir::bench::query_script(&format!("{ddl}{select}"), &options, dir, 0);
    let plan = crate::engine(parallelism)
        .sql(&weir::bench::query_script(
            &format!("{ddl}EXPLAIN {select}"),
            &options,
            dir,
            0,
        ))
        .unwrap()
        .collect()
        .unwrap();
    let proctime = crate::sorted_rows(&plan).iter().any(|p| p.contains("proctime()"));
    let result = crate::engine(parallelism).sql(&script).unwrap();
    let rows = match result.is_updating() {
        true => crate::sorted_rows(&[result.materialize().unwrap()]),
        false => crate::sorted_rows(&result.collect().unwrap()),
    };
    (rows, proctime)
}

#[test]
fn every_nexmark_query_gives_the_same_rows_at_parallelism_1_2_and_4_unless_it_reads_processing_time() {
    let dir = tempfile::tempdir().unwrap();
    weir::bench::write_side_input(dir.path()).unwrap();
    let mut checked = Vec::new();
    for (name, _) in weir::bench::QUERIES {
        let (reference, proctime) = query_rows(name, 40_000, 1, dir.path());
        for parallelism in [2, 4] {
            let (rows, _) = query_rows(name, 40_000, parallelism, dir.path());
            if proctime && rows != reference {
                // Which window or version a row meets depends on the clock.
                eprintln!("{name} reads processing time: its rows differ at parallelism {parallelism}");
                continue;
            }
            assert!(
                rows == reference,
                "{name} at parallelism {parallelism}: {} rows, {} at parallelism 1; first differing: {:?}",
                rows.len(),
                reference.len(),
                rows.iter().zip(&reference).find(|(a, b)| a != b)
            );
        }
        checked.push((name, reference.len()));
    }
    eprintln!("rows per query: {checked:?}");
    assert_eq!(checked.len(), weir::bench::QUERIES.len());
}

#[test]
fn weir_run_runs_q10_and_q13_from_nexmarks_files_with_their_placeholders_defined() {
    let dir = tempfile::tempdir().unwrap();
    weir::bench::write_side_input(dir.path()).unwrap();
    let home = dir.path().display().to_string();
    let defines = [
        "TPS=10000".to_string(),
        format!("EVENTS_NUM={EVENTS}"),
        "PERSON_PROPORTION=1".into(),
        "AUCTION_PROPORTION=3".into(),
        "BID_PROPORTION=46".into(),
        "NEXMARK_TABLE=datagen".into(),
        format!("NEXMARK_DIR={home}"),
        "SUBMIT_TIME=7".into(),
    ];
    let weir = |query: &str, extra: &[String]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
        command.arg("run");
        for define in defines.iter().chain(extra) {
            command.args(["--define", define]);
        }
        command
            .args(["sql/nexmark/ddl_gen.sql", "sql/nexmark/ddl_views.sql"])
            .arg(format!("sql/nexmark/{query}.sql"))
            .output()
            .unwrap()
    };
    let q10 = weir("q10", &[]);
    assert!(q10.status.success(), "{}", String::from_utf8_lossy(&q10.stderr));
    let partition = dir.path().join("data/output/7/bid/dt=2015-07-15/hm=00%3A00");
    assert_eq!(crate::part_file_lines(&partition).len() as u64, EVENTS * 46 / 50);
    // q13's ${FLINK_HOME} from the environment instead.
    let q13 = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .env("FLINK_HOME", &home)
        .arg("run")
        .args(defines.iter().flat_map(|d| ["--define", d.as_str()]))
        .args([
            "sql/nexmark/ddl_gen.sql",
            "sql/nexmark/ddl_views.sql",
            "sql/nexmark/q13.sql",
        ])
        .output()
        .unwrap();
    assert!(q13.status.success(), "{}", String::from_utf8_lossy(&q13.stderr));
    assert!(String::from_utf8_lossy(&q13.stderr).contains("finished"));
    // A placeholder without a value is named, with where it is.
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .env_remove("FLINK_HOME")
        .args(["run", "sql/nexmark/q13.sql"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(
        stderr.contains("sql/nexmark/q13.sql:13:") && stderr.contains("${FLINK_HOME} has no value"),
        "{stderr}"
    );
}
