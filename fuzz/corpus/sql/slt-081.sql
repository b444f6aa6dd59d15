CREATE TABLE f (x INT) WITH ('connector' = 'filesystem', 'format' = 'csv')
