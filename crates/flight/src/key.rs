//! Which stream a `DoGet` asks for: a job attempt's channel and one of its two lanes, written as a Flight ticket.

use bytes::Bytes;
use weir_runtime::transport::ChannelId;

use crate::{Error, Result};

/// One channel of one attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelKey {
    /// The job's id.
    pub job: String,
    /// The attempt (a restart makes new channels; an old attempt's reader
    /// never takes a new attempt's stream).
    pub attempt: u32,
    /// The channel within the job graph.
    pub channel: ChannelId,
}

/// The two streams of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Batches, watermarks, aligned barriers, end-of-stream, in order.
    Data,
    /// Barriers that overtake the data (unaligned checkpoints).
    Priority,
}

/// The first field of every ticket: what kind of ticket and its version.
const TAG: &str = "weir-channel-1";

/// The edge number of query result channels: no edge of a job graph.
const RESULT_EDGE: usize = usize::MAX;

impl ChannelKey {
    /// The channel of attempt `attempt` of `job` that carries the rows of
    /// its collect sink `id` to the process that submitted the query.
    pub fn result(job: &str, attempt: u32, id: u64) -> ChannelKey {
        ChannelKey {
            job: job.to_string(),
            attempt,
            channel: ChannelId {
                edge: RESULT_EDGE,
                from: 0,
                to: id as usize,
            },
        }
    }

    /// The ticket that asks for `lane` of this channel.
    pub fn ticket(&self, lane: Lane) -> Bytes {
        let lane = match lane {
            Lane::Data => "data",
            Lane::Priority => "priority",
        };
        let ChannelId { edge, from, to } = self.channel;
        // The job id goes last: it may hold any character.
        Bytes::from(format!(
            "{TAG}/{lane}/{}/{edge}/{from}/{to}/{}",
            self.attempt, self.job
        ))
    }

    /// The channel and lane a ticket asks for.
    pub fn from_ticket(ticket: &[u8]) -> Result<(ChannelKey, Lane)> {
        let bad = |why: &str| {
            Error::Execution(format!(
                "not a weir channel ticket ({why}): {:?}",
                String::from_utf8_lossy(&ticket[..ticket.len().min(200)])
            ))
        };
        let text = std::str::from_utf8(ticket).map_err(|_| bad("not UTF-8"))?;
        let fields: Vec<&str> = text.splitn(7, '/').collect();
        let [tag, lane, attempt, edge, from, to, job] = fields[..] else {
            return Err(bad("too few fields"));
        };
        if tag != TAG {
            return Err(bad("unknown tag"));
        }
        let lane = match lane {
            "data" => Lane::Data,
            "priority" => Lane::Priority,
            _ => return Err(bad("unknown lane")),
        };
        let number = |field: &str| {
            field
                .parse::<usize>()
                .map_err(|_| bad("a number that does not parse"))
        };
        let key = ChannelKey {
            job: job.to_string(),
            attempt: u32::try_from(number(attempt)?).map_err(|_| bad("attempt out of range"))?,
            channel: ChannelId {
                edge: number(edge)?,
                from: number(from)?,
                to: number(to)?,
            },
        };
        Ok((key, lane))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_as_its_channel_and_lane_even_with_slashes_in_the_job_id() {
        let key = ChannelKey {
            job: "a/b c".into(),
            attempt: 3,
            channel: ChannelId {
                edge: 1,
                from: 2,
                to: 0,
            },
        };
        for lane in [Lane::Data, Lane::Priority] {
            assert_eq!(
                ChannelKey::from_ticket(&key.ticket(lane)).unwrap(),
                (key.clone(), lane)
            );
        }
    }

    #[test]
    fn a_foreign_ticket_is_refused_with_what_is_wrong() {
        for (ticket, why) in [
            (&b"SELECT 1"[..], "too few fields"),
            (b"other/data/0/0/0/0/j", "unknown tag"),
            (b"weir-channel-1/side/0/0/0/0/j", "unknown lane"),
            (b"weir-channel-1/data/x/0/0/0/j", "does not parse"),
        ] {
            let error = ChannelKey::from_ticket(ticket).unwrap_err().to_string();
            assert!(error.contains(why), "{error}");
        }
    }
}
