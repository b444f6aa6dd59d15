CREATE TABLE nope (a BIGINT) PARTITIONED BY (day) WITH ('connector' = 'blackhole')
