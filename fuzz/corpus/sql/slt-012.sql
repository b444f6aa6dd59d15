CREATE TABLE bad (v INT) WITH ('connector' = 'datagen', 'fields.v.kind' = 'sequence')
