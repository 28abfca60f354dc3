"""Entry vectors as files, `memory/.embeddings/{id}.bin` (the format is
`stores.vectors.vectors`'), written atomically."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from dreamkeeper.stores.files.agent_files import atomic_write_bytes
from dreamkeeper.stores.vectors.vectors import decode_vector, encode_vector


def vector_path(directory: Path, entry_id: str) -> Path:
    return directory / f"{entry_id}.bin"


def read_vector(
    directory: Path, entry_id: str, fingerprint: str, model_key: bytes, dim: int | None = None
) -> np.ndarray | None:
    try:
        with open(vector_path(directory, entry_id), "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return decode_vector(data, fingerprint, model_key, dim)


def write_vector(
    directory: Path,
    entry_id: str,
    vector: np.ndarray,
    fingerprint: str,
    model_key: bytes,
    *,
    within: Path | None = None,
) -> None:
    atomic_write_bytes(
        vector_path(directory, entry_id),
        encode_vector(vector, fingerprint, model_key),
        within=within,
    )


def file_reader(directory: Path) -> Callable[[list[str]], Mapping[str, bytes]]:
    """What `EntryVectors` reads vectors through: the files of the ids that have one."""

    def read(ids: list[str]) -> Mapping[str, bytes]:
        # Many ids (a cold start): one directory listing beats a failed open per entry.
        present = existing_files(directory) if len(ids) > 256 else None
        found: dict[str, bytes] = {}
        for entry_id in ids:
            if present is not None and entry_id not in present:
                continue
            try:
                with open(vector_path(directory, entry_id), "rb") as handle:
                    found[entry_id] = handle.read()
            except OSError:
                continue
        return found

    return read


def existing_files(directory: Path) -> set[str]:
    """Ids with a vector file: one directory listing instead of a failed open per entry."""
    try:
        return {n[:-4] for n in os.listdir(directory) if n.endswith(".bin")}
    except FileNotFoundError:
        return set()
