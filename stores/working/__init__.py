"""Working memory: keys with a TTL per namespace."""
