"""The PostgreSQL backend of the three memory tiers (`DREAMKEEPER_DATABASE_URL`)."""
