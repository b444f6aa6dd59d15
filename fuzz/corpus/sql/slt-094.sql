CREATE VIEW q0 AS SELECT auction, bidder, price, `dateTime`, extra FROM bid
