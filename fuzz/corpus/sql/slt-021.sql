CREATE TABLE out_parquet (auction BIGINT, price BIGINT, ts TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/parquet', 'format' = 'parquet')
