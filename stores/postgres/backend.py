"""The PostgreSQL backend (`stores.contract.backend.StoreBackend`): every tier of every
agent in one database, so any worker on it serves any agent and each store's writer
exclusion is the database's own (locks), never a host-local one. The store's identity is
the `dreamkeeper_store` row, its readiness the schema (`stores.postgres.migrations`), and
with a payload key every tier is sealed at rest (`stores.postgres.sealing`). This is the
one place that builds them; `stores.backends.open_backend` chooses this backend when a
database is configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Unpack

from dreamkeeper.client.agent_keys import AgentKeyStore, WrappedKey, Wrapping
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.contract.backend import POSTGRESQL, TierOptions
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import Forgetter, HistoryKeys
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.contract.idle_marks import IdleMarks
from dreamkeeper.stores.contract.memory import MemoryStore
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.contract.working import WorkingMemoryStore
from dreamkeeper.stores.forget import stores_of
from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.agent_keys import (
    PostgresAgentKeyStore,
    carry_destroyed,
    carry_key,
    held_keys,
)
from dreamkeeper.stores.postgres.change_watch import MEMORY_TIER
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.database import database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.forget import postgres_forgetting
from dreamkeeper.stores.postgres.idle_marks import PostgresIdleMarks
from dreamkeeper.stores.postgres.keyring import keyring_dir
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.migrations import check_schema
from dreamkeeper.stores.postgres.sealing import Sealing, sealing_for
from dreamkeeper.stores.postgres.tokens import PostgresTokenStore
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore


class PostgresBackend:
    kind = POSTGRESQL

    def __init__(self, url: str, data_dir: Path | str | None = None) -> None:
        self.db = database(url)
        self.location = self.db.location
        # The payload key and the keyring are found as the codec finds them: in the
        # environment, or under the data directory (`stores.postgres.sealing`).
        self.data_dir = None if data_dir is None else Path(data_dir)
        self._sealing: Sealing | None = None
        self._sealing_known = False
        # Agents whose counter row a check found, with the change signal's token of that
        # check (`has_agent`).
        self._known_agents: dict[str, change_watch.Token] = {}

    @property
    def sealing(self) -> Sealing | None:
        """The process's sealer for this database, None without a payload key (refused
        when the database seals)."""
        if not self._sealing_known:
            self._sealing = sealing_for(self.db, self.data_dir)
            self._sealing_known = True
        return self._sealing

    # -- one agent's tiers -------------------------------------------------------------

    def memory(self, agent_id: str, **options: Unpack[TierOptions]) -> MemoryStore:
        return PostgresMemoryStore(self.db, agent_id, **options, sealing=self.sealing)

    def working(self, agent_id: str, **options: Unpack[TierOptions]) -> WorkingMemoryStore:
        return PostgresWorkingMemoryStore(self.db, agent_id, **options, sealing=self.sealing)

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore:
        return PostgresConversationStore(self.db, agent_id, sealing=self.sealing, **options)

    def documents(self, agent_id: str) -> AgentDocuments:
        return PostgresDocuments(self.db, validate_agent_id(agent_id), sealing=self.sealing)

    # -- what the whole store keeps ----------------------------------------------------

    def idle_marks(self) -> IdleMarks:
        return PostgresIdleMarks(self.db)

    def agent_keys(self, wrapping: Wrapping, data_dir: Path | None = None) -> AgentKeyStore:
        # Shared by every worker and client on the database, wrapped by the keyring of
        # `stores.postgres.keyring` (kept under the process's data directory by default).
        return PostgresAgentKeyStore(self.db, wrapping, keyring_dir(data_dir))

    def tokens(self) -> TokenStore:
        return PostgresTokenStore(self.db)

    def forgetting(self, *, history_keys: HistoryKeys | None = None) -> Forgetter:
        return postgres_forgetting(
            self.db, stores_of(self), sealing=self.sealing, history_keys=history_keys
        )

    # -- the store as a whole ----------------------------------------------------------

    def identity(self) -> StoreIdentity:
        found = self.read_identity()
        if found is None:
            # Migration 1 writes the row; a database without it has not been upgraded.
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
        """Whether the agent has a store here. serve asks it on every read, so a yes is
        given again without a round trip while the change signal says nothing touched
        the agent's counter row since (stores/postgres/change_watch.py: its insert and
        its delete notify), the same rule, and the same bound on staleness, as a warm
        read of the store itself; a forget elsewhere is seen as soon as such a read would
        see it. A no is always asked again (a first write may create the agent)."""
        watch = change_watch.watch(self.db)
        known = self._known_agents.get(agent_id)
        if known is not None and watch.unchanged(MEMORY_TIER, agent_id, known):
            return True
        token = watch.token()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT 1 FROM dk_memory_agent WHERE agent_id = %s", (agent_id,)
            ).fetchone()
        if row is None:
            self._known_agents.pop(agent_id, None)
            return False
        if len(self._known_agents) >= change_watch.MAX_MARKS:
            self._known_agents.clear()  # bounded on any fleet: the next checks ask again
        self._known_agents[agent_id] = token
        return True

    def check_ready(self) -> None:
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

    # -- data keys carried in by `migrate` (`stores.contract.backend.ImportsAgentKeys`) --

    def import_destroyed_keys(self, key_ids: set[str]) -> int:
        return carry_destroyed(self.db, key_ids)

    def import_agent_key(self, agent_id: str, stored: WrappedKey) -> bool:
        return carry_key(self.db, agent_id, stored)

    def held_agent_keys(self) -> tuple[set[tuple[str, str]], set[str]]:
        return held_keys(self.db)
