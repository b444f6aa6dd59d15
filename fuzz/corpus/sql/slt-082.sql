CREATE TABLE b (x INT) WITH ('connector' = 'blackhole', 'colour' = 'red')
