//! The hash exchange: stable key hashing and splitting a batch by key group.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir::common::key_group::hash_rows;
use weir::runtime::exchange::partition_by_hash;

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

criterion_group!(benches, bench);
criterion_main!(benches);
