CREATE TABLE in_parquet (price BIGINT, auction BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/parquet', 'format' = 'parquet')
