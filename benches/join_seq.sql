-- Copied from ../shared/bench/ (the reference workloads): the issue-13 regular-join benchmark.
-- (e) regular inner join (updating-capable, unbounded state): 10M bids x 100k auctions -> blackhole
CREATE TABLE bids (
  id      BIGINT,
  auction AS id % 100000,
  price   AS (id * 7919) % 100000
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '1000000000000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '9999999'
);
CREATE TABLE auctions (
  aid      BIGINT,
  category AS aid % 10,
  seller   AS (aid * 31) % 5000
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '1000000000000',
  'fields.aid.kind' = 'sequence',
  'fields.aid.start' = '0',
  'fields.aid.end' = '99999'
);
CREATE TABLE snk (auction BIGINT, price BIGINT, category BIGINT, seller BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO snk SELECT b.auction, b.price, a.category, a.seller FROM bids AS b JOIN auctions AS a ON b.auction = a.aid;
