SELECT auction, COUNT(*)
FROM TABLE(SESSION(TABLE bids PARTITION BY bidder, DESCRIPTOR(ts), INTERVAL '8' SECOND))
GROUP BY auction, window_start, window_end
