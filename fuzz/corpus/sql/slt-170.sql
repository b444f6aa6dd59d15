CREATE TABLE hourly (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 3600000, 3),
  WATERMARK FOR ts AS ts)
WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
      'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '47')
