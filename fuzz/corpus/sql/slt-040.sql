SELECT * FROM wrongly_partitioned
