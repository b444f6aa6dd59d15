CREATE TABLE w (x BIGINT, WATERMARK FOR x AS x) WITH ('connector' = 'blackhole')
