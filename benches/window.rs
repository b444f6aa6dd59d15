//! Window aggregation over in-memory batches: TUMBLE and HOP, 10k keys,
//! COUNT/SUM/MAX, as in the reference workloads (one operator, one thread);
//! the Table API's row-count windows over the same rows.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion_physical_expr::expressions::{Column, lit};
use weir::operators::window::aggregate::{WindowAggregate, WindowAggregateFactory};
use weir::operators::window::count::{CountWindowAggregate, CountWindowAggregateFactory};
use weir::plan::window::{GroupColumn, Phase, TimeShift, WindowProperty, WindowSpec};
use weir::runtime::operator::TaskContext;
use weir::runtime::{OperatorFactory, Output};

const ROWS_PER_BATCH: usize = 8192;
const BATCHES: usize = 200;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
    ]))
}

/// The reference rows: id = 0.., k = id % 10000, price = id * 7919 % 100000, ts = id / 100 ms.
fn batches() -> Vec<RecordBatch> {
    (0..BATCHES)
        .map(|b| {
            let ids: Vec<i64> = (0..ROWS_PER_BATCH as i64)
                .map(|i| (b * ROWS_PER_BATCH) as i64 + i)
                .collect();
            RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i % 10_000))),
                    Arc::new(Int64Array::from_iter_values(
                        ids.iter().map(|i| i * 7919 % 100_000),
                    )),
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        ids.iter().map(|i| i / 100),
                    )),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// COUNT(*), SUM(price), MAX(price) over the input rows.
fn aggregates(schema: &SchemaRef) -> Vec<Arc<AggregateFunctionExpr>> {
    let aggregate = |f, column: usize, name: &str| {
        Arc::new(
            AggregateExprBuilder::new(
                f,
                vec![Arc::new(Column::new(schema.field(column).name(), column))],
            )
            .schema(schema.clone())
            .alias(name)
            .build()
            .unwrap(),
        )
    };
    let count = Arc::new(
        AggregateExprBuilder::new(
            datafusion_functions_aggregate::count::count_udaf(),
            vec![lit(1i64)],
        )
        .schema(schema.clone())
        .alias("cnt")
        .build()
        .unwrap(),
    );
    vec![
        count,
        aggregate(datafusion_functions_aggregate::sum::sum_udaf(), 1, "sum_price"),
        aggregate(
            datafusion_functions_aggregate::min_max::max_udaf(),
            1,
            "max_price",
        ),
    ]
}

/// The output fields after the window and key columns.
fn aggregate_fields() -> Vec<Field> {
    vec![
        Field::new("cnt", DataType::Int64, true),
        Field::new("sum_price", DataType::Int64, true),
        Field::new("max_price", DataType::Int64, true),
    ]
}

fn factory(window: WindowSpec) -> WindowAggregateFactory {
    let schema = input_schema();
    let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let mut fields = vec![
        Field::new(
            "window_start",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("k", DataType::Int64, false),
    ];
    fields.extend(aggregate_fields());
    let output = Arc::new(Schema::new(fields));
    WindowAggregateFactory(Arc::new(WindowAggregate {
        phase: Phase::Single,
        window,
        processing_time: false,
        shift: TimeShift::Utc,
        time_name: "ts".into(),
        time_index: 2,
        keys: vec![Arc::new(Column::new("k", 0))],
        key_schema,
        aggregates: aggregates(&schema),
        aggregate_input: schema,
        filters: vec![None, None, None],
        group_columns: vec![GroupColumn::Window(WindowProperty::Start), GroupColumn::Key(0)],
        output_schema: output,
        name: format!("WindowAggregate(window=[{window}])"),
    }))
}

/// Row-count windows of `size` rows every `slide` rows of each key.
fn count_factory(size: u64, slide: u64) -> CountWindowAggregateFactory {
    let schema = input_schema();
    let key = Field::new("k", DataType::Int64, false);
    let mut fields = vec![key.clone()];
    fields.extend(aggregate_fields());
    CountWindowAggregateFactory(Arc::new(CountWindowAggregate {
        size,
        slide,
        time_name: "pt".into(),
        keys: vec![Arc::new(Column::new("k", 0))],
        key_schema: Arc::new(Schema::new(vec![key])),
        aggregates: aggregates(&schema),
        aggregate_input: schema,
        filters: vec![None, None, None],
        output_schema: Arc::new(Schema::new(fields)),
        name: format!("CountWindowAggregate(window=[{size} rows every {slide}])"),
    }))
}

fn run(factory: &dyn OperatorFactory, batches: &[RecordBatch]) -> usize {
    let ctx = TaskContext::standalone(ROWS_PER_BATCH);
    let mut operator = factory.create(&ctx).unwrap();
    let mut out = Output::default();
    let mut emitted = 0;
    for batch in batches {
        let last = batch
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        let watermark = last.value(last.len() - 1) - 1000;
        operator.process_batch(0, batch.clone(), &mut out).unwrap();
        operator.process_watermark(watermark, &mut out).unwrap();
        emitted += out.take().len();
    }
    operator.process_watermark(i64::MAX, &mut out).unwrap();
    emitted + out.take().len()
}

fn bench(c: &mut Criterion) {
    let batches = batches();
    let mut group = c.benchmark_group("window_aggregate");
    group.throughput(Throughput::Elements((BATCHES * ROWS_PER_BATCH) as u64));
    group.sample_size(20);
    group.bench_function("tumble_10s_10k_keys", |b| {
        let tumble = factory(WindowSpec::tumble(10_000, 0).unwrap());
        b.iter(|| run(&tumble, &batches))
    });
    group.bench_function("hop_2s_10s_10k_keys", |b| {
        let hop = factory(WindowSpec::hop(2_000, 10_000, 0).unwrap());
        b.iter(|| run(&hop, &batches))
    });
    group.bench_function("count_tumble_100_rows_10k_keys", |b| {
        let tumble = count_factory(100, 100);
        b.iter(|| run(&tumble, &batches))
    });
    group.bench_function("count_slide_100_rows_every_10_10k_keys", |b| {
        let slide = count_factory(100, 10);
        b.iter(|| run(&slide, &batches))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
