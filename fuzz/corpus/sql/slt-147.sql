SELECT id, id * 3 FROM nums WHERE id % 2 = 0
