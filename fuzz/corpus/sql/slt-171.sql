SELECT window_start, window_time, COUNT(*)
FROM TABLE(TUMBLE(TABLE hourly, DESCRIPTOR(ts), INTERVAL '1' DAY))
GROUP BY window_start, window_end, window_time
