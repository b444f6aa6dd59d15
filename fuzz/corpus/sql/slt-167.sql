SELECT auction, window_start, COUNT(*), MAX(price)
FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
WHERE auction = 2
GROUP BY auction, window_start, window_end
