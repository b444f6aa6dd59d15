//! The hash exchange (key hashing, splitting a batch by key group) and the cost of one batch through a channel: crossbeam in process, Arrow Flight on loopback.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir::common::key_group::hash_rows;
use weir::runtime::exchange::partition_by_hash;
use weir::runtime::message::Message;
use weir::runtime::transport::{ChannelId, Local, Transport};
use weir_flight::FlightNode;
use weir_flight::loopback::FlightLoopback;

const ROWS: usize = 8192;

fn bench(c: &mut Criterion) {
    let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..ROWS as i64).map(|i| i * 7919 % 10_000),
    ));
    let names: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("bidder-{}", i % 1000)),
    ));
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![keys.clone(), names.clone()]).unwrap();
    let mut group = c.benchmark_group("exchange");
    group.throughput(Throughput::Elements(ROWS as u64));
    let mut hashes = Vec::new();
    group.bench_function("hash_int64_key", |b| {
        b.iter(|| hash_rows(std::slice::from_ref(&keys), &mut hashes).unwrap())
    });
    group.bench_function("hash_string_key", |b| {
        b.iter(|| hash_rows(std::slice::from_ref(&names), &mut hashes).unwrap())
    });
    for parallelism in [2, 4] {
        group.bench_function(format!("partition_int64_key_to_{parallelism}"), |b| {
            b.iter(|| {
                partition_by_hash(&batch, std::slice::from_ref(&keys), parallelism, 128, &mut hashes).unwrap()
            })
        });
    }
    group.finish();
}

/// Batches of `batch` sent through a channel of `transport` by one thread
/// and taken by another: the time per batch, pipelined as in a job.
fn channel(c: &mut Criterion, batch: &RecordBatch) {
    let node = FlightNode::start("127.0.0.1:0").unwrap();
    let transports: [(&str, Box<dyn Transport>); 2] = [
        ("crossbeam", Box::new(Local)),
        ("flight_loopback", Box::new(FlightLoopback::new(node))),
    ];
    let mut group = c.benchmark_group("channel");
    group.throughput(Throughput::Elements(ROWS as u64));
    for (name, transport) in transports {
        group.bench_function(format!("batch_{ROWS}_rows_{name}"), |b| {
            b.iter_custom(|iters| {
                let id = ChannelId {
                    edge: 0,
                    from: 0,
                    to: 0,
                };
                let (send, receive) = transport.channel(id, 16, false).unwrap();
                let batch = batch.clone();
                let started = std::time::Instant::now();
                let sender = std::thread::spawn(move || {
                    for _ in 0..iters {
                        send.data.send(Message::Batch(batch.clone())).unwrap();
                    }
                });
                for _ in 0..iters {
                    receive.data.recv().unwrap();
                }
                let elapsed = started.elapsed();
                sender.join().unwrap();
                elapsed
            })
        });
    }
    group.finish();
}

fn bench_channels(c: &mut Criterion) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..ROWS as i64)),
        Arc::new(StringArray::from_iter_values(
            (0..ROWS).map(|i| format!("bidder-{}", i % 1000)),
        )),
    ];
    channel(c, &RecordBatch::try_new(schema, columns).unwrap());
}

criterion_group!(benches, bench, bench_channels);
criterion_main!(benches);
