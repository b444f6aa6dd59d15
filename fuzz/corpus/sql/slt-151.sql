SELECT SPLIT_INDEX('Jack,John,Mary', ',', 2), SPLIT_INDEX('Jack,John,Mary', ',', 3), SPLIT_INDEX('a', ',', 0)
