//! The JobManager's decisions, tested without processes: lost TaskManagers, failed attempts and restarts.

use super::*;

fn entry(id: &str, seen: Instant) -> TaskManagerEntry {
    TaskManagerEntry {
        id: id.into(),
        control: String::new(),
        data: String::new(),
        slots: 1,
        cpu_cores: 1,
        used: 0,
        last_seen: seen,
    }
}

#[test]
fn a_task_manager_is_lost_only_after_a_whole_timeout_of_silence() {
    let start = Instant::now();
    let tms = [
        entry("quiet", start),
        entry("recent", start + Duration::from_secs(40)),
    ];
    let timeout = Duration::from_secs(50);
    assert!(lost_task_managers(&tms, start + Duration::from_secs(50), timeout).is_empty());
    assert_eq!(
        lost_task_managers(&tms, start + Duration::from_secs(51), timeout),
        ["quiet"]
    );
}

#[test]
fn a_lost_connection_names_the_task_manager_at_its_peer_address() {
    let mut tms = [entry("tm-1", Instant::now()), entry("tm-2", Instant::now())];
    tms[0].data = "127.0.0.1:4123".into();
    tms[1].data = "127.0.0.1:41234".into();
    let error = "on TaskManager tm-1: lost the connection to the node at 127.0.0.1:41234: h2 error";
    assert_eq!(
        name_task_managers(error, &tms),
        "on TaskManager tm-1: lost the connection to TaskManager tm-2 at 127.0.0.1:41234: h2 error"
    );
    assert_eq!(
        name_task_managers("a downstream task stopped", &tms),
        "a downstream task stopped"
    );
}

fn job(restart: RestartStrategy) -> JobEntry {
    let submit = SubmitJob {
        name: "n".into(),
        plan: String::new(),
        config: Vec::new(),
    };
    let mut job = JobEntry::new(Arc::new(JobSpec {
        submit,
        parallelisms: vec![2],
        sources: vec![true],
        restart,
        edges: Vec::new(),
        result_vertex: None,
        checkpointed: false,
        run_dir: None,
    }));
    job.state = JobState::Running;
    job.attempt = 3;
    job.parts = HashMap::from([("a".to_string(), 2)]);
    job.running = BTreeSet::from(["a".to_string()]);
    job
}

fn state_with(job: JobEntry) -> State {
    let mut state = State::default();
    let mut a = entry("a", Instant::now());
    (a.control, a.slots, a.used) = ("ctl-a".into(), 2, 2);
    state.task_managers.push(a);
    state.jobs.insert("j".into(), job);
    state
}

#[test]
fn a_failed_attempt_gives_its_slots_back_and_names_the_parts_to_cancel() {
    let mut state = state_with(job(RestartStrategy::None));
    let failure = state.fail("j", "boom".into());
    assert_eq!(failure.cancel, [("ctl-a".to_string(), 3)]);
    assert_eq!(failure.restart, None);
    assert_eq!(state.task_managers[0].used, 0);
    assert_eq!(state.jobs["j"].state, JobState::Failed);
    assert_eq!(
        state.fail("j", "again".into()),
        Failure::default(),
        "a job fails once"
    );
}

#[test]
fn a_fixed_delay_strategy_restarts_as_the_next_attempt_until_its_restarts_are_used_up() {
    let delay = Duration::from_millis(300);
    let mut state = state_with(job(RestartStrategy::FixedDelay { attempts: 1, delay }));
    assert_eq!(state.fail("j", "boom".into()).restart, Some(delay));
    let job = &state.jobs["j"];
    assert_eq!(
        (job.state, job.attempt, job.restarts),
        (JobState::Restarting, 4, 1)
    );
    assert_eq!(state.fail("j", "while restarting".into()), Failure::default());
    state.jobs.get_mut("j").unwrap().state = JobState::Running;
    assert_eq!(
        state.fail("j", "again".into()).restart,
        None,
        "one restart allowed"
    );
    assert_eq!(state.jobs["j"].state, JobState::Failed);
}

#[test]
fn a_cancelled_job_gives_its_slots_back_once_and_is_never_restarted() {
    let delay = Duration::from_millis(300);
    let mut state = state_with(job(RestartStrategy::FixedDelay { attempts: 5, delay }));
    assert_eq!(state.cancel("j"), Some(vec![("ctl-a".to_string(), 3)]));
    assert_eq!(state.task_managers[0].used, 0);
    let job = &state.jobs["j"];
    assert_eq!(job.state, JobState::Canceled);
    assert!(job.ended.is_some());
    assert_eq!(state.cancel("j"), Some(Vec::new()), "nothing left to cancel");
    assert_eq!(
        state.fail("j", "a part ended cancelled".into()),
        Failure::default(),
        "a cancelled job does not restart"
    );
    assert_eq!(state.cancel("unknown"), None);
}
