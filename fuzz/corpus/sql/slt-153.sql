SELECT REGEXP_EXTRACT('abc', '(?<=a)b')
