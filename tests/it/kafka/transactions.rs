//! Settling a recorded transaction against the real broker.

use std::time::Duration;

use rdkafka::producer::Producer;
use weir::connectors::kafka::transactions::{Settlement, commit_recorded};

use super::{broker, open_transaction, producer, read_committed};

#[test]
fn a_transaction_a_crash_left_open_is_committed_from_its_record_once() {
    let recorded = open_transaction("weir-test-open", "settle-open", &["a", "b", "c"]);
    assert!(
        read_committed("settle-open", Duration::from_secs(3)).is_empty(),
        "nothing is visible before the commit"
    );
    assert_eq!(commit_recorded(broker(), &recorded).unwrap(), Settlement::Commit);
    assert_eq!(
        read_committed("settle-open", Duration::from_secs(5)),
        vec!["a", "b", "c"]
    );
    assert_eq!(
        commit_recorded(broker(), &recorded).unwrap(),
        Settlement::Committed,
        "a second restore from the same checkpoint commits nothing again"
    );
}

#[test]
fn a_transaction_aborted_by_a_new_producer_is_reported_lost() {
    let recorded = open_transaction("weir-test-fenced", "settle-fenced", &["x"]);
    // A producer taking the transactional id aborts the open transaction.
    producer("weir-test-fenced")
        .init_transactions(Duration::from_secs(30))
        .unwrap();
    let error = commit_recorded(broker(), &recorded).unwrap_err().to_string();
    assert!(error.contains("aborted or replaced"), "{error}");
    assert!(read_committed("settle-fenced", Duration::from_secs(3)).is_empty());
}
