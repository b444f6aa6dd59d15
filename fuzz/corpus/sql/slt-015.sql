INSERT INTO out_csv
SELECT auction, window_start, COUNT(*), CASE WHEN COUNT(*) > 1 THEN 'many, "quoted"' ELSE '' END
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
