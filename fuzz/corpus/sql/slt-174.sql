SET 'table.local-time-zone' = 'GMT-05:00'
