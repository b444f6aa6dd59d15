CREATE TABLE t (x INT) WITH ('connector' = 'blackhole')
