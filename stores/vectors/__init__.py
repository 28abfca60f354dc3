"""Embeddings: the Embedder protocol, the HTTP and in-process backends, vectors on disk and in memory, the backfill, working memory's vectors."""
