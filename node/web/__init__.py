"""The HTTP edge: the route table, authentication, rate limits, app keys and background work."""
