CREATE TABLE IF NOT EXISTS t (x INT) WITH ('connector' = 'blackhole')
