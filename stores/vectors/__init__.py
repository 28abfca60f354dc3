"""Embeddings: the Embedder protocol, the HTTP and in-process backends, the stored vector
format and vectors in memory, the backfill, working memory's vectors."""
