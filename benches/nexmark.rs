//! The Nexmark generator alone: events into Arrow columns, one thread.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir::connectors::nexmark::generator::{EventBatchBuilder, GeneratorConfig};

const EVENTS: u64 = 8192 * 20;

fn bench(c: &mut Criterion) {
    let config = Arc::new(GeneratorConfig::default());
    let mut group = c.benchmark_group("nexmark_generator");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(20);
    group.bench_function("events_into_batches", |b| {
        let mut builder = EventBatchBuilder::new(config.clone(), 8192);
        b.iter(|| {
            let mut columns = 0;
            for id in 0..EVENTS {
                builder.append(id);
                if id % 8192 == 8191 {
                    columns += builder.finish().len();
                }
            }
            columns
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
