INSERT INTO by_minute
SELECT auction, price, ts, DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH:mm') FROM bids
