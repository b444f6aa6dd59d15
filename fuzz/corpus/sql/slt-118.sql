SELECT
    bidder,
    count(*) as bid_count,
    window_start AS starttime,
    window_end AS endtime
FROM TABLE(
        TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '100000' DAY))
GROUP BY bidder, window_start, window_end
HAVING count(*) > 20
