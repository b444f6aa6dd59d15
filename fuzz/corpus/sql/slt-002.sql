CREATE TABLE st (a BIGINT) WITH ('connector' = 'checkpoint', 'path' = '/x', 'operator' = 'o', 'format' = 'csv')
