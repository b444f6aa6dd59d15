-- Copied from ../shared/bench/ (the reference workloads): the issue-12 benchmark.
-- (d) non-windowed GROUP BY (updating aggregate), 10k keys -> blackhole
CREATE TABLE src (
  id    BIGINT,
  k     AS id % 10000,
  price AS (id * 7919) % 100000
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '1000000000000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '29999999'
);
CREATE TABLE snk (k BIGINT, cnt BIGINT, sum_price BIGINT, max_price BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO snk SELECT k, COUNT(*), SUM(price), MAX(price) FROM src GROUP BY k;
