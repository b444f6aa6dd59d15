SELECT auction, price FROM by_auction WHERE auction IS NULL OR auction > 1
