"""Flat binary sections for the on-disk caches (`stores.longterm.snapshot`, the BM25 index's own
part of it): string tables and ragged arrays stored as one blob plus offsets. A table
that does not match its offsets raises `ValueError` (the cache is then refused)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

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


def flat(arrays: Sequence[array | None], typecode: str) -> tuple[bytes, np.ndarray]:
    """The arrays end to end, and the offsets of each (a None array is empty)."""
    lengths = np.fromiter((len(a) if a is not None else 0 for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = array(typecode).tobytes()
    return b"".join(a.tobytes() if a is not None else empty for a in arrays), offsets


def ragged(
    data: memoryview, offsets: np.ndarray, typecode: str, count: int, itemsize: int = 4
) -> list[array]:
    """`flat`'s inverse."""
    if len(offsets) != count + 1 or (count and offsets[-1] * itemsize != len(data)):
        raise ValueError("a postings table does not match its offsets")
    out = []
    bounds = (offsets * itemsize).tolist()
    raw = bytes(data)
    for i in range(count):
        a = array(typecode)
        a.frombytes(raw[bounds[i] : bounds[i + 1]])
        out.append(a)
    return out
