DESC expensive
