SELECT window_start, COUNT(*), SUM(price), MIN(auction), MAX(bidder), SUM(CHAR_LENGTH(extra))
FROM TABLE(TUMBLE(TABLE q0, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
GROUP BY window_start, window_end
