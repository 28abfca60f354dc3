"""The file backend (`stores.contract.backend.StoreBackend`): every tier of every agent
under one data directory, `{data}/agents/{agent}/`, and the store's own files beside
them — its identity (`dreamkeeper-store.json`), the access tokens (`access/`), the
per-agent payload data keys (`agent-keys/`) and the forget journal. This is the one
place that builds them; `stores.backends.open_backend` chooses this backend when no
database is configured."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Unpack

from dreamkeeper.client.agent_keys import AgentKeyError, AgentKeyStore, Wrapping
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.contract.backend import FILES, AgentKeyExport, TierOptions
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import Forgetter, HistoryKeys
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.contract.idle_marks import IdleMarks
from dreamkeeper.stores.contract.memory import MemoryStore
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.contract.working import WorkingMemoryStore
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.agent_keys import (
    DIR as AGENT_KEYS_DIR,
)
from dreamkeeper.stores.files.agent_keys import (
    FileAgentKeyStore,
    read_destroyed,
    read_key_file,
)
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.forgetting import FileForgetSteps
from dreamkeeper.stores.files.identity import ensure_identity, probe_writable, read_identity
from dreamkeeper.stores.files.idle_marks import FileIdleMarks
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.forget import Forgetting, stores_of

log = logging.getLogger(__name__)


class FileBackend:
    kind = FILES

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.location = os.path.abspath(self.data_dir)

    # -- one agent's tiers -------------------------------------------------------------

    def memory(self, agent_id: str, **options: Unpack[TierOptions]) -> MemoryStore:
        return FileMemoryStore(self.data_dir, agent_id, **options)

    def working(self, agent_id: str, **options: Unpack[TierOptions]) -> WorkingMemoryStore:
        return FileWorkingMemoryStore(self.data_dir, agent_id, **options)

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore:
        return FileConversationStore(self.data_dir, agent_id, **options)

    def documents(self, agent_id: str) -> AgentDocuments:
        return FileDocuments(AgentFiles(self.data_dir, validate_agent_id(agent_id)))

    # -- what the whole store keeps ----------------------------------------------------

    def idle_marks(self) -> IdleMarks:
        return FileIdleMarks(self.data_dir)

    def agent_keys(self, wrapping: Wrapping, data_dir: Path | None = None) -> AgentKeyStore:
        # Under this backend's own data directory, whatever the process's is.
        return FileAgentKeyStore(self.data_dir, wrapping)

    def tokens(self) -> TokenStore:
        return FileTokenStore(self.data_dir)

    def forgetting(self, *, history_keys: HistoryKeys | None = None) -> Forgetter:
        steps = FileForgetSteps(self.data_dir, stores_of(self), history_keys=history_keys)
        return Forgetting(steps)

    # -- the store as a whole ----------------------------------------------------------

    def identity(self) -> StoreIdentity:
        return ensure_identity(self.data_dir)

    def read_identity(self) -> StoreIdentity | None:
        return read_identity(self.data_dir)

    def agents(self) -> list[str]:
        root = self.data_dir / "agents"
        if not root.is_dir():
            return []
        found = []
        for child in sorted(root.iterdir()):
            try:
                validate_agent_id(child.name)
            except InvalidInput:
                log.warning("skipping %s: not a valid agent id", child)
                continue
            if (child / "memory").is_dir():
                found.append(child.name)
        return found

    def has_agent(self, agent_id: str) -> bool:
        return (self.data_dir / "agents" / agent_id).is_dir()

    def check_ready(self) -> None:
        probe_writable(self.data_dir)

    def check_reachable(self) -> None:
        return None

    def failure(self) -> str | None:
        return None

    def holds_agent_keys(self) -> bool:
        try:
            names = os.listdir(self.data_dir / AGENT_KEYS_DIR)
        except OSError:
            return False
        return any(name.endswith(".json") and not name.startswith(".") for name in names)

    def export_agent_keys(self) -> AgentKeyExport:
        """`{data}/agent-keys/` as stored, for `migrate` (`stores.contract.backend`)."""
        root = self.data_dir / AGENT_KEYS_DIR
        export = AgentKeyExport(destroyed=read_destroyed(root))
        for path in sorted(root.glob("*.json")) if root.is_dir() else []:
            try:
                export.keys.append((validate_agent_id(path.stem), read_key_file(path)))
            except (ValueError, AgentKeyError, FileNotFoundError) as exc:
                export.unreadable.append(f"{path.name}: not carried ({exc})")
        return export
