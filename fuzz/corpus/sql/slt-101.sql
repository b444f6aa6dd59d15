SELECT COUNT(*), SUM(price), MAX(price)
FROM TABLE(TUMBLE(TABLE q1, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
GROUP BY window_start, window_end
