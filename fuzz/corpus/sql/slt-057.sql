SET 'parallelism.default' = 'many'
