CREATE TABLE w (x INT, WATERMARK FOR nope AS nope) WITH ('connector' = 'blackhole')
