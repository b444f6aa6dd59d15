SET 'table.local-time-zone' = 'Asia/Shanghai'
