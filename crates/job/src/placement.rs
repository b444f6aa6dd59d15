//! Where each subtask of an attempt runs: slots that TaskManagers offer, shared by one subtask of every vertex as Flink's slot sharing does.
//!
//! A job needs as many slots as its highest parallelism. Slot `i` runs
//! subtask `i` of every vertex that has one, so a pipeline's subtasks of
//! one index sit together and a forward channel between them stays in the
//! process. Slots are taken TaskManager by TaskManager, in the order given
//! (the JobManager gives them in the order they registered).

use crate::{Error, Result};

/// The process that runs each subtask of an attempt, and the one deploying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The process this deployment runs in (a data-plane address).
    pub here: String,
    /// By vertex, by subtask: the process that runs it.
    pub hosts: Vec<Vec<String>>,
}

impl Placement {
    /// Every subtask of vertices with these parallelisms in this process.
    pub fn local(parallelisms: &[usize]) -> Placement {
        Placement {
            here: String::new(),
            hosts: parallelisms.iter().map(|p| vec![String::new(); *p]).collect(),
        }
    }

    /// Whether subtask `subtask` of vertex `vertex` runs here.
    pub fn is_here(&self, vertex: usize, subtask: usize) -> bool {
        self.host(vertex, subtask) == self.here
    }

    /// The process that runs subtask `subtask` of vertex `vertex`.
    pub fn host(&self, vertex: usize, subtask: usize) -> &str {
        &self.hosts[vertex][subtask]
    }

    /// Whether every subtask runs here.
    pub fn is_all_here(&self) -> bool {
        self.hosts.iter().flatten().all(|h| *h == self.here)
    }

    /// The same placement, deployed from process `here`.
    pub fn seen_from(&self, here: &str) -> Placement {
        Placement {
            here: here.to_string(),
            hosts: self.hosts.clone(),
        }
    }
}

/// Places vertices with these `parallelisms` on the free slots `offered`
/// (each TaskManager's address and free slot count, in order) with slot
/// sharing: an error saying how many slots are missing when there are too
/// few.
pub fn share_slots(parallelisms: &[usize], offered: &[(String, usize)]) -> Result<Placement> {
    let needed = parallelisms.iter().copied().max().unwrap_or(0);
    let slots: Vec<&String> = offered
        .iter()
        .flat_map(|(host, free)| std::iter::repeat_n(host, *free))
        .take(needed)
        .collect();
    if slots.len() < needed {
        return Err(Error::Execution(format!(
            "the job needs {needed} slots (its highest parallelism), the TaskManagers offer {}",
            slots.len()
        )));
    }
    Ok(Placement {
        here: String::new(),
        hosts: parallelisms
            .iter()
            .map(|p| slots[..*p].iter().map(|h| h.to_string()).collect())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(slots: &[(&str, usize)]) -> Vec<(String, usize)> {
        slots.iter().map(|(h, n)| (h.to_string(), *n)).collect()
    }

    #[test]
    fn a_job_takes_as_many_slots_as_its_highest_parallelism_one_subtask_of_each_vertex_per_slot() {
        let placement = share_slots(&[2, 3, 1], &offered(&[("a", 2), ("b", 2)])).unwrap();
        assert_eq!(
            placement.hosts,
            vec![vec!["a", "a"], vec!["a", "a", "b"], vec!["a"]]
        );
        let from_b = placement.seen_from("b");
        assert!(from_b.is_here(1, 2) && !from_b.is_here(0, 1));
        assert!(!from_b.is_all_here());
    }

    #[test]
    fn slots_spread_over_task_managers_in_the_order_they_are_offered() {
        let placement = share_slots(&[4], &offered(&[("a", 1), ("b", 0), ("c", 2), ("d", 5)])).unwrap();
        assert_eq!(placement.hosts, vec![vec!["a", "c", "c", "d"]]);
    }

    #[test]
    fn too_few_slots_is_an_error_that_counts_them() {
        let error = share_slots(&[1, 4], &offered(&[("a", 1), ("b", 2)]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("needs 4 slots") && error.contains("offer 3"),
            "{error}"
        );
    }

    #[test]
    fn a_local_placement_runs_everything_here() {
        let placement = Placement::local(&[2, 1]);
        assert!(placement.is_all_here() && placement.is_here(0, 1));
    }
}
