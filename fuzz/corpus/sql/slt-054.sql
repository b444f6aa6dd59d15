SELECT * FROM mixed
