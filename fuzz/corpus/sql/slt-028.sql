INSERT INTO out_one SELECT auction, price FROM bids
