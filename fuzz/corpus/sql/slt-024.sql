SELECT auction, price FROM in_parquet WHERE price >= 260
