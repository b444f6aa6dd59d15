SELECT ts, price, ratio FROM in_json
