CREATE TABLE st (a BIGINT) WITH ('connector' = 'checkpoint', 'path' = '/nonexistent')
