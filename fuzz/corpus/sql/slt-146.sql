CREATE TABLE nums (id BIGINT, small INT, ts AS TO_TIMESTAMP_LTZ(id, 3),
  WATERMARK FOR ts AS ts)
WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
      'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '4',
      'fields.small.min' = '2147483647', 'fields.small.max' = '2147483647')
