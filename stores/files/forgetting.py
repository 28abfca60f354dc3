"""`forget` on a data directory: the file backend's steps (`ForgetSteps`) for the shared
forgetting (`stores.forget.Forgetting`). The journal is `{data}/forget-journal.jsonl`
(ids only), one forget at a time is a file lock beside it, the index snapshot and vector
packs are files under the agent's directory, and the verification reads every byte of
every file under it (and of the exports it wrote)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal

from dreamkeeper.core.forgetting import ForgetReceipt, Removal, Verification
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import AgentStores, HistoryKeys
from dreamkeeper.stores.files.agent_files import AgentFiles, append_line, path_lock
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.entry_files import EMBEDDINGS_DIR, MEMORY
from dreamkeeper.stores.forget import (
    MAX_JOURNAL_BYTES,
    Forgetting,
    destroy_history_keys,
    exported_files,
)
from dreamkeeper.stores.longterm.snapshot import SNAPSHOT

JOURNAL = "forget-journal.jsonl"
LOCK = ".forget.lock"
MAX_SCAN_FILE_BYTES = 1_024 * 1_048_576


class FileForgetSteps:
    """The steps of a forget on one data directory (`ForgetSteps`)."""

    entries_name = "entry files"
    cache_name = "cache file"
    scanned: Literal["files", "rows"] = "files"

    def __init__(
        self,
        data_dir: Path | str,
        open_stores: Callable[[str], AgentStores],
        *,
        history_keys: HistoryKeys | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.open_stores = open_stores
        self.history_keys = history_keys
        self._journal = self.data_dir / JOURNAL
        self._path_lock = path_lock(self.data_dir / LOCK, within=self.data_dir)

    def hold(self) -> AbstractContextManager[object]:
        return self._path_lock.hold()

    def note(self, record: dict[str, object]) -> None:
        line = json.dumps({**record, "at": utc_now().isoformat()}, separators=(",", ":"))
        append_line(self._journal, line, within=self.data_dir)

    def journal_lines(self) -> list[bytes]:
        try:
            return safe_json.read_regular(self._journal, MAX_JOURNAL_BYTES).splitlines()
        except OSError:
            return []

    def _files(self, agent_id: str) -> AgentFiles:
        return AgentFiles(self.data_dir, agent_id)

    def place(self, agent_id: str, name: str) -> str:
        files = self._files(agent_id)
        return _rel(files.data_dir, files.path(name))

    def vector_count(self, agent_id: str, ids: list[str]) -> int:
        files = self._files(agent_id)
        return sum(files.path(MEMORY, EMBEDDINGS_DIR, f"{i}.bin").exists() for i in ids)

    def drop_vector(self, agent_id: str, entry_id: str) -> bool:
        return self._files(agent_id).unlink((MEMORY, EMBEDDINGS_DIR, f"{entry_id}.bin"))

    def caches(self, agent_id: str) -> list[str]:
        return [_rel(self.data_dir, p) for p in _cache_files(self._files(agent_id)) if p.exists()]

    def inventory(self, agent_id: str) -> list[Removal]:
        return _inventory(self._files(agent_id).root)

    def agent_documents(self, agent_id: str) -> AgentDocuments:
        return FileDocuments(self._files(agent_id))

    def agent_left(self, agent_id: str) -> list[str]:
        root = self._files(agent_id).root
        return [_rel(self.data_dir, root)] if os.path.lexists(root) else []

    def retire_keys(self, agent_id: str, receipt: ForgetReceipt) -> int:
        return destroy_history_keys(self.history_keys, agent_id)

    def destroy_keys_first(self, agent_id: str) -> int:
        return destroy_history_keys(self.history_keys, agent_id)

    def erase_agent(self, agent_id: str, receipt: ForgetReceipt) -> int:
        root = self._files(agent_id).root
        if root.is_symlink():
            root.unlink()
        elif root.exists():
            shutil.rmtree(root)
        return 0  # the data keys went first (destroy_keys_first)

    def left_to_operator(self, agent_id: str) -> list[str]:
        return [
            "backups and filesystem snapshots of the data directory taken before this "
            "forget still hold what it removed: age them out on their retention schedule"
        ]

    def seal_state(self) -> bool | None:
        return None  # files are not sealed at rest: their bytes are gone with them

    def raw_scan(self, stores: AgentStores, needles: list[bytes], result: Verification) -> None:
        files = self._files(stores.memory.agent_id)
        exports = [p for p in exported_files(stores.memory.documents) if p.is_file()]
        for path in [*_walk(files.root), *[p for p in exports if not p.is_symlink()]]:
            result.files_scanned += 1
            try:
                data = safe_json.read_regular(path, MAX_SCAN_FILE_BYTES).lower()
            except OSError:
                continue
            if any(n in data for n in needles):
                result.files_containing.append(_rel(self.data_dir, path))


def file_stores(data_dir: Path | str) -> Callable[[str], AgentStores]:
    """Open an agent's three file stores (no embedding model: erasure and its
    verification need none, and an unreachable endpoint must not stop a forget)."""
    from dreamkeeper.stores.files.conversation_memory import FileConversationStore
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

    def open_stores(agent_id: str) -> AgentStores:
        return AgentStores(
            memory=FileMemoryStore(data_dir, agent_id),
            working=FileWorkingMemoryStore(data_dir, agent_id),
            conversation=FileConversationStore(data_dir, agent_id),
        )

    return open_stores


def file_forgetting(data_dir: Path | str, *, history_keys: HistoryKeys | None = None) -> Forgetting:
    """The forgetting of one data directory, on its own stores."""
    steps = FileForgetSteps(data_dir, file_stores(data_dir), history_keys=history_keys)
    return Forgetting(steps)


def _cache_files(files: AgentFiles) -> list[Path]:
    caches = [files.path(*SNAPSHOT)]
    folder = files.path(MEMORY, EMBEDDINGS_DIR)
    try:
        caches += [folder / n for n in os.listdir(folder) if n.startswith("pack-")]
    except OSError:
        pass
    return caches


def _walk(root: Path) -> Iterable[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if not path.is_symlink():
                yield path


def _inventory(root: Path) -> list[Removal]:
    """What a whole-agent erasure removes: files per top-level part of the directory."""
    counts: dict[str, int] = {}
    for path in _walk(root) if root.is_dir() and not root.is_symlink() else []:
        top = path.relative_to(root).parts[0]
        counts[top] = counts.get(top, 0) + 1
    base = root.parent.parent
    return [
        Removal(place=_rel(base, root / top), what="files", count=n)
        for top, n in sorted(counts.items())
    ]


def _rel(base: Path, path: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
