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

use super::exchange::{Exchange, ExchangeWriter};
use super::input::{InputChannel, InputGate};
use super::message::Message;
use super::operator::{OperatorFactory, TaskContext, TaskMetrics};
use super::source::SourceFactory;
use super::task::{Task, TaskInput};
use crate::{Error, Result};

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

    let mut tasks = Vec::new();
    let mut infos = Vec::new();
    for (vertex_index, vertex) in graph.vertices.iter().enumerate() {
        let vertex_name = vertex.name();
        for subtask in 0..vertex.parallelism {
            let metrics = Arc::new(TaskMetrics::default());
            let ctx = TaskContext {
                subtask,
                parallelism: vertex.parallelism,
                max_parallelism: settings.max_parallelism,
                batch_size: settings.batch_size,
                metrics: metrics.clone(),
                cancel: cancel.clone(),
            };
            let name = format!("{vertex_name} ({}/{})", subtask + 1, vertex.parallelism);
            let input = match &vertex.source {
                Some(source) => TaskInput::Source(source.create_reader(&ctx)?),
                None => TaskInput::Channels(InputGate::new(std::mem::take(
                    &mut receivers[vertex_index][subtask],
                ))),
            };
            let chain = vertex
                .operators
                .iter()
                .map(|factory| factory.create(&ctx))
                .collect::<Result<Vec<_>>>()?;
            let outputs = std::mem::take(&mut senders[vertex_index][subtask])
                .into_iter()
                .map(|(edge_index, txs)| {
                    ExchangeWriter::new(graph.edges[edge_index].exchange.clone(), txs, &ctx)
                })
                .collect();
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
            });
        }
    }

    let handle = JobHandle {
        shared: Arc::new(JobShared {
            id: NEXT_JOB_ID.fetch_add(1, Ordering::Relaxed),
            name: settings.name.clone(),
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
