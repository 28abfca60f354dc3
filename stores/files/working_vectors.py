"""Working-memory vectors as files: `working-memory/.embeddings/{hash of key}.bin`,
keyed to the value's fingerprint (`stores.vectors.working_vectors` makes and caches
them; this is its `VectorStorage` on files)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dreamkeeper.stores.files.agent_files import unlink_within
from dreamkeeper.stores.files.vector_files import read_vector, vector_path, write_vector
from dreamkeeper.stores.vectors.working_vectors import vector_name


class VectorFiles:
    """Vectors in `working-memory/.embeddings/{hash of key}.bin`."""

    def __init__(self, directory: Path, *, within: Path | None = None) -> None:
        self.directory = directory
        self.within = within  # the agent's directory: no link below it is followed

    def read(self, key: str, fingerprint: str, model_key: bytes, dim: int) -> np.ndarray | None:
        return read_vector(self.directory, vector_name(key), fingerprint, model_key, dim)

    def write(self, key: str, vector: np.ndarray, fingerprint: str, model_key: bytes) -> None:
        write_vector(
            self.directory, vector_name(key), vector, fingerprint, model_key, within=self.within
        )

    def remove(self, key: str) -> None:
        self._unlink(vector_path(self.directory, vector_name(key)))

    def prune(self, live: set[str]) -> int:
        keep = {f"{vector_name(k)}.bin" for k in live}
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(".bin")]
        except FileNotFoundError:
            return 0
        stale = [n for n in names if n not in keep]
        for name in stale:
            self._unlink(self.directory / name)
        return len(stale)

    def _unlink(self, path: Path) -> None:
        if self.within is None:
            path.unlink(missing_ok=True)
        else:
            unlink_within(path, self.within)
