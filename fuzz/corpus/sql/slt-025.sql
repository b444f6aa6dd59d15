SELECT id, name FROM messy
