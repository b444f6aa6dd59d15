CREATE TABLE rnd (v INT, s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '500',
  'rows-per-second' = '1000000', 'fields.v.min' = '5', 'fields.v.max' = '10', 'fields.s.length' = '3')
