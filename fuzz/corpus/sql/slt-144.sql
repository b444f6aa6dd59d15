SELECT name, n * 10, CASE WHEN n > 1 THEN 'big' ELSE 'small' END
FROM (VALUES ('a', 1), ('b', 2), ('c', 3)) AS v(name, n)
WHERE name <> 'b'
