SELECT window_start, COUNT(*)
FROM TABLE(HOP(TABLE hourly, DESCRIPTOR(ts), INTERVAL '12' HOUR, INTERVAL '1' DAY))
GROUP BY window_start, window_end
