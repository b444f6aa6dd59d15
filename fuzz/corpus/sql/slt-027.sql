SELECT id, name FROM strict
