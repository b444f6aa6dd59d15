CREATE TABLE bad (v INT) WITH ('connector' = 'datagen', 'fields.nope.min' = '1')
