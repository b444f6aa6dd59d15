CREATE TABLE default_partition (price BIGINT, ts TIMESTAMP(3)) WITH (
  'connector' = 'filesystem',
  'path' = '${__TEST_DIR__}/by_auction/auction=__DEFAULT_PARTITION__',
  'format' = 'parquet'
)
