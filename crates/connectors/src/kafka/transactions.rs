//! Settling a sink's transaction after a restore. At a checkpoint's barrier
//! the exactly-once sink flushes its transaction and records it (its
//! transactional id, producer id and epoch) in the checkpoint; it commits
//! when the checkpoint completes. A crash in between leaves the transaction
//! open although the checkpoint says its rows are written: on restore it
//! must be committed. A new producer with the same transactional id would
//! abort it instead (that is how Kafka fences zombies), so the restore
//! describes it (`DescribeTransactions`) and ends it with the recorded
//! producer id and epoch (`EndTxn`), as Flink resumes it with its producer
//! id and epoch. What to do is a plain function of what was recorded and
//! what the coordinator describes ([`settle`]).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use crate::kafka::wire::call;
use crate::{Error, Result};

/// A transaction a checkpoint recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// Its transactional id.
    pub transactional_id: String,
    /// The producer id it ran under.
    pub producer_id: i64,
    /// The producer epoch it ran under.
    pub epoch: i16,
}

/// What the transaction coordinator says of a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// `Empty`, `Ongoing`, `PrepareCommit`, `CompleteCommit`,
    /// `PrepareAbort`, `CompleteAbort`, `Dead`, `PrepareEpochFence`.
    pub state: String,
    /// Its current producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
}

/// What a restore does with a recorded transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Still open, as recorded: commit it.
    Commit,
    /// Committed already (the crash came after the commit): nothing to do.
    Committed,
    /// Aborted or replaced (it timed out, or another producer took the id):
    /// the checkpoint's rows are not in Kafka; the reason.
    Lost(String),
}

/// What to do with `recorded`, given what the coordinator describes.
pub fn settle(recorded: &Recorded, described: &Described) -> Settlement {
    let same_producer = described.producer_id == recorded.producer_id;
    match described.state.as_str() {
        "Ongoing" if same_producer && described.epoch == recorded.epoch => Settlement::Commit,
        // Ending a transaction may bump the epoch (transactions v2).
        "PrepareCommit" | "CompleteCommit" if same_producer && described.epoch >= recorded.epoch => {
            Settlement::Committed
        }
        state => Settlement::Lost(format!(
            "transaction '{}' (producer {} epoch {}) is {state} under producer {} epoch {}: it was aborted \
             or replaced before it could be committed (did it outlive transaction.timeout.ms?)",
            recorded.transactional_id,
            recorded.producer_id,
            recorded.epoch,
            described.producer_id,
            described.epoch
        )),
    }
}

/// How long a transaction-coordinator request is retried while the
/// coordinator is loading, moving or briefly unreachable.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// Why one attempt at a coordinator request failed: worth another try
/// (the coordinator is loading or moved, the connection failed) or not.
enum Attempt {
    Retry(Error),
    Fail(Error),
}

/// Runs `attempt` until it succeeds, fails for good, or [`RETRY_FOR`]
/// has passed since the first try.
fn with_retries<T>(mut attempt: impl FnMut() -> std::result::Result<T, Attempt>) -> Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt() {
            Ok(value) => return Ok(value),
            Err(Attempt::Fail(e)) => return Err(e),
            Err(Attempt::Retry(e)) if start.elapsed() >= RETRY_FOR => return Err(e),
            Err(Attempt::Retry(_)) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// An error code of a coordinator's response, sorted by whether a retry
/// may succeed.
fn classify(code: i16, what: String) -> Attempt {
    let error = ResponseError::try_from_code(code);
    let named = error.map_or(code.to_string(), |e| format!("{e} ({code})"));
    let failed = Error::Execution(format!("Kafka: {what} failed with {named}"));
    match error {
        Some(e) if e.is_retriable() => Attempt::Retry(failed),
        _ => Attempt::Fail(failed),
    }
}

/// The `host:port` of the transaction coordinator of `transactional_id`.
fn coordinator(bootstrap: &str, transactional_id: &str) -> std::result::Result<String, Attempt> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_string(transactional_id.to_string())]);
    let response: FindCoordinatorResponse =
        call(bootstrap, ApiKey::FindCoordinator, 4, &request).map_err(Attempt::Retry)?;
    let Some(found) = response.coordinators.first() else {
        return Err(Attempt::Retry(Error::Execution(format!(
            "Kafka: no transaction coordinator for '{transactional_id}'"
        ))));
    };
    if found.error_code != 0 {
        let what = format!("finding the transaction coordinator of '{transactional_id}'");
        return Err(classify(found.error_code, what));
    }
    Ok(format!("{}:{}", found.host.as_str(), found.port))
}

/// The coordinator's account of `transactional_id`; `None` when it has
/// never heard of it (no producer ever initialized with that id, or it
/// expired). Retries while the coordinator loads or moves, so a transient
/// error is never taken for an id that was never used.
pub fn describe(bootstrap: &str, transactional_id: &str) -> Result<Option<Described>> {
    with_retries(|| {
        let coordinator = coordinator(bootstrap, transactional_id)?;
        let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(
            StrBytes::from_string(transactional_id.to_string()),
        )]);
        let response: DescribeTransactionsResponse =
            call(&coordinator, ApiKey::DescribeTransactions, 0, &request).map_err(Attempt::Retry)?;
        let Some(state) = response.transaction_states.first() else {
            return Err(Attempt::Retry(Error::Execution(format!(
                "Kafka: no description of transaction '{transactional_id}'"
            ))));
        };
        if state.error_code == ResponseError::TransactionalIdNotFound.code() {
            return Ok(None);
        }
        if state.error_code != 0 {
            return Err(classify(
                state.error_code,
                format!("describing transaction '{transactional_id}'"),
            ));
        }
        Ok(Some(Described {
            state: state.transaction_state.as_str().to_string(),
            producer_id: state.producer_id.0,
            epoch: state.producer_epoch,
        }))
    })
}

/// [`describe`] of an id that must exist (it ran a transaction).
pub fn describe_known(bootstrap: &str, transactional_id: &str) -> Result<Described> {
    describe(bootstrap, transactional_id)?.ok_or_else(|| {
        Error::State(format!(
            "Kafka sink: transaction '{transactional_id}' is unknown to its coordinator \
             (did it outlive transactional.id.expiration.ms?)"
        ))
    })
}

/// Settles `recorded`: commits it when still open; an error when it was lost.
pub fn commit_recorded(bootstrap: &str, recorded: &Recorded) -> Result<Settlement> {
    let described = describe_known(bootstrap, &recorded.transactional_id)?;
    let settlement = settle(recorded, &described);
    match &settlement {
        Settlement::Commit => {
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    recorded.transactional_id.clone(),
                )))
                .with_producer_id(ProducerId(recorded.producer_id))
                .with_producer_epoch(recorded.epoch)
                .with_committed(true);
            let response: EndTxnResponse = with_retries(|| {
                let coordinator = coordinator(bootstrap, &recorded.transactional_id)?;
                call(&coordinator, ApiKey::EndTxn, 3, &request).map_err(Attempt::Retry)
            })?;
            if response.error_code != 0 {
                return Err(Error::Execution(format!(
                    "Kafka: committing transaction '{}' failed with error {}",
                    recorded.transactional_id, response.error_code
                )));
            }
        }
        Settlement::Committed => {}
        Settlement::Lost(why) => return Err(Error::State(format!("Kafka sink: {why}"))),
    }
    Ok(settlement)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Recorded {
        Recorded {
            transactional_id: "weir-0-7".into(),
            producer_id: 4,
            epoch: 2,
        }
    }

    fn described(state: &str, producer_id: i64, epoch: i16) -> Described {
        Described {
            state: state.into(),
            producer_id,
            epoch,
        }
    }

    #[test]
    fn an_open_transaction_of_the_recorded_producer_is_committed() {
        assert_eq!(
            settle(&recorded(), &described("Ongoing", 4, 2)),
            Settlement::Commit
        );
    }

    #[test]
    fn a_committed_one_is_left_alone_even_with_its_epoch_bumped() {
        assert_eq!(
            settle(&recorded(), &described("CompleteCommit", 4, 2)),
            Settlement::Committed
        );
        assert_eq!(
            settle(&recorded(), &described("CompleteCommit", 4, 3)),
            Settlement::Committed
        );
    }

    #[test]
    fn an_aborted_or_fenced_one_is_reported_lost() {
        for d in [
            described("CompleteAbort", 4, 3),
            described("Ongoing", 4, 3),
            described("Ongoing", 9, 0),
            described("Empty", 4, 3),
        ] {
            assert!(matches!(settle(&recorded(), &d), Settlement::Lost(_)), "{d:?}");
        }
    }

    #[test]
    fn a_loading_or_moved_coordinator_is_retried_and_an_unknown_error_is_not() {
        for code in [14, 15, 16] {
            assert!(matches!(classify(code, "x".into()), Attempt::Retry(_)), "{code}");
        }
        for code in [51, 105, -1, 999] {
            assert!(matches!(classify(code, "x".into()), Attempt::Fail(_)), "{code}");
        }
        let Attempt::Fail(e) = classify(105, "describing 't'".into()) else {
            unreachable!()
        };
        assert!(
            e.to_string()
                .contains("describing 't' failed with TransactionalIdNotFound (105)"),
            "{e}"
        );
    }

    #[test]
    fn retries_go_on_until_success_and_stop_at_the_first_lasting_failure() {
        let mut tries = 0;
        let got = with_retries(|| {
            tries += 1;
            match tries {
                1 | 2 => Err(Attempt::Retry(Error::Execution("loading".into()))),
                _ => Ok(tries),
            }
        });
        assert_eq!(got.unwrap(), 3);
        let mut tries = 0;
        let got: Result<()> = with_retries(|| {
            tries += 1;
            Err(Attempt::Fail(Error::Execution("fenced".into())))
        });
        assert!(got.unwrap_err().to_string().contains("fenced"));
        assert_eq!(tries, 1);
    }
}
