SELECT window_start, SUM(cnt)
FROM TABLE(TUMBLE(TABLE five_seconds, DESCRIPTOR(wt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end
