//! Deploying one attempt of a job: channels, subtasks (restored from a
//! checkpoint when there is one), the checkpoint coordinator, and threads.
//!
//! Every operator instance and source reader is created before any thread
//! starts, so a setup error (a missing file, an unwritable directory, a
//! checkpoint that does not fit the query) fails the attempt before it runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crossbeam_channel::{Receiver, Sender};

use crate::driver::DriverTask;
use crate::execution::{ExecutionGraph, ExecutionVertex};
use crate::placement::Placement;
use crate::rescale::{assign_splits, keyed_sources, overlaps, round_robin_sources};
use crate::settings::{JobSettings, RestoredCheckpoint, TaskInfo};
use crate::{Error, Result};
use weir_common::config::StateBackend;
use weir_common::config::checkpoint::CheckpointConfig;
use weir_common::key_group::key_group_range;
use weir_runtime::control::{SnapshotFence, TaskCheckpointing, TaskControl, TaskReport};
use weir_runtime::exchange::{Exchange, ExchangeWriter, PriorityBarrier};
use weir_runtime::incremental::{Compactor, StateChain};
use weir_runtime::input::{InputChannel, InputGate};
use weir_runtime::message::Message;
use weir_runtime::operator::{
    Operator, OperatorFactory, OperatorSnapshot, SpillSettings, TaskContext, TaskMetrics,
};
use weir_runtime::source::SourceReader;
use weir_runtime::task::{Replay, Task, TaskInput};
use weir_runtime::transport::{ChannelId, SendEnd};
use weir_state::checkpoint::metadata::{ChannelSide, OperatorState, TaskState};
use weir_state::checkpoint::storage::run_dir;
use weir_state::incremental::combine;
use weir_state::snapshot::{read_batches, read_state_file};

/// What the checkpoint coordinator of an attempt needs.
pub struct DriverParts {
    /// Settings.
    pub config: CheckpointConfig,
    /// `<checkpoint dir>/<job name>/<job id>`.
    pub run_dir: PathBuf,
    /// Shared with the attempt's snapshot writers.
    pub fence: Arc<SnapshotFence>,
    /// One line per task built here, in task index order (as
    /// [`Attempt::task_indexes`]).
    pub tasks: Vec<DriverTask>,
    /// Reports from the tasks.
    pub reports: Receiver<TaskReport>,
}

/// One attempt of a job, built and not yet running.
pub struct Attempt {
    /// Its subtasks.
    pub tasks: Vec<Task>,
    /// Their names and counters.
    pub infos: Vec<TaskInfo>,
    /// The job-wide task index of each of `tasks` (all of them, `0..n`,
    /// when every subtask runs here).
    pub task_indexes: Vec<usize>,
    /// The coordinator's parts, when checkpoints are on.
    pub driver: Option<DriverParts>,
    /// Set to stop every task of the attempt.
    pub cancel: Arc<AtomicBool>,
    /// Key groups of the job.
    pub max_parallelism: usize,
    /// Which attempt, 0 first.
    pub number: u32,
}

/// Checks that every piece of state in the checkpoint has an owner in the
/// job (Flink refuses savepoint state it cannot map, rather than drop it).
fn check_every_state_is_claimed(
    restored: &RestoredCheckpoint,
    uids: &[(Option<String>, Vec<String>)],
) -> Result<()> {
    let known: std::collections::HashSet<&str> = uids
        .iter()
        .flat_map(|(source, operators)| source.iter().chain(operators).map(String::as_str))
        .collect();
    for task in &restored.metadata.tasks {
        let ids = task
            .source_id
            .iter()
            .chain(task.operators.iter().map(|o| &o.operator_id));
        for id in ids {
            if !known.contains(id.as_str()) {
                let mut all: Vec<&str> = known.iter().copied().collect();
                all.sort();
                return Err(Error::State(format!(
                    "checkpoint {} holds state of operator '{id}', which this job does not have \
                     (its operators: {}); was the query changed?",
                    restored.dir.display(),
                    all.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// The saved subtasks holding state of operator (or source) `id`, by subtask,
/// checked to form one parallelism.
fn saved_subtasks<'a>(
    restored: &'a RestoredCheckpoint,
    id: &str,
    holds: impl Fn(&TaskState) -> bool,
) -> Result<Vec<&'a TaskState>> {
    let mut old: Vec<&TaskState> = restored.metadata.tasks.iter().filter(|t| holds(t)).collect();
    old.sort_by_key(|t| t.subtask);
    if let Some(first) = old.first()
        && (old.iter().any(|t| t.parallelism != first.parallelism)
            || old.iter().enumerate().any(|(i, t)| t.subtask != i)
            || old.len() != first.parallelism)
    {
        return Err(Error::State(format!(
            "checkpoint {}: the saved subtasks of '{id}' do not form one parallelism",
            restored.dir.display()
        )));
    }
    Ok(old)
}

/// With incremental checkpoints: a state chain for each chained operator
/// that writes deltas (compacted by a fresh operator of the same factory).
fn state_chains(
    vertex: &ExecutionVertex,
    chain: &[Box<dyn Operator>],
    operator_ids: &[String],
    run_dir: Option<&std::path::Path>,
    settings: &JobSettings,
    ctx: &TaskContext,
) -> Vec<Option<StateChain>> {
    let (Some(run_dir), Some(config)) = (run_dir, settings.checkpoint.as_ref().filter(|c| c.incremental))
    else {
        return Vec::new();
    };
    chain
        .iter()
        .zip(&vertex.operators)
        .zip(operator_ids)
        .map(|((operator, factory), operator_id)| {
            let kind = operator.delta_kind()?;
            let spilled = ctx.spill.is_some() && factory.can_spill();
            let (subtask, attempt) = (ctx.subtask, ctx.attempt);
            let (factory, ctx) = (factory.clone(), ctx.clone());
            let compactor: Compactor = Arc::new(move || factory.create(&ctx));
            Some(StateChain::new(
                operator_id,
                kind,
                run_dir,
                subtask,
                attempt,
                config.max_deltas,
                compactor,
                spilled,
            ))
        })
        .collect()
}

/// What subtask `task` saved of operator `uid`.
fn operator_state<'a>(task: &'a TaskState, uid: &str) -> Option<&'a OperatorState> {
    task.operators.iter().find(|o| o.operator_id == uid)
}

/// Restores a source reader and the chained operators of subtask
/// `ctx.subtask` of vertex `vertex` from a checkpoint taken at this or another
/// parallelism (see [`crate::rescale`]): state is found by
/// operator id, source splits go to `split % parallelism`, keyed state by key
/// group, other state round robin.
#[allow(clippy::too_many_arguments)]
pub fn restore_task(
    restored: &RestoredCheckpoint,
    vertex: usize,
    name: &str,
    idle_subtasks: bool,
    reader: Option<&mut Box<dyn SourceReader>>,
    chain: &mut [Box<dyn Operator>],
    uids: &(Option<String>, Vec<String>),
    ctx: &TaskContext,
) -> Result<Vec<Replay>> {
    let (source_uid, operator_uids) = uids;
    let same_vertex: Vec<&TaskState> = restored
        .metadata
        .tasks
        .iter()
        .filter(|t| t.vertex == vertex)
        .collect();
    let replay = channel_state(restored, &same_vertex, ctx, name)?;
    if let (Some(reader), Some(uid)) = (reader, source_uid) {
        let old = saved_subtasks(restored, uid, |t| t.source_id.as_deref() == Some(uid.as_str()))?;
        let positions: Vec<&serde_json::Value> = old.iter().filter_map(|t| t.source.as_ref()).collect();
        if !positions.is_empty() {
            let mine = assign_splits(&positions, ctx.subtask, ctx.parallelism, name, idle_subtasks)?;
            reader.restore_position(&mine).map_err(|e| {
                Error::State(format!(
                    "checkpoint {}: source position of subtask {}: {e}",
                    restored.dir.display(),
                    ctx.subtask
                ))
            })?;
        }
    }
    let range = key_group_range(ctx.subtask, ctx.parallelism, ctx.max_parallelism);
    for (index, uid) in operator_uids.iter().enumerate() {
        let old = saved_subtasks(restored, uid, |t| operator_state(t, uid).is_some())?;
        let Some(first) = old.first() else { continue };
        let old_parallelism = first.parallelism;

        let expected = chain[index].state_signature()?;
        let saved_signature = old
            .iter()
            .find_map(|t| operator_state(t, uid))
            .and_then(|o| o.signature.clone());
        if let (Some(expected), Some(saved)) = (&expected, &saved_signature)
            && expected != saved
        {
            return Err(Error::State(format!(
                "checkpoint {}: the state of operator '{uid}' ({}) does not match this query: \
                 saved [{saved}], the query's [{expected}]; was the query changed (keys or aggregates)?",
                restored.dir.display(),
                chain[index].name()
            )));
        }
        // Keyed state: the rows of this subtask's key groups; per-subtask
        // state: all rows of the old subtasks it takes over, whatever key
        // group they carry.
        let (sources, wanted) = if chain[index].is_keyed() {
            let sources = keyed_sources(old_parallelism, ctx.subtask, ctx.parallelism, ctx.max_parallelism);
            (sources, range.clone())
        } else {
            let sources = round_robin_sources(old_parallelism, ctx.subtask, ctx.parallelism);
            (sources, 0..=usize::MAX)
        };
        let saved: Vec<&OperatorState> = (sources.iter())
            .filter_map(|k| operator_state(old[*k], uid))
            .collect();
        let bytes = (saved.iter())
            .flat_map(|s| s.files())
            .filter(|f| overlaps(&(f.key_groups.0..=f.key_groups.1), &wanted))
            .map(|f| f.bytes)
            .sum();
        let ranges = match chain[index].is_keyed() {
            true => restore_ranges(&wanted, bytes, ctx.spill.as_ref()),
            false => vec![wanted],
        };
        for range in ranges {
            let snapshots = (saved.iter())
                .map(|saved| saved_snapshot(restored, saved, &range))
                .collect::<Result<Vec<_>>>()?;
            chain[index].restore_rescaled(snapshots)?;
        }
    }
    Ok(replay)
}

/// One old subtask's snapshot of an operator, its rows of key groups `range`
/// (its chain combined).
fn saved_snapshot(
    restored: &RestoredCheckpoint,
    saved: &OperatorState,
    range: &std::ops::RangeInclusive<usize>,
) -> Result<OperatorSnapshot> {
    let mut files = Vec::new();
    for file in saved.files() {
        if overlaps(&(file.key_groups.0..=file.key_groups.1), range) {
            files.extend(read_state_file(&restored.dir.join(&file.path), range)?);
        }
    }
    Ok(OperatorSnapshot {
        meta: saved.meta.clone(),
        rows: combine(saved.delta_kind, files)?,
        ..OperatorSnapshot::default()
    })
}

/// The key-group ranges of `wanted` a restore of keyed state of `bytes`
/// (its files' sizes) reads and hands over one at a time. Under the
/// spilling backend every keyed operator adds what each range restores to
/// its state and spills as it goes, so a range holds about a 32nd of its
/// share in file bytes (rows take several times their Parquet bytes in
/// memory; at least 1 MB, as a range reads whole row groups) and a restore
/// of state larger than the budget stays within it; on the heap all at once.
fn restore_ranges(
    wanted: &std::ops::RangeInclusive<usize>,
    bytes: u64,
    spill: Option<&SpillSettings>,
) -> Vec<std::ops::RangeInclusive<usize>> {
    let Some(spill) = spill else {
        return vec![wanted.clone()];
    };
    let (first, last) = (*wanted.start(), *wanted.end());
    if first > last || last > u32::MAX as usize {
        return vec![wanted.clone()];
    }
    let ends = weir_state::runs::bucket_bounds(
        first as u32,
        last as u32,
        bytes,
        (spill.budget / 32).max(1 << 20) as u64,
    );
    let mut start = first;
    ends.into_iter()
        .map(|end| {
            let range = start..=(end as usize - 1);
            start = end as usize;
            range
        })
        .collect()
}

/// The spilling backend's settings for each operator subtask that spills:
/// the process's budget shared evenly by them (`None` on the heap).
fn spill_settings(graph: &ExecutionGraph, backend: &StateBackend) -> Option<SpillSettings> {
    let StateBackend::Spilling { budget, dir } = backend else {
        return None;
    };
    weir_state::local_dir::remove_stale(dir);
    let spilling: usize = graph
        .vertices
        .iter()
        .map(|v| v.parallelism * v.operators.iter().filter(|f| f.can_spill()).count())
        .sum();
    Some(SpillSettings {
        budget: (*budget / spilling.max(1) as u64) as usize,
        dir: dir.clone(),
    })
}

/// The spilling backend keeps only the state of operators that can spill
/// within its budget: another keyed operator would keep its state on the
/// heap, beyond the budget, so the job is refused, naming it.
fn refuse_heap_state(factories: &[Arc<dyn OperatorFactory>], chain: &[Box<dyn Operator>]) -> Result<()> {
    for (factory, operator) in factories.iter().zip(chain) {
        if operator.is_keyed() && !factory.can_spill() {
            return Err(Error::Plan(format!(
                "'state.backend.type' = 'spilling' keeps only aggregations (window aggregations: \
                 TUMBLE, HOP, CUMULATE, SESSION; non-windowed GROUP BY; OVER), regular, interval, \
                 temporal and window joins, TopN, deduplication, sink materializers and changelog \
                 normalization within 'taskmanager.memory.managed.size', but {} keeps its state on \
                 the heap; use 'hashmap' for this job",
                operator.name()
            )));
        }
    }
    Ok(())
}

/// The in-flight records an unaligned checkpoint saved for this subtask, to
/// replay first. Only at the checkpoint's parallelism: records cannot be
/// given back to the right subtasks of another one.
fn channel_state(
    restored: &RestoredCheckpoint,
    old: &[&TaskState],
    ctx: &TaskContext,
    name: &str,
) -> Result<Vec<Replay>> {
    if old.iter().all(|t| t.channel_state.is_empty()) {
        return Ok(Vec::new());
    }
    if old.len() != ctx.parallelism {
        return Err(Error::State(format!(
            "checkpoint {} is unaligned and holds in-flight records of {name}, which cannot be \
             restored at another parallelism ({} then, {} now); restore it at {}, or take a savepoint \
             (always aligned) and rescale from that",
            restored.dir.display(),
            old.len(),
            ctx.parallelism,
            old.len()
        )));
    }
    let mut replay = Vec::new();
    for file in &old[ctx.subtask].channel_state {
        for batch in read_batches(&restored.dir.join(&file.path))? {
            replay.push(match file.side {
                ChannelSide::Output => Replay::Output {
                    writer: file.index,
                    batch,
                },
                ChannelSide::Input => Replay::Input {
                    input: file.index,
                    batch,
                },
            });
        }
    }
    // Queued output goes out before the input is processed.
    replay.sort_by_key(|r| matches!(r, Replay::Input { .. }));
    Ok(replay)
}

/// Drops the in-flight records a restore reads again from a source anyway:
/// all output of a replayed source's chain, and the inputs the chain's
/// first operator says are replayed (a lookup or broadcast join's table).
fn drop_replayed(vertex: &ExecutionVertex, replay: &mut Vec<Replay>) {
    let replayed_source = vertex.source.as_ref().is_some_and(|s| s.is_replayed());
    let replayed_inputs = vertex
        .operators
        .first()
        .map(|o| o.replayed_inputs())
        .unwrap_or_default();
    replay.retain(|r| match r {
        Replay::Output { .. } => !replayed_source,
        Replay::Input { input, .. } => !replayed_inputs.contains(input),
    });
}

/// What each subtask sends on: per edge out of it, one sender per target
/// channel, and with unaligned checkpoints a barrier lane beside each.
type EdgeSenders = Vec<(usize, Vec<Sender<Message>>, Vec<Sender<PriorityBarrier>>)>;

/// An attempt's channels, made by the job's transport, by vertex and subtask.
struct Channels {
    senders: Vec<Vec<EdgeSenders>>,
    receivers: Vec<Vec<Vec<InputChannel>>>,
}

/// The upstream and downstream subtasks each channel of `exchange` joins.
fn channel_pairs(exchange: &Exchange, up: usize, down: usize) -> Result<Vec<(usize, usize)>> {
    Ok(match exchange {
        Exchange::Forward => {
            if up != down {
                return Err(Error::Internal(format!(
                    "forward edge between parallelism {up} and {down}"
                )));
            }
            (0..up).map(|i| (i, i)).collect()
        }
        Exchange::Single => {
            if down != 1 {
                return Err(Error::Internal("single edge into parallelism > 1".into()));
            }
            (0..up).map(|i| (i, 0)).collect()
        }
        _ => (0..up).flat_map(|i| (0..down).map(move |j| (i, j))).collect(),
    })
}

/// The ends of every channel of `graph` that a subtask placed here holds,
/// made by `settings.transport`: both ends of a channel within this
/// process, one end of a channel to or from another.
fn connect(graph: &ExecutionGraph, settings: &JobSettings, placement: &Placement) -> Result<Channels> {
    let unaligned = settings.checkpoint.as_ref().is_some_and(|c| c.unaligned);
    let per_subtask = |v: &ExecutionVertex| v.parallelism;
    let mut channels = Channels {
        senders: graph
            .vertices
            .iter()
            .map(|v| vec![Vec::new(); per_subtask(v)])
            .collect(),
        receivers: graph
            .vertices
            .iter()
            .map(|v| (0..per_subtask(v)).map(|_| Vec::new()).collect())
            .collect(),
    };
    for (edge_index, edge) in graph.edges.iter().enumerate() {
        let up = graph.vertices[edge.from].parallelism;
        let down = graph.vertices[edge.to].parallelism;
        for (i, j) in channel_pairs(&edge.exchange, up, down)? {
            let id = ChannelId {
                edge: edge_index,
                from: i,
                to: j,
            };
            let (capacity, transport) = (settings.channel_capacity, &settings.transport);
            let (send, receive) = match (placement.is_here(edge.from, i), placement.is_here(edge.to, j)) {
                (true, true) => {
                    let (send, receive) = transport.channel(id, capacity, unaligned)?;
                    (Some(send), Some(receive))
                }
                (true, false) => (Some(transport.send_end(id, capacity, unaligned)?), None),
                (false, true) => {
                    let upstream = placement.host(edge.from, i);
                    (
                        None,
                        Some(transport.receive_end(id, upstream, capacity, unaligned)?),
                    )
                }
                (false, false) => (None, None),
            };
            if let Some(send) = send {
                add_sender(&mut channels.senders[edge.from][i], edge_index, send);
            }
            if let Some(receive) = receive {
                let mut channel = InputChannel::new(receive.data, edge.to_input);
                if let Some(lane) = receive.lane {
                    channel = channel.with_priority_lane(lane);
                }
                channels.receivers[edge.to][j].push(channel);
            }
        }
    }
    Ok(channels)
}

/// Adds a channel's sending end to a subtask's senders of edge `edge_index`.
fn add_sender(slot: &mut EdgeSenders, edge_index: usize, send: SendEnd) {
    let index = match slot.iter().position(|(e, _, _)| *e == edge_index) {
        Some(index) => index,
        None => {
            slot.push((edge_index, Vec::new(), Vec::new()));
            slot.len() - 1
        }
    };
    slot[index].1.push(send.data);
    slot[index].2.extend(send.lane);
}

/// What every subtask of one attempt shares.
struct AttemptParts<'a> {
    graph: &'a ExecutionGraph,
    settings: &'a JobSettings,
    restore: Option<&'a RestoredCheckpoint>,
    uids: Vec<(Option<String>, Vec<String>)>,
    job_dir: Option<PathBuf>,
    spill: Option<SpillSettings>,
    cancel: Arc<AtomicBool>,
    fence: Arc<SnapshotFence>,
    reports: Sender<TaskReport>,
    attempt: u32,
}

/// Builds every subtask of attempt `attempt` (0 first) of `graph`, restored
/// from `restore` when given; `metrics` are reused (by task index) so
/// counters add up across attempts.
pub fn build_attempt(
    graph: &ExecutionGraph,
    settings: &JobSettings,
    restore: Option<&RestoredCheckpoint>,
    metrics: &[Arc<TaskMetrics>],
    attempt: u32,
) -> Result<Attempt> {
    let parallelisms: Vec<usize> = graph.vertices.iter().map(|v| v.parallelism).collect();
    let placement = Placement::local(&parallelisms);
    build_attempt_part(graph, settings, restore, metrics, attempt, &placement)
}

/// Builds the subtasks of attempt `attempt` of `graph` that `placement`
/// puts here; channels to and from subtasks elsewhere come from the
/// transport's remote ends. Checkpoints need every subtask here until the
/// coordinator reaches other processes.
pub fn build_attempt_part(
    graph: &ExecutionGraph,
    settings: &JobSettings,
    restore: Option<&RestoredCheckpoint>,
    metrics: &[Arc<TaskMetrics>],
    attempt: u32,
    placement: &Placement,
) -> Result<Attempt> {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut channels = connect(graph, settings, placement)?;
    let uids: Vec<(Option<String>, Vec<String>)> = graph.vertices.iter().map(|v| v.uids.clone()).collect();
    if let Some(restored) = restore {
        check_every_state_is_claimed(restored, &uids)?;
    }
    let job_dir = settings
        .checkpoint
        .as_ref()
        .map(|c| run_dir(&c.dir, &settings.name, &settings.job_id));
    if let Some(dir) = &job_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let (report_sender, report_receiver) = crossbeam_channel::unbounded();
    let parts = AttemptParts {
        graph,
        settings,
        restore,
        uids,
        job_dir,
        spill: spill_settings(graph, &settings.state_backend),
        cancel: cancel.clone(),
        fence: Arc::new(SnapshotFence::new(cancel.clone())),
        reports: report_sender,
        attempt,
    };
    let mut driver_tasks = Vec::new();
    let mut task_indexes = Vec::new();
    let mut tasks = Vec::new();
    let mut first_task = 0;
    let mut infos = Vec::new();
    for (vertex_index, vertex) in graph.vertices.iter().enumerate() {
        if settings.checkpoint.is_some() && vertex.source.as_ref().is_some_and(|s| !s.supports_checkpoints())
        {
            return Err(Error::Plan(format!(
                "checkpoints are on, but {} cannot checkpoint its position yet",
                vertex.nodes[0]
            )));
        }
        for subtask in (0..vertex.parallelism).filter(|s| placement.is_here(vertex_index, *s)) {
            let metrics = metrics
                .get(tasks.len())
                .cloned()
                .unwrap_or_else(|| Arc::new(TaskMetrics::default()));
            let (task, info) = build_subtask(
                &parts,
                (vertex_index, subtask, first_task + subtask),
                metrics,
                &mut channels,
                &mut driver_tasks,
            )?;
            tasks.push(task);
            infos.push(info);
            task_indexes.push(first_task + subtask);
        }
        first_task += vertex.parallelism;
    }
    let AttemptParts { job_dir, fence, .. } = parts;
    let driver = match (&settings.checkpoint, job_dir) {
        (Some(config), Some(run_dir)) => Some(DriverParts {
            config: config.clone(),
            run_dir,
            fence,
            tasks: driver_tasks,
            reports: report_receiver,
        }),
        _ => None,
    };
    Ok(Attempt {
        tasks,
        infos,
        task_indexes,
        driver,
        cancel,
        max_parallelism: settings.max_parallelism,
        number: attempt,
    })
}

/// Builds subtask `subtask` of vertex `vertex_index`, task number
/// `task_index` of the attempt: its reader or input gate, its chain
/// (restored), its outputs, and its line to the checkpoint coordinator.
fn build_subtask(
    parts: &AttemptParts,
    (vertex_index, subtask, task_index): (usize, usize, usize),
    metrics: Arc<TaskMetrics>,
    channels: &mut Channels,
    driver_tasks: &mut Vec<DriverTask>,
) -> Result<(Task, TaskInfo)> {
    let (graph, settings) = (parts.graph, parts.settings);
    let vertex = &graph.vertices[vertex_index];
    let vertex_uids = &parts.uids[vertex_index];
    let ctx = TaskContext {
        subtask,
        parallelism: vertex.parallelism,
        max_parallelism: settings.max_parallelism,
        batch_size: settings.batch_size,
        metrics: metrics.clone(),
        cancel: parts.cancel.clone(),
        checkpointing: settings.checkpoint.is_some(),
        job_id: settings.job_id.clone(),
        attempt: parts.attempt,
        incremental: settings.checkpoint.as_ref().is_some_and(|c| c.incremental),
        spill: parts.spill.clone(),
    };
    let vertex_name = vertex.name();
    let name = format!("{vertex_name} ({}/{})", subtask + 1, vertex.parallelism);
    let mut reader = match &vertex.source {
        Some(source) => Some(source.create_reader(&ctx)?),
        None => None,
    };
    let mut chain = vertex
        .operators
        .iter()
        .map(|factory| factory.create(&ctx))
        .collect::<Result<Vec<_>>>()?;
    if parts.spill.is_some() {
        refuse_heap_state(&vertex.operators, &chain)?;
    }
    if settings.checkpoint.is_some()
        && let Some(operator) = chain.iter().find(|op| !op.supports_checkpoints())
    {
        return Err(Error::Plan(format!(
            "checkpoints are on, but operator {} cannot checkpoint its state yet",
            operator.name()
        )));
    }
    let mut replay = Vec::new();
    if let Some(restored) = parts.restore {
        replay = restore_task(
            restored,
            vertex_index,
            &vertex_name,
            vertex.source.as_ref().is_some_and(|s| s.allows_idle_subtasks()),
            reader.as_mut(),
            &mut chain,
            vertex_uids,
            &ctx,
        )?;
        drop_replayed(vertex, &mut replay);
    }
    let checkpoint = settings.checkpoint.as_ref();
    let input = match reader {
        Some(reader) => TaskInput::Source(reader),
        None => TaskInput::Channels(Box::new(
            InputGate::with_mode(
                std::mem::take(&mut channels.receivers[vertex_index][subtask]),
                checkpoint.map(|c| c.mode).unwrap_or_default(),
            )
            .with_aligned_timeout(checkpoint.map(|c| c.aligned_timeout).unwrap_or_default()),
        )),
    };
    let outputs = std::mem::take(&mut channels.senders[vertex_index][subtask])
        .into_iter()
        .map(|(edge_index, txs, lanes)| {
            ExchangeWriter::new(graph.edges[edge_index].exchange.clone(), txs, lanes, &ctx)
        })
        .collect();
    let checkpointing = parts.job_dir.as_ref().map(|dir| {
        let (control_sender, control) = crossbeam_channel::unbounded::<TaskControl>();
        driver_tasks.push(DriverTask {
            control: control_sender,
            is_source: vertex.source.is_some(),
        });
        TaskCheckpointing {
            task: task_index,
            vertex: vertex_index,
            subtask,
            parallelism: vertex.parallelism,
            operator_ids: vertex_uids.1.clone(),
            source_id: vertex_uids.0.clone(),
            run_dir: dir.clone(),
            fence: parts.fence.clone(),
            job_id: settings.job_id.clone(),
            savepoint_root: checkpoint.map(|c| c.savepoint_dir.clone()).unwrap_or_default(),
            job_name: settings.name.clone(),
            control,
            reports: parts.reports.clone(),
        }
    });
    let chains = state_chains(
        vertex,
        &chain,
        &vertex_uids.1,
        parts.job_dir.as_deref(),
        settings,
        &ctx,
    );
    let info = TaskInfo {
        name: name.clone(),
        metrics: metrics.clone(),
        is_source: vertex.source.is_some(),
    };
    let task = Task {
        name,
        input: Some(input),
        chain,
        outputs,
        metrics,
        cancel: parts.cancel.clone(),
        checkpointing,
        paused: false,
        replay,
        pending_snapshots: Vec::new(),
        last_snapshot: None,
        chains,
        idleness: weir_runtime::task::Idleness::new(
            vertex
                .source
                .as_ref()
                .and_then(|s| s.idle_timeout())
                .or(settings.source_idle_timeout),
        ),
    };
    Ok((task, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill(budget: usize) -> SpillSettings {
        SpillSettings {
            budget,
            dir: PathBuf::from("/unused"),
        }
    }

    #[test]
    fn a_spilled_restore_reads_key_group_ranges_of_a_32nd_of_the_share_that_cover_its_own() {
        let ranges = restore_ranges(&(32..=63), 40 << 20, Some(&spill(256 << 20)));
        assert_eq!(ranges, vec![32..=37, 38..=43, 44..=50, 51..=56, 57..=63]);
        assert_eq!(
            restore_ranges(&(32..=63), 1 << 20, Some(&spill(256 << 20))),
            vec![32..=63]
        );
        let one_each = restore_ranges(&(0..=3), 1 << 40, Some(&spill(1 << 20)));
        assert_eq!(
            one_each,
            vec![0..=0, 1..=1, 2..=2, 3..=3],
            "at most a range per key group"
        );
    }

    #[test]
    fn a_restore_on_the_heap_reads_all_at_once() {
        assert_eq!(restore_ranges(&(0..=127), 1 << 40, None), vec![0..=127]);
    }

    /// A keyed operator without a spilling backend (every one weir plans has one).
    #[derive(Debug)]
    struct HeapOnly;

    impl Operator for HeapOnly {
        fn name(&self) -> String {
            "HeapOnly".into()
        }

        fn process_batch(
            &mut self,
            _: usize,
            _: arrow::record_batch::RecordBatch,
            _: &mut weir_runtime::Output,
        ) -> Result<()> {
            Ok(())
        }

        fn is_keyed(&self) -> bool {
            true
        }
    }

    impl OperatorFactory for HeapOnly {
        fn create(&self, _: &TaskContext) -> Result<Box<dyn Operator>> {
            Ok(Box::new(HeapOnly))
        }
    }

    #[test]
    fn the_spilling_backend_refuses_a_keyed_operator_that_cannot_spill_naming_it() {
        let factories: Vec<Arc<dyn OperatorFactory>> = vec![Arc::new(HeapOnly)];
        let chain: Vec<Box<dyn Operator>> = vec![Box::new(HeapOnly)];
        let error = refuse_heap_state(&factories, &chain).unwrap_err().to_string();
        assert!(
            error.contains("but HeapOnly keeps its state on the heap"),
            "{error}"
        );
    }
}
