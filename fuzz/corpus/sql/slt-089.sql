CREATE TABLE missing (x INT) WITH ('connector' = 'filesystem', 'path' = 'sql/data/missing.csv', 'format' = 'csv');
SELECT * FROM missing
