INSERT INTO out_parquet SELECT auction, price, ts FROM bids
