//! The `weir` command: the SQL shell, `weir run FILE.sql`, and `weir bench`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use weir::{Engine, Error, JobHandle, JobStatus};

// mimalloc reuses freed memory where glibc's malloc returns every large batch
// buffer to the kernel and faults it in again (a third of the generator's time).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weir — a streaming SQL engine (Flink SQL on Apache Arrow).
///
/// Without a command, `weir` is an interactive SQL shell (type HELP;). With
/// standard input not a terminal (`weir < script.sql`) or with `-e`, it runs
/// the statements and prints their results the same way, stopping at the
/// first error (exit status 1).
#[derive(Parser)]
#[command(version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Run these statements (separated by ';') and exit.
    #[arg(short = 'e', long = "execute", value_name = "SQL")]
    execute: Option<String>,
    /// The shell submits its jobs to the JobManager at HOST:PORT (and
    /// SHOW JOBS / STOP JOB reach the jobs there).
    #[arg(long, value_name = "HOST:PORT")]
    jobmanager: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the statements of a SQL file, then wait for the jobs it started.
    ///
    /// Statements end with `;`. `SET 'key' = 'value'` changes settings (Flink's
    /// keys, e.g. 'parallelism.default'); `INSERT INTO` starts a job; a `SELECT`
    /// prints its rows as they arrive. The command exits when every bounded job
    /// has finished, with status 1 if any statement or job failed.
    ///
    /// Several files run one after the other, as one script (Nexmark's
    /// `ddl_gen.sql ddl_views.sql q10.sql`). A `${NAME}` in them is filled in
    /// from `--define NAME=value`, else from the environment variable NAME.
    Run {
        /// The SQL files.
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// A value for `${NAME}` placeholders, as NAME=value (repeatable).
        #[arg(long = "define", short = 'D', value_name = "NAME=VALUE")]
        defines: Vec<String>,
        /// Settings applied before the file, as key=value (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        settings: Vec<String>,
        /// Start the jobs from a checkpoint: a `chk-<n>` directory, or a job
        /// directory (its newest intact checkpoint; none: start afresh). Same
        /// as SET 'execution.savepoint.path'.
        #[arg(long, value_name = "PATH")]
        restore: Option<PathBuf>,
        /// Print a line of metrics per job on standard error at this interval
        /// (e.g. 1s): records, backpressure, watermark, the last checkpoint.
        #[arg(long, value_name = "DURATION")]
        metrics_interval: Option<String>,
        /// Submit the jobs to the JobManager at HOST:PORT instead of running
        /// them in this process.
        #[arg(long, value_name = "HOST:PORT")]
        jobmanager: Option<String>,
        /// Serve Flink's REST API and Prometheus `/metrics` for the jobs on
        /// this port of 127.0.0.1 (0: any free one; the address is printed).
        #[arg(long, value_name = "PORT")]
        rest_port: Option<u16>,
    },
    /// Run a JobManager: TaskManagers register their slots with it, and
    /// `weir run --jobmanager` submits jobs to it.
    Jobmanager {
        /// The port to listen on (0: any free one; the address is printed).
        #[arg(long, default_value_t = 6123)]
        port: u16,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Between two heartbeats of a TaskManager (Flink's heartbeat.interval).
        #[arg(long, default_value = "10 s", value_name = "DURATION")]
        heartbeat_interval: String,
        /// Silence after which a TaskManager is lost (Flink's heartbeat.timeout).
        #[arg(long, default_value = "50 s", value_name = "DURATION")]
        heartbeat_timeout: String,
        /// Serve Flink's REST API and Prometheus `/metrics` on this port of
        /// the listening address (Flink's rest.port; 0: any free one).
        #[arg(long, default_value_t = 8081)]
        rest_port: u16,
    },
    /// Run a TaskManager that offers slots to a JobManager and runs the
    /// subtasks placed on them.
    Taskmanager {
        /// The JobManager's HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        jobmanager: String,
        /// Slots offered (a job needs as many as its highest parallelism).
        #[arg(long, default_value_t = 1)]
        slots: usize,
        /// The address this TaskManager listens on and is reached at.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// The port of its control service (Flink's taskmanager.rpc.port;
        /// 0: any free one).
        #[arg(long, default_value_t = 0)]
        rpc_port: u16,
        /// The port of its Flight node, where other TaskManagers fetch its
        /// channels (Flink's taskmanager.data.port; 0: any free one).
        #[arg(long, default_value_t = 0)]
        data_port: u16,
        /// Serve Prometheus `/metrics` of its subtasks on this port (Flink's
        /// metrics.reporter.prom.port).
        #[arg(long, value_name = "PORT")]
        metrics_port: Option<u16>,
    },
    /// Run benchmarks.
    Bench {
        #[command(subcommand)]
        benchmark: Benchmark,
    },
    /// Look into checkpoints and savepoints.
    Checkpoint {
        #[command(subcommand)]
        command: CheckpointCommand,
    },
}

#[derive(Subcommand)]
enum CheckpointCommand {
    /// List a checkpoint's operators, subtasks, state files, sizes, key-group
    /// ranges and source positions, and how to query each operator's state
    /// as a table (the `checkpoint` connector).
    Inspect {
        /// A `chk-<n>` or savepoint directory, or a job directory (its newest
        /// intact checkpoint).
        path: PathBuf,
    },
}

#[derive(Subcommand)]
enum Benchmark {
    /// Run Nexmark queries on the built-in generator and measure them.
    ///
    /// The generator alone is measured first; each query's throughput is also
    /// shown as a share of it. Queries that need features weir does not have
    /// yet are listed as such.
    Nexmark(NexmarkArgs),
    /// Measure checkpoints: throughput of a windowed aggregation with and
    /// without them, checkpoint duration (median, p99), state size, time tasks
    /// are blocked by snapshots, and recovery time after SIGKILL.
    Checkpoint(CheckpointArgs),
    /// Aligned against unaligned checkpoints under heavy backpressure: a
    /// session aggregation slowed by a sleep per row, each mode run for a
    /// fixed time, alternately; throughput, checkpoint duration, alignment
    /// time and channel-state size.
    Backpressure(BackpressureArgs),
    /// Restore time as state grows (keys in one-hour windows), at the
    /// savepoint's parallelism and at another one.
    Restore(RestoreArgs),
    /// Kafka to Kafka through a window aggregate, at-least-once and
    /// exactly-once, against a real broker: events/s and checkpoint
    /// durations; writes the same job for Flink with --flink-sql.
    Kafka(KafkaArgs),
    /// Latency from the source to the sink (p50/p99/p99.9) at fixed rates,
    /// with aligned and unaligned checkpoints, through a keyed OVER
    /// aggregation; writes the same job for Flink with --flink-sql, and
    /// reads its output with --read.
    Latency(LatencyArgs),
}

/// The options of `weir bench latency`.
#[derive(clap::Args)]
struct LatencyArgs {
    /// Source rates in rows per second, comma-separated.
    #[arg(long, default_value = "100000,1000000,5000000")]
    rates: String,
    /// How long each run lasts.
    #[arg(long, default_value = "10s")]
    run_time: String,
    /// Runs of each rate and mode; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Checkpoint interval.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// `execution.buffer-timeout` (as Flink's setting of that name).
    #[arg(long, default_value = "10ms")]
    buffer_timeout: String,
    /// Distinct keys of the OVER aggregation.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Write the job for Flink, one file per rate, into this directory
    /// (for ../shared/flink/run_sql.py, with --var OUT=<dir>), and stop.
    #[arg(long)]
    flink_sql: Option<PathBuf>,
    /// Only read a finished job's output directory (Flink's) and print its
    /// latency percentiles.
    #[arg(long)]
    read: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The options of `weir bench kafka`.
#[derive(clap::Args)]
struct KafkaArgs {
    /// The broker (or WEIR_KAFKA_BOOTSTRAP); without it, one is started
    /// with scripts/kafka.sh (run from the repository).
    #[arg(long)]
    bootstrap: Option<String>,
    /// JSON records in the input topic (filled once, then reused).
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Distinct keys.
    #[arg(long, default_value_t = 100)]
    keys: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Checkpoint interval.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Runs of each guarantee (interleaved); medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the exactly-once job for Flink here (for ../shared/flink/run_sql.py).
    #[arg(long)]
    flink_sql: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The options of `weir bench backpressure`.
#[derive(clap::Args)]
struct BackpressureArgs {
    /// How long each run lasts.
    #[arg(long, default_value = "10s")]
    run_time: String,
    /// Runs of each mode, alternating; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Checkpoint interval.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Sleep per row in the aggregation, in microseconds.
    #[arg(long, default_value_t = 20)]
    slow_us: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The options of `weir bench restore`.
#[derive(clap::Args)]
struct RestoreArgs {
    /// State sizes in keys, comma-separated.
    #[arg(long, default_value = "100000,1000000,10000000")]
    keys: String,
    /// Parallelism of the job that takes the savepoint.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Parallelism of the rescaled restore.
    #[arg(long, default_value_t = 1)]
    rescaled: usize,
    /// Restores of each kind; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The options of `weir bench checkpoint`.
#[derive(clap::Args)]
struct CheckpointArgs {
    /// Rows of each throughput run.
    #[arg(long, default_value_t = 100_000_000)]
    rows: u64,
    /// Runs with and without checkpoints (interleaved); medians are reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Distinct keys: the size of the window state.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Checkpoint interval.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Take unaligned checkpoints (the job is not backpressured: this
    /// measures what unaligned mode costs when it is not needed).
    #[arg(long)]
    unaligned: bool,
    /// Take incremental checkpoints: each writes the state changed since the last.
    #[arg(long)]
    incremental: bool,
    /// After every key has a row, send the rows to this many keys only (in
    /// one window): the state stays `--keys` large while only these change.
    #[arg(long)]
    hot_keys: Option<u64>,
    /// Keep the window state with the spilling state backend, in this much
    /// memory (e.g. 1gb); peak RSS is reported for every kind of run.
    #[arg(long)]
    spilling: Option<String>,
    /// A non-windowed GROUP BY of the same keys (an updating result)
    /// instead of the 1-hour tumbling windows.
    #[arg(long, conflicts_with = "join")]
    group_by: bool,
    /// A regular join of the rows with one row per key (ids 0..keys of a
    /// second table; every row of both sides kept) instead of the windows.
    #[arg(long)]
    join: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The options of `weir bench nexmark`.
#[derive(clap::Args)]
struct NexmarkArgs {
    /// Queries, comma-separated (q0,q1,q2), or `all`.
    #[arg(long, default_value = "q0,q1,q2")]
    queries: String,
    /// Events per query.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Emit at most this many events per second (wall clock); default: as fast as possible.
    #[arg(long)]
    rate: Option<u64>,
    /// Event time advances by this many events per second (Nexmark's TPS).
    #[arg(long, default_value_t = 10_000_000)]
    event_rate: u64,
    /// Checkpoint every this long (e.g. 1s); adds checkpoint count, median
    /// duration and state size to the figures.
    #[arg(long)]
    checkpoint_interval: Option<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where queries that write files (q10) write them, as Nexmark's
    /// NEXMARK_DIR; default: a temporary directory, removed after each query.
    #[arg(long)]
    output_dir: Option<PathBuf>,
}

/// How many milliseconds freed memory stays committed before it goes back
/// to the kernel (mimalloc's purge delay, [`weir::common::alloc::MI_OPTION_PURGE_DELAY`]). At 10 ms (the header's default) a job that
/// allocates and frees output batches at a high rate spends a quarter of
/// its time faulting in and zeroing pages it had just given back: the
/// interval join of benches/interval_join_seq.sql ran in 12.7-13.2 s at
/// parallelism 1, against 9.3-9.9 s at 1 s; the hashed regular join
/// (benches/join_seq.sql, threshold -1) 4.9-5.3 s against 4.4-4.6 s. The
/// price is peak memory: 136-144 MB against 159-174 MB for the interval
/// join, 166 MB against 197 MB for a GROUP BY over a million keys
/// (benches/groupby_1m_keys.sql). Never purging (-1) is no faster than 1 s,
/// and a long-running job should give memory back after a burst. The
/// spilling backend's store sets it to 0 (`alloc::return_freed_memory_at_once`).
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

fn main() -> ExitCode {
    // mimalloc's own variable, when set, decides.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a plain integer option of the allocator, by value,
        // before any thread starts; mimalloc documents options as settable
        // at any time.
        #[expect(unsafe_code, reason = "mimalloc's options have only a C API")]
        unsafe {
            libmimalloc_sys::mi_option_set(weir::common::alloc::MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS)
        };
    }
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return match shell(cli.execute, cli.jobmanager) {
            Ok(()) => ExitCode::SUCCESS,
            // The shell has printed the error already.
            Err(_) => ExitCode::FAILURE,
        };
    };
    let result = match command {
        Command::Run {
            files,
            defines,
            settings,
            restore,
            metrics_interval,
            jobmanager: Some(jobmanager),
            rest_port,
        } => {
            if restore.is_some() || metrics_interval.is_some() || rest_port.is_some() {
                Err(anyhow::anyhow!(
                    "--restore, --metrics-interval and --rest-port are for jobs run in this process, not with --jobmanager yet"
                ))
            } else {
                run_remote(&jobmanager, &files, &defines, &settings)
            }
        }
        Command::Run {
            files,
            defines,
            settings,
            restore,
            metrics_interval,
            jobmanager: None,
            rest_port,
        } => {
            let interval = metrics_interval
                .map(|text| duration_arg("metrics-interval", &text))
                .transpose();
            interval.and_then(|interval| {
                let options = RunOptions {
                    restore: restore.as_deref(),
                    metrics_interval: interval,
                    rest_port,
                };
                run(&files, &defines, &settings, options)
            })
        }
        Command::Jobmanager {
            port,
            host,
            heartbeat_interval,
            heartbeat_timeout,
            rest_port,
        } => (|| {
            let heartbeats = weir::cluster::jobmanager::Heartbeats {
                interval: duration_arg("heartbeat-interval", &heartbeat_interval)?,
                timeout: duration_arg("heartbeat-timeout", &heartbeat_timeout)?,
            };
            Ok(weir::cluster::jobmanager::run(
                &format!("{host}:{port}"),
                heartbeats,
                Some(&format!("{host}:{rest_port}")),
            )?)
        })(),
        Command::Taskmanager {
            jobmanager,
            slots,
            host,
            rpc_port,
            data_port,
            metrics_port,
        } => {
            let options = weir::cluster::taskmanager::TaskManagerOptions {
                jobmanager,
                slots,
                host,
                rpc_port,
                data_port,
                metrics_port,
            };
            weir::cluster::taskmanager::run(options).map_err(anyhow::Error::from)
        }
        Command::Bench {
            benchmark: Benchmark::Nexmark(args),
        } => bench_nexmark(args),
        Command::Bench {
            benchmark: Benchmark::Checkpoint(args),
        } => bench_checkpoint(args),
        Command::Bench {
            benchmark: Benchmark::Backpressure(args),
        } => bench_backpressure(args),
        Command::Bench {
            benchmark: Benchmark::Latency(args),
        } => bench_latency(args),
        Command::Bench {
            benchmark: Benchmark::Restore(args),
        } => bench_restore(args),
        Command::Bench {
            benchmark: Benchmark::Kafka(args),
        } => bench_kafka(args),
        Command::Checkpoint {
            command: CheckpointCommand::Inspect { path },
        } => weir::state::checkpoint::inspect::report(&path)
            .map(|report| print!("{report}"))
            .map_err(anyhow::Error::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A script file read, its `${NAME}` placeholders filled in.
fn read_script(file: &Path, defines: &[String]) -> anyhow::Result<String> {
    let sql = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut values = std::collections::HashMap::new();
    for define in defines {
        let (name, value) = define
            .split_once('=')
            .with_context(|| format!("--define takes NAME=VALUE, got '{define}'"))?;
        values.insert(name.trim().to_string(), value.to_string());
    }
    weir::sql::placeholders::substitute(&sql, |name| {
        values.get(name).cloned().or_else(|| std::env::var(name).ok())
    })
    .map_err(|(name, offset)| {
        let line = sql[..offset].matches('\n').count() + 1;
        let column = offset - sql[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
        anyhow::anyhow!(
            "{}:{line}:{column}: ${{{name}}} has no value: pass --define {name}=... or set the environment variable {name}",
            file.display()
        )
    })
}

/// How `weir run` runs, beyond its files and settings.
struct RunOptions<'a> {
    restore: Option<&'a Path>,
    metrics_interval: Option<std::time::Duration>,
    rest_port: Option<u16>,
}

fn run(
    files: &[PathBuf],
    defines: &[String],
    settings: &[String],
    options: RunOptions,
) -> anyhow::Result<()> {
    let RunOptions {
        restore,
        metrics_interval,
        rest_port,
    } = options;
    let engine = Engine::new();
    if let Some(path) = restore {
        engine.set("execution.savepoint.path", &path.display().to_string())?;
    }
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--set takes KEY=VALUE, got '{setting}'"))?;
        engine.set(key.trim(), value.trim())?;
    }
    let mut scripts = Vec::new();
    for file in files {
        let sql = read_script(file, defines)?;
        let statements = weir::sql::parser::parse_statements(&sql).map_err(|e| located(e, file, &sql))?;
        scripts.push((file, sql, statements));
    }
    let started = Instant::now();
    let stop = StopOnSignal::install()?;
    if let Some(port) = rest_port {
        let address = weir::rest::serve(&format!("127.0.0.1:{port}"), stop.jobs.clone())?;
        eprintln!("[INFO] REST API on http://{address}");
    }
    if let Some(interval) = metrics_interval {
        let jobs = stop.jobs.clone();
        std::thread::Builder::new()
            .name("weir-metrics".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(interval);
                    let jobs = jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    for job in jobs.iter().filter(|j| j.status() == JobStatus::Running) {
                        eprintln!("[METRICS] {}", job.metrics().summary());
                    }
                }
            })
            .context("cannot start the metrics thread")?;
    }
    let mut jobs = Vec::new();
    for (file, sql, statement) in scripts
        .iter()
        .flat_map(|(file, sql, statements)| statements.iter().map(move |s| (file, sql, s)))
    {
        let result = engine.sql(&statement.text).map_err(|e| {
            // Positions in errors are relative to the statement; make them the file's.
            located(shift_position(e, statement.position), file, sql)
        })?;
        if let Some(job) = result.job() {
            for note in job.notes() {
                eprintln!("[INFO] {note}");
            }
            jobs.push(job.clone());
            stop.watch(job.clone());
            if result.schema().fields().is_empty() {
                eprintln!("[INFO] Job {} ({}) submitted.", job.id(), job.name());
                continue;
            }
        }
        print_result(result)?;
    }
    let mut failed = None;
    for job in jobs {
        match job.wait() {
            Ok(JobStatus::Finished) => eprintln!(
                "[INFO] Job {} ({}) finished in {:.3} s{}.",
                job.id(),
                job.name(),
                job.elapsed().as_secs_f64(),
                match job.completed_checkpoints().len() {
                    0 => String::new(),
                    n => format!(", {n} checkpoint(s)"),
                }
            ),
            Ok(status) => eprintln!("[INFO] Job {} ({}) ended: {status:?}.", job.id(), job.name()),
            Err(e) => {
                eprintln!("[ERROR] Job {} ({}) failed: {e}", job.id(), job.name());
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(anyhow::Error::new(e).context("a job failed"));
    }
    stop.finish()?;
    eprintln!("[INFO] Done in {:.3} s.", started.elapsed().as_secs_f64());
    Ok(())
}

/// `weir run --jobmanager`: statements run here (DDL, SET), each INSERT is
/// planned here and submitted to the JobManager as its plan with this
/// session's settings; waits for the jobs.
fn run_remote(
    jobmanager: &str,
    files: &[PathBuf],
    defines: &[String],
    settings: &[String],
) -> anyhow::Result<()> {
    let engine = Engine::new();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--set takes KEY=VALUE, got '{setting}'"))?;
        engine.set(key.trim(), value.trim())?;
    }
    let mut client = weir::cluster::client::Client::connect(jobmanager)?;
    let started = Instant::now();
    let mut jobs = Vec::new();
    for file in files {
        let sql = read_script(file, defines)?;
        let statements = weir::sql::parser::parse_statements(&sql).map_err(|e| located(e, file, &sql))?;
        for statement in statements {
            let is_insert = matches!(statement.statement, weir::sql::parser::Statement::Insert(_));
            if !is_insert {
                let result = engine
                    .sql(&statement.text)
                    .map_err(|e| located(shift_position(e, statement.position), file, &sql))?;
                if result.job().is_some() {
                    anyhow::bail!(
                        "{}: only INSERT INTO jobs run on a JobManager yet",
                        file.display()
                    );
                }
                continue;
            }
            let plan = engine
                .plan(&statement.text)
                .map_err(|e| located(shift_position(e, statement.position), file, &sql))?;
            let name = weir::cluster::client::job_name(&plan, &engine.config());
            let job_id = client.submit(&name, &plan, &engine.config())?;
            eprintln!("[INFO] Job {job_id} ({name}) submitted to the JobManager at {jobmanager}.");
            jobs.push((job_id, name));
        }
    }
    let mut failed = None;
    for (job_id, name) in jobs {
        let report = client.wait(&job_id)?;
        match report.error {
            None => eprintln!("[INFO] Job {job_id} ({name}) ended: {:?}.", report.state),
            Some(error) => {
                eprintln!("[ERROR] Job {job_id} ({name}) failed: {error}");
                failed.get_or_insert(error);
            }
        }
    }
    if let Some(error) = failed {
        anyhow::bail!("a job failed: {error}");
    }
    eprintln!("[INFO] Done in {:.3} s.", started.elapsed().as_secs_f64());
    Ok(())
}

/// SIGINT (Ctrl-C) or SIGTERM during `weir run`: the first stops every
/// running job with a savepoint (its path is printed, and the run ends with
/// status 0); a second exits at once with status 130.
struct StopOnSignal {
    jobs: Arc<Mutex<Vec<JobHandle>>>,
    stopper: Arc<Mutex<Option<std::thread::JoinHandle<bool>>>>,
}

impl StopOnSignal {
    fn install() -> anyhow::Result<Self> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let jobs: Arc<Mutex<Vec<JobHandle>>> = Arc::default();
        let stopper: Arc<Mutex<Option<std::thread::JoinHandle<bool>>>> = Arc::default();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("cannot install the SIGINT/SIGTERM handler")?;
        let (watched, stopping) = (jobs.clone(), stopper.clone());
        std::thread::Builder::new()
            .name("weir-signals".into())
            .spawn(move || {
                let mut seen = 0;
                for _ in signals.forever() {
                    seen += 1;
                    if seen > 1 {
                        eprintln!("[WARN] Interrupted again: exiting without a savepoint.");
                        std::process::exit(130);
                    }
                    eprintln!("[INFO] Stopping with a savepoint (interrupt again to exit at once)...");
                    let jobs = watched.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let handle = std::thread::spawn(move || stop_with_savepoints(&jobs));
                    *stopping.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
                }
            })
            .context("cannot start the signal thread")?;
        Ok(StopOnSignal { jobs, stopper })
    }

    fn watch(&self, job: JobHandle) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).push(job);
    }

    /// After every job ended: waits for the savepoints a signal asked for.
    fn finish(&self) -> anyhow::Result<()> {
        let stopper = self.stopper.lock().unwrap_or_else(|e| e.into_inner()).take();
        match stopper.map(|s| s.join()) {
            None | Some(Ok(true)) => Ok(()),
            Some(_) => anyhow::bail!("a job could not be stopped with a savepoint and was cancelled"),
        }
    }
}

/// Stops each running job with a savepoint; one that cannot take one is
/// cancelled. Whether every job got its savepoint.
fn stop_with_savepoints(jobs: &[JobHandle]) -> bool {
    let mut all = true;
    for job in jobs.iter().filter(|j| j.status() == JobStatus::Running) {
        match job.stop_with_savepoint() {
            Ok(path) => eprintln!(
                "[INFO] Job {} ({}) stopped with a savepoint: {}",
                job.id(),
                job.name(),
                path.display()
            ),
            Err(e) => {
                eprintln!("[ERROR] Job {} ({}): {e}; cancelling it.", job.id(), job.name());
                job.cancel();
                all = false;
            }
        }
    }
    all
}

/// The SQL shell: interactive at a terminal, else a script from `-e` or stdin.
fn shell(execute: Option<String>, jobmanager: Option<String>) -> weir::Result<()> {
    use std::io::IsTerminal;
    let mut shell = match jobmanager {
        Some(address) => weir::repl::Shell::with_jobmanager(Engine::new(), &address)?,
        None => weir::repl::Shell::new(Engine::new()),
    };
    if let Some(sql) = execute {
        return shell.run_script(&sql);
    }
    if !std::io::stdin().is_terminal() {
        let script = weir::repl::read_stdin()?;
        return shell.run_script(&script);
    }
    let history = std::env::var_os("WEIR_HISTORY")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".weir_history")));
    shell.run_interactive(history)
}

fn bench_checkpoint(args: CheckpointArgs) -> anyhow::Result<()> {
    use weir::bench::checkpoint::{CheckpointBenchOptions, CheckpointJob, run};
    let interval = duration_arg("interval", &args.interval)?;
    anyhow::ensure!(args.parallelism > 0, "--parallelism must be positive");
    anyhow::ensure!(
        args.keys > 0 && args.rows > 0,
        "--keys and --rows must be positive"
    );
    let options = CheckpointBenchOptions {
        rows: args.rows,
        keys: args.keys,
        parallelism: args.parallelism,
        interval,
        runs: args.runs,
        unaligned: args.unaligned,
        incremental: args.incremental,
        hot_keys: args.hot_keys,
        spill_budget: match &args.spilling {
            None => None,
            Some(text) => Some(
                weir::common::config::parse_memory_size(text)
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--spilling: '{text}' is not a memory size such as 1gb"))?,
            ),
        },
        job: match (args.group_by, args.join) {
            (true, _) => CheckpointJob::GroupBy,
            (_, true) => CheckpointJob::Join,
            _ => CheckpointJob::Windows,
        },
    };
    let weir = std::env::current_exe().context("cannot find the weir binary")?;
    let r = run(&options, &weir)?;
    println!(
        "{} checkpoints, {} rows, {} keys, {}, parallelism {}, interval {} ms, median of {} runs\n\
         throughput without checkpoints  {:.2}M rows/s\n\
         throughput with checkpoints     {:.2}M rows/s  (overhead {:.1}%)\n\
         checkpoints                     {}\n\
         duration median / p99           {:.0} ms / {:.0} ms\n\
         largest state                   {:.1} MB\n\
         written per checkpoint          {:.1} MB median{} (state referenced {:.1} MB)\n\
         tasks blocked by snapshot       {:.0} ms (median of the longest per checkpoint)\n\
         state backend                   {}\n\
         peak RSS without / with ckpts   {:.0} MB / {:.0} MB\n\
         recovery after SIGKILL          {}",
        if args.unaligned { "Unaligned" } else { "Aligned" },
        r.rows,
        r.keys,
        options.job.describe(),
        r.parallelism,
        r.interval_ms,
        r.runs,
        r.plain_rows_per_second / 1e6,
        r.checkpointed_rows_per_second / 1e6,
        r.overhead * 100.0,
        r.checkpoints,
        r.duration_median_ms,
        r.duration_p99_ms,
        r.max_state_bytes as f64 / 1e6,
        r.written_median_bytes as f64 / 1e6,
        match (r.incremental, r.hot_keys) {
            (false, _) => String::new(),
            (true, None) => ", incremental".to_string(),
            (true, Some(hot)) => format!(", incremental, {hot} keys changing"),
        },
        r.full_median_bytes as f64 / 1e6,
        r.blocked_median_ms,
        match r.spill_budget {
            None => "hashmap (heap)".to_string(),
            Some(budget) => format!("spilling, {:.0} MB budget", budget as f64 / (1 << 20) as f64),
        },
        r.plain_peak_rss_bytes as f64 / (1 << 20) as f64,
        r.checkpointed_peak_rss_bytes as f64 / (1 << 20) as f64,
        match r.recovery_ms {
            Some(ms) => format!(
                "{ms:.0} ms to restore {} state rows and run",
                r.recovery_state_rows
            ),
            None => "not measured with the spilling backend, --group-by or --join".to_string(),
        }
    );
    write_json(args.json, &r)
}

fn duration_arg(name: &str, text: &str) -> anyhow::Result<std::time::Duration> {
    weir::common::config::parse_duration(text)
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{name}: '{text}' is not a duration such as 1s"))
}

fn write_json(path: Option<PathBuf>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(&path, serde_json::to_string_pretty(value)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn bench_backpressure(args: BackpressureArgs) -> anyhow::Result<()> {
    use weir::bench::backpressure::{BackpressureBenchOptions, run};
    anyhow::ensure!(args.parallelism > 0, "--parallelism must be positive");
    let options = BackpressureBenchOptions {
        run_time: duration_arg("run-time", &args.run_time)?,
        runs: args.runs,
        parallelism: args.parallelism,
        interval: duration_arg("interval", &args.interval)?,
        slow_per_row: std::time::Duration::from_micros(args.slow_us),
    };
    let r = run(&options)?;
    println!(
        "Backpressure: session aggregation slowed by {} µs a row, parallelism {}, checkpoints every {} ms, \
         {} runs of {:.0} s per mode (medians; duration and alignment over all checkpoints)",
        r.slow_per_row_us, r.parallelism, r.interval_ms, r.runs, r.run_seconds
    );
    println!(
        "{:<10} {:>12} {:>12} {:>18} {:>18} {:>15} {:>7}",
        "mode", "rows/s", "checkpoints", "duration med/p99", "alignment med/p99", "channel state", "failed"
    );
    for m in [&r.aligned, &r.unaligned] {
        println!(
            "{:<10} {:>12.0} {:>12} {:>8.0}/{:>6.0} ms {:>8.0}/{:>6.0} ms {:>12.1} kB {:>7}",
            m.mode,
            m.rows_per_second,
            m.checkpoints,
            m.duration_median_ms,
            m.duration_p99_ms,
            m.alignment_median_ms,
            m.alignment_p99_ms,
            m.channel_state_median_bytes / 1e3,
            m.failed
        );
    }
    write_json(args.json, &r)
}

fn bench_latency(args: LatencyArgs) -> anyhow::Result<()> {
    use weir::bench::latency::{Dialect, LatencyBenchOptions, job_sql, latencies, percentile, run};
    if let Some(dir) = args.read {
        let mut values = latencies(&dir)?;
        anyhow::ensure!(!values.is_empty(), "{}: no sampled rows", dir.display());
        values.sort_by(f64::total_cmp);
        println!(
            "{}: {} samples, p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms",
            dir.display(),
            values.len(),
            percentile(&values, 0.5),
            percentile(&values, 0.99),
            percentile(&values, 0.999),
            values[values.len() - 1]
        );
        return Ok(());
    }
    let rates = (args.rates.split(','))
        .map(|r| r.trim().parse::<u64>().ok().filter(|&r| r > 0))
        .collect::<Option<Vec<u64>>>()
        .with_context(|| format!("--rates: '{}' is not a list of positive numbers", args.rates))?;
    anyhow::ensure!(
        args.parallelism > 0 && args.keys > 0,
        "--parallelism and --keys must be positive"
    );
    let options = LatencyBenchOptions {
        rates,
        run_time: duration_arg("run-time", &args.run_time)?,
        runs: args.runs,
        parallelism: args.parallelism,
        interval: duration_arg("interval", &args.interval)?,
        buffer_timeout: duration_arg("buffer-timeout", &args.buffer_timeout)?,
        keys: args.keys,
    };
    if let Some(dir) = args.flink_sql {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for &rate in &options.rates {
            let rows = rate * options.run_time.as_secs().max(1);
            let path = dir.join(format!("latency-{rate}.sql"));
            let sql = job_sql(Dialect::Flink, rate, rows, options.keys, "${OUT}");
            std::fs::write(&path, format!("{sql};\n"))
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!(
                "/tmp/flinkenv/venv/bin/python ../shared/flink/run_sql.py {} -p {} --checkpoint-interval {}ms \\\n  \
                 --conf table.local-time-zone=UTC --conf execution.buffer-timeout={}ms \\\n  \
                 [--conf execution.checkpointing.unaligned.enabled=true] --var OUT=/tmp/flink-latency-{rate} \\\n  \
                 && weir bench latency --read /tmp/flink-latency-{rate}",
                path.display(),
                options.parallelism,
                options.interval.as_millis(),
                options.buffer_timeout.as_millis()
            );
        }
        return Ok(());
    }
    let results = run(&options)?;
    println!(
        "Latency source -> sink: keyed OVER aggregation over {} keys, parallelism {}, checkpoints every {} ms, \
         buffer-timeout {} ms, {} runs of {:.0} s (medians); 1 row in {} sampled",
        options.keys,
        options.parallelism,
        options.interval.as_millis(),
        options.buffer_timeout.as_millis(),
        options.runs,
        options.run_time.as_secs_f64(),
        weir::bench::latency::SAMPLE
    );
    println!(
        "{:>10} {:<10} {:>12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "rate", "mode", "achieved/s", "samples", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "chk"
    );
    for r in &results {
        println!(
            "{:>10} {:<10} {:>12.0} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>6}",
            r.rate, r.mode, r.achieved, r.samples, r.p50_ms, r.p99_ms, r.p999_ms, r.max_ms, r.checkpoints
        );
    }
    write_json(args.json, &results)
}

/// A broker for the benchmark: the one given, or one started with
/// `scripts/kafka.sh` (stopped when this process ends).
fn kafka_broker(given: Option<String>) -> anyhow::Result<String> {
    if let Some(bootstrap) = given.or_else(|| std::env::var("WEIR_KAFKA_BOOTSTRAP").ok()) {
        return Ok(bootstrap);
    }
    let script = std::path::Path::new("scripts/kafka.sh");
    anyhow::ensure!(
        script.exists(),
        "no --bootstrap, and no scripts/kafka.sh here to start a broker: run from the repository"
    );
    let dir = std::env::temp_dir().join(format!("weir-bench-kafka-{}", std::process::id()));
    let output = std::process::Command::new(script)
        .arg("start")
        .arg(&dir)
        .env("WEIR_KAFKA_WATCH", std::process::id().to_string())
        .output()
        .context("cannot run scripts/kafka.sh")?;
    anyhow::ensure!(
        output.status.success(),
        "the Kafka broker did not start: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}

fn bench_kafka(args: KafkaArgs) -> anyhow::Result<()> {
    use weir::bench::kafka::{KafkaBenchOptions, fill, input_topic, job_sql, run};
    anyhow::ensure!(
        args.parallelism > 0 && args.partitions > 0,
        "--parallelism and --partitions must be positive"
    );
    anyhow::ensure!(
        args.records > 0 && args.keys > 0,
        "--records and --keys must be positive"
    );
    let options = KafkaBenchOptions {
        bootstrap: kafka_broker(args.bootstrap)?,
        records: args.records,
        partitions: args.partitions,
        keys: args.keys,
        parallelism: args.parallelism,
        interval: duration_arg("interval", &args.interval)?,
        runs: args.runs,
    };
    let filled = fill(&options)?;
    println!(
        "broker {}, topic {} ({} JSON records, {} partitions{})",
        options.bootstrap,
        input_topic(&options),
        options.records,
        options.partitions,
        if filled > 0.0 {
            format!(", filled in {filled:.1} s")
        } else {
            ", reused".to_string()
        }
    );
    if let Some(path) = &args.flink_sql {
        let sql = format!(
            "SET 'table.local-time-zone' = 'UTC';\n{};\n",
            job_sql(&options, "flink-out", "exactly-once", "flink-bench")
        );
        std::fs::write(path, sql).with_context(|| format!("cannot write {}", path.display()))?;
        println!("Flink's job written to {}", path.display());
    }
    let r = run(&options)?;
    println!(
        "Kafka to Kafka, 1-second tumbling windows over {} keys, parallelism {}, checkpoints every {} ms, median of {} runs\n\
         at-least-once   {:.2}M events/s\n\
         exactly-once    {:.2}M events/s\n\
         checkpoints     {} (exactly-once runs), duration median / p99 {:.0} ms / {:.0} ms",
        options.keys,
        r.parallelism,
        r.interval_ms,
        r.runs,
        r.at_least_once_per_second / 1e6,
        r.exactly_once_per_second / 1e6,
        r.checkpoints,
        r.checkpoint_median_ms,
        r.checkpoint_p99_ms
    );
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&r)?)?;
    }
    Ok(())
}

fn bench_restore(args: RestoreArgs) -> anyhow::Result<()> {
    use weir::bench::restore::{RestoreBenchOptions, run};
    anyhow::ensure!(
        args.parallelism > 0 && args.rescaled > 0,
        "--parallelism and --rescaled must be positive"
    );
    let keys = args
        .keys
        .split(',')
        .map(|k| {
            k.trim()
                .parse::<u64>()
                .with_context(|| format!("--keys: '{k}' is not a number"))
        })
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let options = RestoreBenchOptions {
        keys,
        parallelism: args.parallelism,
        rescaled: args.rescaled,
        runs: args.runs,
    };
    let r = run(&options)?;
    println!(
        "Restore from a savepoint taken at parallelism {} (median of {} restores each)",
        r.parallelism, r.runs
    );
    println!(
        "{:>12} {:>12} {:>16} {:>16}",
        "keys",
        "state MB",
        format!("at {} (ms)", r.parallelism),
        format!("at {} (ms)", r.rescaled)
    );
    for s in &r.sizes {
        println!(
            "{:>12} {:>12.1} {:>16.0} {:>16.0}",
            s.keys,
            s.state_bytes as f64 / 1e6,
            s.same_parallelism_ms,
            s.rescaled_ms
        );
    }
    write_json(args.json, &r)
}

fn bench_nexmark(args: NexmarkArgs) -> anyhow::Result<()> {
    use weir::bench::{self, NexmarkOptions};
    let NexmarkArgs {
        queries,
        events,
        parallelism,
        rate,
        event_rate,
        checkpoint_interval,
        json,
        output_dir,
    } = args;
    let checkpoint_interval = checkpoint_interval
        .map(|text| duration_arg("checkpoint-interval", &text))
        .transpose()?;
    anyhow::ensure!(parallelism > 0, "--parallelism must be positive");
    anyhow::ensure!(events > 0, "--events must be positive");
    let queries: Vec<String> = if queries == "all" {
        bench::QUERIES.iter().map(|(name, _)| name.to_string()).collect()
    } else {
        queries
            .split(',')
            .map(|q| q.trim().to_lowercase())
            .filter(|q| !q.is_empty())
            .collect()
    };
    let options = NexmarkOptions {
        queries,
        events,
        parallelism,
        event_rate,
        rate_limit: rate,
        output_dir,
        checkpoint_interval,
    };
    let bar = indicatif::ProgressBar::new(events);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} events {per_sec} {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut current = String::new();
    let results = bench::run(&options, &mut |name, progress| {
        if current != name {
            current = name.to_string();
            bar.reset();
            bar.set_prefix(name.to_string());
        }
        bar.set_position(progress.done.min(progress.total));
    })?;
    bar.finish_and_clear();
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec![
        "query",
        "events",
        "wall s",
        "events/s",
        "events/s/core",
        "output rows",
        "peak RSS",
        "vs generator",
    ];
    if checkpoint_interval.is_some() {
        header.extend(["checkpoints", "median ckpt", "max state"]);
    }
    table.set_header(header);
    let mut not_run = Vec::new();
    for r in &results {
        if r.status != "finished" {
            not_run.push(format!("{}: {}", r.query, r.status));
            continue;
        }
        let mut row = vec![
            r.query.clone(),
            r.events.to_string(),
            format!("{:.2}", r.wall_seconds),
            format!("{:.2}M", r.events_per_second / 1e6),
            format!("{:.2}M", r.events_per_second_per_core / 1e6),
            r.output_rows.to_string(),
            format!("{} MB", r.peak_rss_bytes / (1 << 20)),
            r.fraction_of_generator
                .map_or("-".into(), |f| format!("{:.0}%", f * 100.0)),
        ];
        if checkpoint_interval.is_some() {
            row.extend([
                r.checkpoints.to_string(),
                r.checkpoint_median_ms
                    .map_or("-".into(), |ms| format!("{ms:.0} ms")),
                r.checkpoint_max_state_bytes
                    .map_or("-".into(), |b| format!("{:.1} MB", b as f64 / 1e6)),
            ]);
        }
        table.add_row(row);
    }
    println!(
        "Nexmark, {events} events per query, parallelism {parallelism}, {} cores\n{table}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for line in not_run {
        println!("{line}");
    }
    write_json(json, &results)
}

fn print_result(result: weir::TableResult) -> anyhow::Result<()> {
    let mut rows = 0;
    for batch in result.stream() {
        let batch = batch?;
        rows += batch.num_rows();
        let batch = weir::common::changelog::with_kind_column(&batch)?;
        println!("{}", arrow::util::pretty::pretty_format_batches(&[batch])?);
    }
    if rows > 0 {
        eprintln!("[INFO] {rows} row(s).");
    }
    Ok(())
}

/// Moves a statement-relative SQL position to file coordinates.
fn shift_position(e: Error, start: weir::common::error::Position) -> Error {
    match e {
        Error::Sql {
            message,
            position: Some(p),
        } => {
            let column = if p.line == 1 {
                p.column + start.column - 1
            } else {
                p.column
            };
            Error::sql_at(
                message,
                Some(weir::common::error::Position {
                    line: p.line + start.line - 1,
                    column,
                }),
            )
        }
        other => other,
    }
}

/// An error with the file, line and a caret under the column, when known.
fn located(e: Error, file: &Path, sql: &str) -> anyhow::Error {
    if let Error::Sql {
        message,
        position: Some(p),
    } = &e
    {
        let line_text = sql.lines().nth(p.line as usize - 1).unwrap_or_default();
        let caret = format!("{}^", " ".repeat(p.column.saturating_sub(1) as usize));
        return anyhow::anyhow!(
            "{}:{}:{}: SQL error: {message}\n  {line_text}\n  {caret}",
            file.display(),
            p.line,
            p.column
        );
    }
    anyhow::Error::new(e)
}
