-- Bids from weir's built-in generator, counted per auction in sliding windows.
--   cargo run -- run sql/examples/hop_bids.sql
-- writes CSV part files to out/hop_bids/ (one or more per subtask).

CREATE TABLE bids (
  id      BIGINT,
  auction AS id % 100,                          -- 100 auctions
  price   AS (id * 7919) % 1000 + 1,            -- a price from 1 to 1000
  ts      AS TO_TIMESTAMP_LTZ(id * 10, 3),      -- a bid every 10 ms of event time
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '100000000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '999999'
);

CREATE TABLE hop_bids (
  auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  bids BIGINT, max_price BIGINT
) WITH ('connector' = 'filesystem', 'path' = 'out/hop_bids', 'format' = 'csv');

SET 'parallelism.default' = '2';
SET 'table.local-time-zone' = 'UTC';

INSERT INTO hop_bids
SELECT auction, window_start, window_end, COUNT(*), MAX(price)
FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
