//! Round trips of every kind of message through frames, and malformed frames.

use std::sync::Arc;

use arrow::array::{DictionaryArray, Int64Array, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;

use super::*;

fn batch(keys: &[&str], values: &[i64]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from(
                keys.iter().map(|k| Some(*k)).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(values.to_vec())),
            Arc::new(TimestampMillisecondArray::from(values.to_vec())),
        ],
    )
    .unwrap()
}

fn dictionary_batch(keys: &[&str]) -> RecordBatch {
    let array: DictionaryArray<Int32Type> = keys.iter().copied().collect();
    let schema = Schema::new(vec![Field::new(
        "d",
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        false,
    )]);
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array)]).unwrap()
}

/// Sends `messages` through an encoder, the frames through bytes, and a
/// decoder; returns what came out.
fn round_trip(messages: &[Message]) -> Vec<Message> {
    let mut encoder = Encoder::default();
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    for message in messages {
        for frame in encoder.encode(message).unwrap() {
            let frame = Frame::from_bytes(&frame.to_bytes()).unwrap();
            match decoder.decode(&frame).unwrap() {
                Decoded::Message(m) => out.push(m),
                Decoded::Setup => {}
                Decoded::Priority(p) => panic!("unexpected priority barrier {p:?}"),
            }
        }
    }
    out
}

fn same(a: &Message, b: &Message) -> bool {
    match (a, b) {
        (Message::Batch(a), Message::Batch(b)) => a == b,
        (Message::Watermark(a), Message::Watermark(b)) => a == b,
        (Message::WatermarkStatus(a), Message::WatermarkStatus(b)) => a == b,
        (Message::Barrier(a), Message::Barrier(b)) => a == b,
        (Message::EndOfStream, Message::EndOfStream) => true,
        _ => false,
    }
}

fn assert_round_trips(messages: Vec<Message>) {
    let back = round_trip(&messages);
    assert_eq!(back.len(), messages.len(), "{back:?}");
    for (sent, received) in messages.iter().zip(&back) {
        assert!(same(sent, received), "sent {sent:?}, received {received:?}");
    }
}

#[test]
fn every_kind_of_message_arrives_as_it_was_sent_and_in_order() {
    let barrier = |id, kind| CheckpointBarrier {
        id,
        kind,
        timestamp: 1_700_000_000_123,
    };
    assert_round_trips(vec![
        Message::Batch(batch(&["a", "b"], &[1, -2])),
        Message::Watermark(i64::MIN),
        Message::Watermark(1_700_000_000_000),
        Message::WatermarkStatus(WatermarkStatus::Idle),
        Message::WatermarkStatus(WatermarkStatus::Active),
        Message::Batch(batch(&["c"], &[3])),
        Message::Barrier(barrier(7, BarrierKind::Checkpoint)),
        Message::Barrier(barrier(u64::MAX, BarrierKind::Savepoint)),
        Message::Batch(batch(&[], &[])),
        Message::EndOfStream,
    ]);
}

#[test]
fn the_schema_goes_once_per_channel_and_again_when_it_changes() {
    let mut encoder = Encoder::default();
    let first = encoder.encode(&Message::Batch(batch(&["a"], &[1]))).unwrap();
    let second = encoder.encode(&Message::Batch(batch(&["b"], &[2]))).unwrap();
    assert_eq!(first.len(), 2, "schema, then batch");
    assert_eq!(second.len(), 1, "batch only");
    let other = encoder.encode(&Message::Batch(dictionary_batch(&["x"]))).unwrap();
    assert_eq!(other.len(), 3, "new schema, dictionary, batch");
    assert_round_trips(vec![
        Message::Batch(batch(&["a"], &[1])),
        Message::Batch(dictionary_batch(&["x", "y", "x"])),
        Message::Batch(batch(&["b"], &[2])),
    ]);
}

#[test]
fn dictionaries_that_change_between_batches_are_sent_again() {
    assert_round_trips(vec![
        Message::Batch(dictionary_batch(&["x", "y", "x"])),
        Message::Batch(dictionary_batch(&["x", "y"])),
        Message::Batch(dictionary_batch(&["z"])),
    ]);
}

#[test]
fn a_sliced_batch_arrives_with_only_its_own_rows() {
    let whole = batch(&["a", "b", "c", "d"], &[1, 2, 3, 4]);
    assert_round_trips(vec![Message::Batch(whole.slice(1, 2))]);
}

#[test]
fn a_priority_barrier_keeps_its_sequence() {
    let priority = PriorityBarrier {
        barrier: CheckpointBarrier {
            id: 42,
            kind: BarrierKind::Checkpoint,
            timestamp: -1,
        },
        sequence: 1 << 40,
    };
    let frame = Encoder::default().encode_priority(&priority);
    let frame = Frame::from_bytes(&frame.to_bytes()).unwrap();
    match Decoder::default().decode(&frame).unwrap() {
        Decoded::Priority(back) => assert_eq!(back, priority),
        other => panic!("expected a priority barrier, got {other:?}"),
    }
}

fn error_of(frame: &Frame) -> String {
    Decoder::default().decode(frame).unwrap_err().to_string()
}

#[test]
fn malformed_frames_are_errors_that_say_what_is_wrong() {
    let mut watermark = Encoder::default()
        .encode(&Message::Watermark(5))
        .unwrap()
        .remove(0);
    watermark.header.pop();
    assert!(error_of(&watermark).contains("a watermark has 8 bytes of fields, this one 7"));
    let unknown = Frame {
        header: vec![VERSION, 99],
        ..Frame::default()
    };
    assert!(error_of(&unknown).contains("unknown kind 99"));
    let future = Frame {
        header: vec![9, 4],
        ..Frame::default()
    };
    assert!(error_of(&future).contains("header version 9"));
    assert!(error_of(&Frame::default()).contains("empty header"));

    let frames = Encoder::default()
        .encode(&Message::Batch(batch(&["a"], &[1])))
        .unwrap();
    assert!(error_of(&frames[1]).contains("before the channel's schema"));
    let garbage = Frame {
        ipc_message: vec![1, 2, 3],
        ..frames[1].clone()
    };
    assert!(error_of(&garbage).contains("does not parse"));
    let swapped = Frame {
        header: frames[1].header.clone(),
        ..frames[0].clone()
    };
    assert!(error_of(&swapped).contains("a Batch frame holds an Arrow IPC Schema message"));

    let bytes = frames[1].to_bytes();
    let err = Frame::from_bytes(&bytes[..bytes.len() - 1])
        .unwrap_err()
        .to_string();
    assert!(err.contains("malformed channel frame: its body needs"), "{err}");
    let mut longer = bytes.clone();
    longer.push(0);
    let err = Frame::from_bytes(&longer).unwrap_err().to_string();
    assert!(err.contains("1 bytes after the frame's body"), "{err}");
}
