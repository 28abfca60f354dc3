"""Long-term memory, the file backend: the store, its entry files, journal (the change feed), entry table, records, and its caches (index snapshot, vector pack); save-time dedup and export/import."""
