SELECT REGEXP_EXTRACT('foothebar', 'foo(.*?)(bar)', 2), REGEXP_EXTRACT('foothebar', 'the'), REGEXP_EXTRACT('abc', 'x(y)', 1)
