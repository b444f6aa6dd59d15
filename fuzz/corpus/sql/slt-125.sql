SELECT bidTimeType, COUNT(*), SUM(price), SUM(c_counts)
FROM TABLE(TUMBLE(TABLE q14, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
GROUP BY bidTimeType, window_start, window_end
