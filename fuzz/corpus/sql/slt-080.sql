CREATE TABLE k (x INT) WITH ('connector' = 'kafka2')
