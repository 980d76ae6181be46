print("prefetchctl")
