DROP VIEW cheap
