CREATE VIEW expensive AS SELECT auction, price FROM bids WHERE price > 100
