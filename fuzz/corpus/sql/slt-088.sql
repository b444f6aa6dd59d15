CREATE TABLE t2 (x BIGNUM) WITH ('connector' = 'blackhole')
