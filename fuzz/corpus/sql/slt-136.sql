SELECT CASE WHEN channel LIKE 'channel-%' THEN 'other' ELSE channel_id END AS id, COUNT(*), COUNT(DISTINCT channel)
FROM TABLE(TUMBLE(TABLE q21, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
GROUP BY CASE WHEN channel LIKE 'channel-%' THEN 'other' ELSE channel_id END, window_start, window_end
