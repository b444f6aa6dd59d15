SELECT id, doubled, ts FROM t
