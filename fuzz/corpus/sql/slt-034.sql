SELECT auction, price, EXTRACT(SECOND FROM ts) FROM one_minute WHERE price > 250
