SELECT auction, COUNT(*) FROM bids GROUP BY auction
