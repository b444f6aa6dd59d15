CREATE TABLE strict (id BIGINT, name STRING)
WITH ('connector' = 'filesystem', 'path' = 'sql/data/messy.csv', 'format' = 'csv')
