SET 'weir.batch-size' = '1'
