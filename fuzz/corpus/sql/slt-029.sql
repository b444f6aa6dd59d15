CREATE TABLE in_one (auction BIGINT, price BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${__TEST_DIR__}/one', 'format' = 'csv')
