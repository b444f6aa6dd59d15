RESET 'pipeline.name'
