CREATE TABLE nope (a BIGINT, d STRING) PARTITIONED BY (d) WITH (
  'connector' = 'filesystem', 'path' = '${__TEST_DIR__}/nope', 'format' = 'csv',
  'sink.partition-commit.policy.kind' = 'metastore,success-file'
)
