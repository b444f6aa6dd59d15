CREATE TABLE bids (auction BIGINT NOT NULL, price BIGINT, ts TIMESTAMP(3),
  t2 AS ts + INTERVAL '1' SECOND,
  pt AS PROCTIME(),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND,
  PRIMARY KEY (auction) NOT ENFORCED
) WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv')
