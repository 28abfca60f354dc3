"""Long-term memory, what both backends share: the operations over each backend's
primitives (`operations.StoreOperations`), entry records, the entry table, the index
snapshot's format, save-time dedup, supersede and conflicts, and export/import. Each
backend's store is in its wing (`stores.files.memory_store`, `stores.postgres.memory_store`)."""
