-- Non-windowed GROUP BY (updating aggregate) over 1M keys -> blackhole: the
-- memory yardstick (state of a million groups). 30M rows, COUNT/SUM/MAX.
CREATE TABLE src (
  id    BIGINT,
  k     AS id % 1000000,
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
