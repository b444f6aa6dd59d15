CREATE TABLE other (a INT) WITH ('connector' = 'blackhole')
