"""What a child process of a store test opens: the same agent's store, on the backend
the parent's test runs on (a data directory, or a PostgreSQL URL)."""

from __future__ import annotations

from typing import Any


def open_tier(tier: str, location: str, agent_id: str = "a1") -> Any:
    """`tier` ("working" or "conversations") of `agent_id` at `location`."""
    if location.startswith("postgresql:"):
        from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
        from dreamkeeper.stores.postgres.database import Database
        from dreamkeeper.stores.postgres.sealing import sealing_for
        from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

        db = Database(location)
        sealing = sealing_for(db, None)  # sealed when the parent's environment says so
        if tier == "working":
            return PostgresWorkingMemoryStore(db, agent_id, sealing=sealing)
        return PostgresConversationStore(db, agent_id, sealing=sealing)
    from dreamkeeper.stores.files.conversation_memory import FileConversationStore
    from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

    if tier == "working":
        return FileWorkingMemoryStore(location, agent_id)
    return FileConversationStore(location, agent_id)
