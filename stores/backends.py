"""Which backend holds the three tiers: files under one data directory (the embedded
default) or one PostgreSQL database (`DREAMKEEPER_DATABASE_URL`). Everything that opens a
store — the worker's store cache, `MemoryClient`, the CLI — asks `open_backend()` for it,
so no caller chooses a backend class itself.

A backend also answers for the whole store: its identity (the data directory's
`dreamkeeper-store.json`, or the database's `dreamkeeper_store` row), which agents it
holds, and whether it is ready for a worker (a writable directory; a database whose schema
is exactly this code's).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from dreamkeeper.client.agent_keys import DIR as AGENT_KEYS_DIR
from dreamkeeper.client.agent_keys import AgentKeyStore, AgentKeyStoreFactory, Wrapping
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.contract.backend import FILES, POSTGRESQL, StoreBackend
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.files.identity import ensure_identity, probe_writable, read_identity
from dreamkeeper.stores.vectors.embedder import Embedder

log = logging.getLogger(__name__)


class _Tiers:
    """The three tiers' constructors, shared: every backend's store classes take where
    the store is (a data directory, a database), the agent, then keyword options."""

    _where: Any
    _classes: tuple[str, str, str]  # "module:class" of the long-term, working, conversation stores

    def _store_class(self, tier: int) -> Any:
        return _class(self._classes[tier])

    def memory(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> MemoryStore:
        store = self._store_class(0)(self._where, agent_id, embeddings=embeddings, clock=clock)
        return cast(MemoryStore, store)

    def working(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> WorkingMemoryStore:
        store = self._store_class(1)(self._where, agent_id, embeddings=embeddings, clock=clock)
        return cast(WorkingMemoryStore, store)

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore:
        return cast(ConversationStore, self._store_class(2)(self._where, agent_id, **options))


class FileBackend(_Tiers):
    kind = FILES
    _classes = (
        "dreamkeeper.stores.files.memory_store:FileMemoryStore",
        "dreamkeeper.stores.files.working_memory:FileWorkingMemoryStore",
        "dreamkeeper.stores.files.conversation_memory:FileConversationStore",
    )

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = self._where = Path(data_dir)
        self.location = os.path.abspath(self.data_dir)

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

    def tokens(self) -> TokenStore:
        from dreamkeeper.stores.files.tokens import FileTokenStore

        return FileTokenStore(self.data_dir)


class PostgresBackend(_Tiers):
    """Every agent's tiers in one database: any worker on it serves any agent, each
    store's writer exclusion is the database's own (locks), never a host-local one."""

    kind = POSTGRESQL
    _classes = (
        "dreamkeeper.stores.postgres.memory_store:PostgresMemoryStore",
        "dreamkeeper.stores.postgres.working_memory:PostgresWorkingMemoryStore",
        "dreamkeeper.stores.postgres.conversation_memory:PostgresConversationStore",
    )

    def __init__(self, url: str, data_dir: Path | str | None = None) -> None:
        from dreamkeeper.stores.postgres.database import database

        self.db = self._where = database(url)
        self.location = self.db.location
        # The payload key and the keyring are found as the codec finds them: in the
        # environment, or under the data directory (`stores.postgres.sealing`).
        self.data_dir = None if data_dir is None else Path(data_dir)
        self._sealing: Any = None
        self._sealing_known = False

    @property
    def sealing(self) -> Any:
        """The process's sealer for this database (`stores.postgres.sealing.Sealing`),
        None without a payload key (refused when the database seals)."""
        if not self._sealing_known:
            from dreamkeeper.stores.postgres.sealing import sealing_for

            self._sealing = sealing_for(self.db, self.data_dir)
            self._sealing_known = True
        return self._sealing

    def memory(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> MemoryStore:
        store = self._store_class(0)(
            self.db, agent_id, embeddings=embeddings, clock=clock, sealing=self.sealing
        )
        return cast(MemoryStore, store)

    def working(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> WorkingMemoryStore:
        store = self._store_class(1)(
            self.db, agent_id, embeddings=embeddings, clock=clock, sealing=self.sealing
        )
        return cast(WorkingMemoryStore, store)

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore:
        store = self._store_class(2)(self.db, agent_id, sealing=self.sealing, **options)
        return cast(ConversationStore, store)

    def identity(self) -> StoreIdentity:
        found = self.read_identity()
        if found is None:
            # Migration 1 writes the row; a database without it has not been upgraded.
            from dreamkeeper.stores.postgres.migrations import check_schema

            check_schema(self.db)
            raise InvalidInput(f"the database at {self.location} has no store identity row")
        return found

    def read_identity(self) -> StoreIdentity | None:
        with self.db.transaction() as conn:
            exists = conn.execute("SELECT to_regclass('dreamkeeper_store') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return None
            row = conn.execute("SELECT store_id FROM dreamkeeper_store").fetchone()
        return StoreIdentity(str(row[0]), self.location) if row else None

    def agents(self) -> list[str]:
        # An agent's counter row is made by its store's first write (migration 2).
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT agent_id FROM dk_memory_agent ORDER BY agent_id")
            return [str(row[0]) for row in rows.fetchall()]

    def has_agent(self, agent_id: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT 1 FROM dk_memory_agent WHERE agent_id = %s", (agent_id,)
            ).fetchone()
        return row is not None

    def check_ready(self) -> None:
        from dreamkeeper.stores.postgres.migrations import check_schema

        # A database that cannot be reached is DatabaseUnavailable from the connection
        # itself (stores.postgres.database), naming it and PostgreSQL's cause.
        check_schema(self.db)
        # A process that could not read what the others sealed (no payload key, or
        # another keyring) is refused at start, not at its first read.
        sealing = self.sealing
        if sealing is not None:
            sealing.keys.keyring.check()

    def check_reachable(self) -> None:
        self.db.ping()

    def failure(self) -> str | None:
        return self.db.failure

    def holds_agent_keys(self) -> bool:
        with self.db.transaction() as conn:
            table = conn.execute("SELECT to_regclass('dreamkeeper_agent_keys')").fetchone()
            if not table or table[0] is None:
                return False
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM dreamkeeper_agent_keys)").fetchone()
        return bool(row and row[0])

    def tokens(self) -> TokenStore:
        from dreamkeeper.stores.postgres.tokens import PostgresTokenStore

        return PostgresTokenStore(self.db)


def _class(name: str) -> Any:
    # By name, when first used: a process given a database never loads the file stores'
    # modules it does not use, and only a process given one loads the PostgreSQL stores.
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


def agent_key_store(database_url: str | None) -> AgentKeyStoreFactory | None:
    """Where per-agent payload data keys live for a process on this backend: the database
    when a URL is set (`stores.postgres.agent_keys`: shared by every worker and client on
    it, wrapped by the keyring of `stores.postgres.keyring`), else None, and the codec
    keeps them under its data directory."""
    if not database_url:
        return None
    url = database_url

    def make(wrapping: Wrapping, data_dir: Path | None) -> AgentKeyStore:
        from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
        from dreamkeeper.stores.postgres.database import database
        from dreamkeeper.stores.postgres.keyring import keyring_dir

        return PostgresAgentKeyStore(database(url), wrapping, keyring_dir(data_dir))

    return make


def open_backend(settings: StoreSettings) -> StoreBackend:
    """The backend the settings name: the database when `database_url` is set, else the
    data directory."""
    if settings.database_url:
        return PostgresBackend(settings.database_url, settings.data_dir)
    return FileBackend(settings.data_dir)
