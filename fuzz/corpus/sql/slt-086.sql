SELECT ts * 2 FROM bids
