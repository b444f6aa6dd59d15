-- The issue-13 interval-join benchmark: 10M bids joined with themselves
-- within 1 s on the same auction (interval join; state freed as the
-- watermark passes). One bid per ms of event time; an auction bids every
-- 500 ms, so each bid joins 3 (itself, 500 ms and 1 s before): 30M rows out.
CREATE TABLE bids (
  id      BIGINT,
  auction AS id % 500,
  price   AS (id * 7919) % 100000,
  ts      AS TO_TIMESTAMP_LTZ(id, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '1000000000000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '9999999'
);
CREATE TABLE snk (auction BIGINT, price BIGINT, earlier_price BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO snk
SELECT b.auction, b.price, e.price FROM bids AS b JOIN bids AS e
ON b.auction = e.auction AND e.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts;
