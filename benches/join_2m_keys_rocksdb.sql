-- The spilled join's workload (weir bench checkpoint --join --keys 2000000 --rows 10000000)
-- for Apache Flink with RocksDB: see docs/state.md, "What it costs, measured (spilling)".
SET 'state.backend.type' = 'rocksdb';
SET 'execution.checkpointing.incremental' = 'true';
CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '9999999');
CREATE TABLE dim (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '1999999');
CREATE TABLE sink (k BIGINT, id BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO sink SELECT d.id, x.id FROM seq x JOIN dim d ON x.id % 2000000 = d.id;
