CREATE TABLE out_csv (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, note STRING)
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/csv', 'format' = 'csv')
