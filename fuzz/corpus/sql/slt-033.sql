SELECT * FROM by_minute
