//! Channels between two nodes on loopback TCP: order, the priority lane, per-channel backpressure, and a node that goes away.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use crossbeam_channel::{RecvTimeoutError, SendTimeoutError};
use weir_common::ids::BarrierKind;
use weir_runtime::exchange::PriorityBarrier;
use weir_runtime::message::{CheckpointBarrier, Message, WatermarkStatus};
use weir_runtime::transport::{ChannelId, ReceiveEnd, SendEnd, local};

use crate::{ChannelKey, FlightNode};

const WAIT: Duration = Duration::from_secs(20);

fn key(to: usize) -> ChannelKey {
    ChannelKey {
        job: "job-1".into(),
        attempt: 0,
        channel: ChannelId { edge: 0, from: 0, to },
    }
}

/// A channel from a subtask on `upstream` to one on `downstream`.
fn channel(
    upstream: &FlightNode,
    downstream: &FlightNode,
    to: usize,
    capacity: usize,
    lane: bool,
) -> (SendEnd, ReceiveEnd) {
    let (send, offered) = local(capacity, lane);
    upstream.offer(key(to), offered);
    let address = upstream.address().to_string();
    let receive = downstream.fetch(&address, &key(to), capacity, lane).unwrap();
    (send, receive)
}

fn two_nodes() -> (Arc<FlightNode>, Arc<FlightNode>) {
    (
        FlightNode::start("127.0.0.1:0").unwrap(),
        FlightNode::start("127.0.0.1:0").unwrap(),
    )
}

fn batch(rows: usize, text: &str) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("v", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]);
    let values = Int64Array::from_iter_values(0..rows as i64);
    let texts = StringArray::from_iter_values((0..rows).map(|_| text));
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(values), Arc::new(texts)]).unwrap()
}

fn barrier(id: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        id,
        kind: BarrierKind::Checkpoint,
        timestamp: 1_700_000_000_000,
    }
}

/// What a message is, for comparing sequences of them.
fn describe(message: &Message) -> String {
    match message {
        Message::Batch(b) => format!("batch {} rows {:?}", b.num_rows(), b.schema().fields()),
        Message::Watermark(w) => format!("watermark {w}"),
        Message::WatermarkStatus(s) => format!("status {s:?}"),
        Message::Barrier(b) => format!("barrier {}", b.id),
        Message::EndOfStream => "end".into(),
        Message::Broken(cause) => format!("broken: {cause}"),
    }
}

#[test]
fn batches_watermarks_barriers_and_the_end_cross_a_flight_stream_in_order() {
    let (upstream, downstream) = two_nodes();
    let (send, receive) = channel(&upstream, &downstream, 0, 4, false);
    let sent = vec![
        Message::Batch(batch(3, "a")),
        Message::Watermark(5),
        Message::Barrier(barrier(1)),
        Message::Batch(batch(1000, "bb")),
        Message::WatermarkStatus(WatermarkStatus::Idle),
        Message::EndOfStream,
    ];
    let expected: Vec<String> = sent.iter().map(describe).collect();
    let writer = std::thread::spawn(move || sent.into_iter().for_each(|m| send.data.send(m).unwrap()));
    let got: Vec<Message> = (0..expected.len())
        .map(|_| receive.data.recv_timeout(WAIT).unwrap())
        .collect();
    writer.join().unwrap();
    assert_eq!(got.iter().map(describe).collect::<Vec<_>>(), expected);
    let Message::Batch(big) = &got[3] else {
        panic!("a batch")
    };
    assert_eq!(
        big,
        &batch(1000, "bb"),
        "the rows themselves, not just their count"
    );
    assert!(
        matches!(
            receive.data.recv_timeout(WAIT),
            Err(RecvTimeoutError::Disconnected)
        ),
        "the stream ends when the sender hangs up"
    );
}

#[test]
fn a_priority_barrier_overtakes_data_that_its_reader_has_not_taken() {
    let (upstream, downstream) = two_nodes();
    let (send, receive) = channel(&upstream, &downstream, 0, 1, true);
    for _ in 0..3 {
        send.data
            .send_timeout(Message::Batch(batch(10, "x")), WAIT)
            .unwrap();
    }
    let lane = send.lane.as_ref().expect("a lane");
    lane.send(PriorityBarrier {
        barrier: barrier(7),
        sequence: 3,
    })
    .unwrap();
    let overtaking = receive.lane.as_ref().expect("a lane").recv_timeout(WAIT).unwrap();
    assert_eq!((overtaking.barrier.id, overtaking.sequence), (7, 3));
    for _ in 0..3 {
        assert!(matches!(
            receive.data.recv_timeout(WAIT).unwrap(),
            Message::Batch(_)
        ));
    }
}

#[test]
fn a_channel_whose_reader_stalls_blocks_its_sender_but_not_another_channel_between_the_same_nodes() {
    let (upstream, downstream) = two_nodes();
    let (stalled, _never_read) = channel(&upstream, &downstream, 0, 4, false);
    let (flowing, read) = channel(&upstream, &downstream, 1, 4, false);
    let big = batch(16 * 1024, "0123456789abcdef"); // about 400 kB
    // The stalled channel fills: its sender waits after a bounded number of batches.
    let mut accepted = 0;
    while stalled
        .data
        .send_timeout(Message::Batch(big.clone()), Duration::from_millis(500))
        .is_ok()
    {
        accepted += 1;
        assert!(
            accepted < 200,
            "no backpressure after {accepted} batches of 400 kB"
        );
    }
    // The other channel still moves 80 MB.
    let total = 200;
    let reader = std::thread::spawn(move || {
        let mut rows = 0;
        for _ in 0..total {
            match read.data.recv_timeout(WAIT) {
                Ok(Message::Batch(b)) => rows += b.num_rows(),
                other => panic!("{other:?}"),
            }
        }
        rows
    });
    let started = Instant::now();
    for _ in 0..total {
        match flowing.data.send_timeout(Message::Batch(big.clone()), WAIT) {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                panic!("the flowing channel stalled after {:?}", started.elapsed())
            }
            Err(SendTimeoutError::Disconnected(_)) => panic!("the flowing channel broke"),
        }
    }
    assert_eq!(reader.join().unwrap(), total * big.num_rows());
    assert!(
        stalled
            .data
            .send_timeout(Message::Batch(big), Duration::from_millis(200))
            .is_err(),
        "the stalled channel is still full"
    );
}

#[test]
fn a_reader_sees_its_channel_broken_with_the_lost_node_named_when_the_upstream_node_goes_away() {
    let (upstream, downstream) = two_nodes();
    let address = upstream.address().to_string();
    let (send, receive) = channel(&upstream, &downstream, 0, 4, false);
    send.data.send(Message::Batch(batch(5, "a"))).unwrap();
    assert!(matches!(
        receive.data.recv_timeout(WAIT).unwrap(),
        Message::Batch(_)
    ));
    drop(upstream);
    match receive.data.recv_timeout(WAIT) {
        Ok(Message::Broken(cause)) => assert!(
            cause.contains(&format!("lost the connection to the node at {address}")),
            "{cause}"
        ),
        other => panic!("expected the channel to break, got {other:?}"),
    }
    assert!(matches!(
        receive.data.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn a_sender_that_hangs_up_ends_the_stream_without_a_broken_notice() {
    let (upstream, downstream) = two_nodes();
    let (send, receive) = channel(&upstream, &downstream, 0, 4, false);
    send.data.send(Message::Batch(batch(5, "a"))).unwrap();
    drop(send);
    assert!(matches!(
        receive.data.recv_timeout(WAIT).unwrap(),
        Message::Batch(_)
    ));
    assert!(
        matches!(
            receive.data.recv_timeout(WAIT),
            Err(RecvTimeoutError::Disconnected)
        ),
        "a task that stopped upstream is not a lost connection"
    );
}
