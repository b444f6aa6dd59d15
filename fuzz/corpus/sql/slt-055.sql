SET 'pipeline.name' = 'my job'
