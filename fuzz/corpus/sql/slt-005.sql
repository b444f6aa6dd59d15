CREATE TABLE sink (a BIGINT) WITH ('connector' = 'blackhole')
