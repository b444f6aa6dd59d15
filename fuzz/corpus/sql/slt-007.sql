CREATE TABLE seq (id BIGINT, name STRING,
  ts AS TO_TIMESTAMP_LTZ(id * 1000, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '25',
        'fields.name.length' = '4')
