SELECT 7 / 2, -7 / 2, 7 % 3, UPPER('abc') || '-' || CAST(42 AS STRING)
