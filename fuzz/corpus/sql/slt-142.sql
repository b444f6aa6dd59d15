SELECT channel, dir1, dir2, dir3, COUNT(*)
FROM TABLE(TUMBLE(TABLE q22, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
WHERE channel NOT LIKE 'channel-%'
GROUP BY channel, dir1, dir2, dir3, window_start, window_end
