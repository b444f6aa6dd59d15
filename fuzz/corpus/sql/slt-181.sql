SELECT price, window_start, window_end, window_time
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
WHERE auction = 3
