SELECT priec FROM bids
