//! Jobs: a graph of chained vertices expanded into subtasks, one thread each.
//!
//! Every operator instance and source reader is created before any thread starts,
//! so a setup error (a missing file, an unwritable directory) fails the submission
//! itself. Once running, the first task error is the job's error: the job is
//! cancelled, the other tasks stop as their channels close, and `wait` returns it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;

use std::path::PathBuf;

use super::control::{TaskCheckpointing, TaskControl};
use super::exchange::{Exchange, ExchangeWriter};
use super::input::{InputChannel, InputGate};
use super::message::{CheckpointId, Message};
use super::operator::{Operator, OperatorFactory, OperatorSnapshot, TaskContext, TaskMetrics};
use super::source::{SourceFactory, SourceReader};
use super::task::{Task, TaskInput};
use crate::checkpoint::driver::{CoordinatorDriver, DriverTask};
use crate::checkpoint::{CheckpointConfig, CheckpointMetadata, TaskState};
use crate::state::key_group::key_group_range;
use crate::state::snapshot::read_state_file;
use crate::{Error, Result};

/// The stable id of the operator at `index` in the chain of `vertex`:
/// `<vertex>-<index>-<kind>`, checked against a checkpoint on restore.
pub fn operator_id(vertex: usize, index: usize, factory: &dyn OperatorFactory) -> String {
    let description = factory.describe();
    let kind: String = description
        .split(['(', '[', ':'])
        .next()
        .unwrap_or("operator")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    format!("{vertex}-{index}-{kind}")
}

/// The saved state of one subtask in a checkpoint, checked against the job.
fn task_state<'a>(
    restored: &'a RestoredCheckpoint,
    vertex: usize,
    subtask: usize,
    parallelism: usize,
    name: &str,
) -> Result<Option<&'a TaskState>> {
    let states: Vec<&TaskState> = restored
        .metadata
        .tasks
        .iter()
        .filter(|t| t.vertex == vertex)
        .collect();
    if let Some(other) = states.iter().find(|t| t.parallelism != parallelism) {
        return Err(Error::State(format!(
            "checkpoint {} ran {name} at parallelism {}, this job at {parallelism}; \
             restoring at another parallelism is not supported yet",
            restored.dir.display(),
            other.parallelism
        )));
    }
    Ok(states.into_iter().find(|t| t.subtask == subtask))
}

/// Restores a source reader and the chained operators of one subtask.
fn restore_task(
    restored: &RestoredCheckpoint,
    state: &TaskState,
    reader: Option<&mut Box<dyn SourceReader>>,
    chain: &mut [Box<dyn Operator>],
    operator_ids: &[String],
    ctx: &TaskContext,
) -> Result<()> {
    if let (Some(reader), Some(position)) = (reader, &state.source) {
        reader.restore_position(position).map_err(|e| {
            Error::State(format!(
                "checkpoint {}: source position of subtask {}: {e}",
                restored.dir.display(),
                ctx.subtask
            ))
        })?;
    }
    let range = key_group_range(ctx.subtask, ctx.parallelism, ctx.max_parallelism);
    for saved in &state.operators {
        let Some(index) = operator_ids.iter().position(|id| *id == saved.operator_id) else {
            return Err(Error::State(format!(
                "checkpoint {} holds state of operator '{}', which this job does not have \
                 (its operators: {}); was the query changed?",
                restored.dir.display(),
                saved.operator_id,
                operator_ids.join(", ")
            )));
        };
        let rows = match &saved.file {
            Some(file) => read_state_file(&restored.dir.join(&file.path), &range)?,
            None => None,
        };
        chain[index].restore(OperatorSnapshot {
            meta: saved.meta.clone(),
            rows,
        })?;
    }
    Ok(())
}

/// A chain of operators that runs in one thread per subtask.
#[derive(Debug, Clone)]
pub struct Vertex {
    /// The source at the head of the chain, if any.
    pub source: Option<Arc<dyn SourceFactory>>,
    /// The chained operators.
    pub operators: Vec<Arc<dyn OperatorFactory>>,
    /// Number of subtasks.
    pub parallelism: usize,
}

impl Vertex {
    /// The chain's description: `Source: ... -> Calc(...) -> ...`.
    pub fn name(&self) -> String {
        self.source
            .iter()
            .map(|s| s.describe())
            .chain(self.operators.iter().map(|o| o.describe()))
            .collect::<Vec<_>>()
            .join(" -> ")
    }
}

/// An edge between vertices.
#[derive(Debug, Clone)]
pub struct JobEdge {
    /// Upstream vertex index.
    pub from: usize,
    /// Downstream vertex index.
    pub to: usize,
    /// Logical input of the downstream head operator.
    pub to_input: usize,
    /// How rows are distributed.
    pub exchange: Exchange,
}

/// The runnable form of a plan.
#[derive(Debug, Clone)]
pub struct JobGraph {
    /// Vertices; edges refer to them by index.
    pub vertices: Vec<Vertex>,
    /// Edges.
    pub edges: Vec<JobEdge>,
}

/// Runtime settings of a job.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// The job's name.
    pub name: String,
    /// Number of key groups.
    pub max_parallelism: usize,
    /// Rows per batch sources aim for.
    pub batch_size: usize,
    /// Batches a channel holds.
    pub channel_capacity: usize,
    /// Checkpoint settings, when checkpoints are on.
    pub checkpoint: Option<CheckpointConfig>,
    /// The checkpoint to start from.
    pub restore: Option<RestoredCheckpoint>,
    /// What the user should know about how the job started (restore decisions).
    pub notes: Vec<String>,
}

/// A complete checkpoint a job starts from.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
}

/// Figures of one completed checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointStats {
    /// Its id.
    pub id: CheckpointId,
    /// Its directory.
    pub dir: PathBuf,
    /// From trigger to completion.
    pub duration: Duration,
    /// Bytes of state files.
    pub state_bytes: u64,
    /// The longest time a task's processing stopped for its snapshot.
    pub max_blocked: Duration,
}

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    /// Tasks are running.
    Running,
    /// Every task reached the end of its input.
    Finished,
    /// The job was cancelled.
    Cancelled,
    /// A task failed.
    Failed,
}

/// Counters of one subtask, by name.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    /// `Vertex (i/p)`.
    pub name: String,
    /// Its counters.
    pub metrics: Arc<TaskMetrics>,
    /// True for a source subtask (its `records_in` are rows read from outside).
    pub is_source: bool,
}

struct JobState {
    status: JobStatus,
    running: usize,
    error: Option<Error>,
    error_text: Option<String>,
    user_cancelled: bool,
}

struct JobShared {
    id: u64,
    name: String,
    checkpoints: Mutex<Vec<CheckpointStats>>,
    failed_checkpoints: AtomicU64,
    notes: Vec<String>,
    cancel: Arc<AtomicBool>,
    state: Mutex<JobState>,
    done: Condvar,
    tasks: Vec<TaskInfo>,
    started: Instant,
}

/// A running (or finished) job: wait for it, cancel it, read its counters.
#[derive(Clone)]
pub struct JobHandle {
    shared: Arc<JobShared>,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobHandle({}, {:?})", self.shared.name, self.status())
    }
}

static NEXT_JOB_ID: AtomicU64 = AtomicU64::new(1);

/// Errors that only say another task stopped first: never a job's root cause.
fn is_secondary(e: &Error) -> bool {
    matches!(e, Error::Execution(m) if m == "an upstream task stopped"
        || m == "a downstream task stopped"
        || m == "the job was cancelled")
}

impl JobHandle {
    /// The job's id, unique in this process.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The current state.
    pub fn status(&self) -> JobStatus {
        self.shared.state.lock().expect("job state").status
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// Every subtask's counters.
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.shared.tasks
    }

    /// What the user should know about how the job started (what was restored).
    pub fn notes(&self) -> &[String] {
        &self.shared.notes
    }

    /// The checkpoints completed so far, oldest first.
    pub fn completed_checkpoints(&self) -> Vec<CheckpointStats> {
        self.shared.checkpoints.lock().expect("checkpoint stats").clone()
    }

    /// How many checkpoints failed (expired, declined, or not written).
    pub fn failed_checkpoints(&self) -> u64 {
        self.shared.failed_checkpoints.load(Ordering::Relaxed)
    }

    pub(crate) fn checkpoint_completed(&self, stats: CheckpointStats) {
        self.shared
            .checkpoints
            .lock()
            .expect("checkpoint stats")
            .push(stats);
    }

    pub(crate) fn checkpoint_failed(&self) {
        self.shared.failed_checkpoints.fetch_add(1, Ordering::Relaxed);
    }

    /// Fails the job with `error` (from outside its tasks: the coordinator).
    pub(crate) fn fail(&self, error: Error) {
        let mut state = self.shared.state.lock().expect("job state");
        if state.error.is_none() && !state.user_cancelled {
            state.error_text = Some(error.to_string());
            state.error = Some(error);
        }
        self.shared.cancel.store(true, Ordering::SeqCst);
    }

    /// Stops the job; `wait` then returns [`JobStatus::Cancelled`].
    pub fn cancel(&self) {
        {
            let mut state = self.shared.state.lock().expect("job state");
            if state.status == JobStatus::Running {
                state.user_cancelled = true;
            }
        }
        self.shared.cancel.store(true, Ordering::SeqCst);
    }

    /// Blocks until the job ends. A failed job returns its root-cause error (the
    /// first waiter gets the error itself, later ones a copy of its message).
    pub fn wait(&self) -> Result<JobStatus> {
        let mut state = self.shared.state.lock().expect("job state");
        while state.status == JobStatus::Running {
            state = self.shared.done.wait(state).expect("job state");
        }
        match state.status {
            JobStatus::Failed => Err(state
                .error
                .take()
                .unwrap_or_else(|| Error::Execution(state.error_text.clone().unwrap_or_default()))),
            status => Ok(status),
        }
    }

    /// Like `wait`, but gives up after `timeout` and returns the status then.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<JobStatus> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock().expect("job state");
        while state.status == JobStatus::Running {
            let now = Instant::now();
            if now >= deadline {
                return Ok(JobStatus::Running);
            }
            state = self
                .shared
                .done
                .wait_timeout(state, deadline - now)
                .expect("job state")
                .0;
        }
        drop(state);
        self.wait()
    }

    fn task_ended(&self, result: Result<()>) {
        let mut state = self.shared.state.lock().expect("job state");
        state.running -= 1;
        if let Err(e) = result {
            if !is_secondary(&e) && state.error.is_none() && !state.user_cancelled {
                state.error_text = Some(e.to_string());
                state.error = Some(e);
            } else if state.error_text.is_none() {
                state.error_text = Some(e.to_string());
            }
            self.shared.cancel.store(true, Ordering::SeqCst);
        }
        if state.running == 0 {
            state.status = if state.error.is_some() {
                JobStatus::Failed
            } else if state.user_cancelled {
                JobStatus::Cancelled
            } else if state.error_text.is_some() {
                JobStatus::Failed
            } else {
                JobStatus::Finished
            };
            self.shared.done.notify_all();
        }
    }
}

/// Starts a job: creates every subtask, wires the channels and spawns the threads.
pub fn start(graph: JobGraph, settings: JobSettings) -> Result<JobHandle> {
    let cancel = Arc::new(AtomicBool::new(false));
    // Channels: for each edge, senders per upstream subtask and receivers per
    // downstream subtask.
    // For each vertex and subtask: (edge index, one sender per target channel).
    type EdgeSenders = Vec<(usize, Vec<crossbeam_channel::Sender<Message>>)>;
    let mut senders: Vec<Vec<EdgeSenders>> = graph
        .vertices
        .iter()
        .map(|v| vec![Vec::new(); v.parallelism])
        .collect();
    let mut receivers: Vec<Vec<Vec<InputChannel>>> = graph
        .vertices
        .iter()
        .map(|v| (0..v.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for (edge_index, edge) in graph.edges.iter().enumerate() {
        let up = graph.vertices[edge.from].parallelism;
        let down = graph.vertices[edge.to].parallelism;
        let pairs: Vec<(usize, usize)> = match edge.exchange {
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
        };
        for (i, j) in pairs {
            let (tx, rx) = bounded(settings.channel_capacity);
            let slot = &mut senders[edge.from][i];
            match slot.iter_mut().find(|(e, _)| *e == edge_index) {
                Some((_, list)) => list.push(tx),
                None => slot.push((edge_index, vec![tx])),
            }
            receivers[edge.to][j].push(InputChannel::new(rx, edge.to_input));
        }
    }

    let job_dir = settings.checkpoint.as_ref().map(|c| c.dir.join(&settings.name));
    if let Some(dir) = &job_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let (report_sender, report_receiver) = crossbeam_channel::unbounded();
    let mut driver_tasks = Vec::new();
    let mut tasks = Vec::new();
    let mut infos = Vec::new();
    for (vertex_index, vertex) in graph.vertices.iter().enumerate() {
        let vertex_name = vertex.name();
        if settings.checkpoint.is_some()
            && let Some(source) = vertex.source.as_ref().filter(|s| !s.supports_checkpoints())
        {
            return Err(Error::Plan(format!(
                "checkpoints are on, but {} cannot checkpoint its position yet",
                source.describe()
            )));
        }
        let operator_ids: Vec<String> = vertex
            .operators
            .iter()
            .enumerate()
            .map(|(index, factory)| operator_id(vertex_index, index, factory.as_ref()))
            .collect();
        for subtask in 0..vertex.parallelism {
            let metrics = Arc::new(TaskMetrics::default());
            let ctx = TaskContext {
                subtask,
                parallelism: vertex.parallelism,
                max_parallelism: settings.max_parallelism,
                batch_size: settings.batch_size,
                metrics: metrics.clone(),
                cancel: cancel.clone(),
                checkpointing: settings.checkpoint.is_some(),
            };
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
            if settings.checkpoint.is_some()
                && let Some(operator) = chain.iter().find(|op| !op.supports_checkpoints())
            {
                return Err(Error::Plan(format!(
                    "checkpoints are on, but operator {} cannot checkpoint its state yet",
                    operator.name()
                )));
            }
            if let Some(restored) = &settings.restore
                && let Some(state) =
                    task_state(restored, vertex_index, subtask, vertex.parallelism, &vertex_name)?
            {
                restore_task(restored, state, reader.as_mut(), &mut chain, &operator_ids, &ctx)?;
            }
            let input = match reader {
                Some(reader) => TaskInput::Source(reader),
                None => TaskInput::Channels(InputGate::new(std::mem::take(
                    &mut receivers[vertex_index][subtask],
                ))),
            };
            let outputs = std::mem::take(&mut senders[vertex_index][subtask])
                .into_iter()
                .map(|(edge_index, txs)| {
                    ExchangeWriter::new(graph.edges[edge_index].exchange.clone(), txs, &ctx)
                })
                .collect();
            let checkpointing = job_dir.as_ref().map(|dir| {
                let (control_sender, control) = crossbeam_channel::unbounded::<TaskControl>();
                driver_tasks.push(DriverTask {
                    control: control_sender,
                    is_source: vertex.source.is_some(),
                });
                TaskCheckpointing {
                    task: tasks.len(),
                    vertex: vertex_index,
                    subtask,
                    parallelism: vertex.parallelism,
                    operator_ids: operator_ids.clone(),
                    job_dir: dir.clone(),
                    control,
                    reports: report_sender.clone(),
                }
            });
            infos.push(TaskInfo {
                name: name.clone(),
                metrics: metrics.clone(),
                is_source: vertex.source.is_some(),
            });
            tasks.push(Task {
                name,
                input: Some(input),
                chain,
                outputs,
                metrics,
                cancel: cancel.clone(),
                checkpointing,
            });
        }
    }
    drop(report_sender);

    let handle = JobHandle {
        shared: Arc::new(JobShared {
            id: NEXT_JOB_ID.fetch_add(1, Ordering::Relaxed),
            name: settings.name.clone(),
            checkpoints: Mutex::new(Vec::new()),
            failed_checkpoints: AtomicU64::new(0),
            notes: settings.notes.clone(),
            cancel,
            state: Mutex::new(JobState {
                status: JobStatus::Running,
                running: tasks.len(),
                error: None,
                error_text: None,
                user_cancelled: false,
            }),
            done: Condvar::new(),
            tasks: infos,
            started: Instant::now(),
        }),
    };
    if tasks.is_empty() {
        let mut state = handle.shared.state.lock().expect("job state");
        state.status = JobStatus::Finished;
        drop(state);
        return Ok(handle);
    }
    if let (Some(config), Some(job_dir)) = (settings.checkpoint.clone(), job_dir) {
        let next_id = settings
            .restore
            .as_ref()
            .map_or(1, |r| r.metadata.checkpoint_id + 1);
        let driver = CoordinatorDriver {
            config,
            job_dir,
            job: handle.clone(),
            max_parallelism: settings.max_parallelism,
            tasks: driver_tasks,
            reports: report_receiver,
            next_id,
        };
        std::thread::Builder::new()
            .name(format!("weir-{}-coordinator", handle.id()))
            .spawn(move || driver.run())
            .map_err(|e| Error::Execution(format!("could not start the checkpoint coordinator: {e}")))?;
    }
    for (index, task) in tasks.into_iter().enumerate() {
        let job = handle.clone();
        let thread_name = format!("weir-{}-{index}", handle.id());
        let spawned = std::thread::Builder::new().name(thread_name).spawn(move || {
            let name = task.name.clone();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()))
                .unwrap_or_else(|panic| {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    Err(Error::Execution(format!("task {name} panicked: {message}")))
                });
            job.task_ended(result);
        });
        if let Err(e) = spawned {
            handle.cancel();
            return Err(Error::Execution(format!("could not start a task thread: {e}")));
        }
    }
    Ok(handle)
}
