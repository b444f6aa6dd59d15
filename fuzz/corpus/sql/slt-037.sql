SELECT auction, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE by_auction, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY auction, window_start, window_end
