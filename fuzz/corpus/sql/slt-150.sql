CREATE TABLE out (auction BIGINT, c BIGINT) WITH ('connector' = 'blackhole')
