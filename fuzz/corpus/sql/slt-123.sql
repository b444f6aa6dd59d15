CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar'
