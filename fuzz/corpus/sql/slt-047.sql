CREATE TEMPORARY VIEW cheap (ident, p) AS SELECT id, price FROM t WHERE price < 10
