"""Dreamkeeper's own ranking, the same on every backend: BM25 and its tokenizer, fusion with vectors, the long-term query and its result format, the vocabulary."""
