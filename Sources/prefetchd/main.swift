print("prefetchd")
