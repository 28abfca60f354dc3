"""Flat binary sections for the on-disk caches (`stores.longterm.snapshot`, the BM25 index's own
part of it): string tables, and ragged arrays stored as one array plus offsets (kept that
way in memory too). A table that does not match its offsets raises `ValueError` (the
cache is then refused)."""

from __future__ import annotations

import numpy as np


def strings(values: list[str]) -> bytes:
    return "\n".join(values).encode("utf-8")


def split(view: memoryview, count: int) -> list[str]:
    if count == 0:
        return []
    values = bytes(view).decode("utf-8").split("\n")
    if len(values) != count:
        raise ValueError("a string table has the wrong length")
    return values


def check_offsets(offsets: np.ndarray, count: int, total: int) -> None:
    """That `offsets` cut `total` items into `count` runs: count + 1 of them, from 0,
    never decreasing, ending at `total`."""
    if (
        len(offsets) != count + 1
        or offsets[0] != 0
        or offsets[-1] != total
        or (count and bool((np.diff(offsets) < 0).any()))
    ):
        raise ValueError("a table does not match its offsets")
