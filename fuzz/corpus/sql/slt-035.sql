INSERT INTO by_auction SELECT price, CASE WHEN auction = 3 THEN NULL ELSE auction END, ts FROM bids
