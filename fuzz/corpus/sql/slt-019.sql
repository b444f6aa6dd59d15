CREATE TABLE in_json (ts TIMESTAMP(3), price BIGINT, ratio DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/json', 'format' = 'json')
