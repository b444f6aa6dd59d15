CREATE TABLE st (a BIGINT) WITH ('connector' = 'checkpoint', 'path' = '/nonexistent/chk-1', 'operator' = 'WindowAggregate-0')
