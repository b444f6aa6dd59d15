CREATE TABLE out_json (auction BIGINT, price BIGINT, ts TIMESTAMP(3), ratio DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/json', 'format' = 'json')
