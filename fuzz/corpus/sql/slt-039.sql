SELECT price FROM default_partition
