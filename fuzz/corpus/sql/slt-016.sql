SELECT * FROM in_csv
