INSERT INTO out_json SELECT auction, price, ts, price / 1000.0 FROM bids WHERE auction = 3
