CREATE TABLE t (
  id BIGINT NOT NULL,
  price DECIMAL(10, 2),
  ms BIGINT,
  ts AS TO_TIMESTAMP_LTZ(ms, 3),
  doubled AS id * 2,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND,
  PRIMARY KEY (id) NOT ENFORCED
) WITH ('connector' = 'filesystem', 'path' = 'sql/data/t.csv', 'format' = 'csv')
