SELECT id, DATE_FORMAT(ts, 'ss.SSS'), DATE_FORMAT(ts, 'ss') FROM millis
