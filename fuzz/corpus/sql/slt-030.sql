SELECT auction, price FROM in_one WHERE auction = 3
